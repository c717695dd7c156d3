//! The fair lock's protocol: Redisson's `RedissonFairLock` layout — the lock
//! hash, a queue list `redisson_lock_queue:{<name>}`, a timeout zset
//! `redisson_lock_timeout:{<name>}`, and one channel per waiter
//! `redisson_lock__channel:{<name>}:<owner>` so a release wakes exactly the
//! next waiter.
//!
//! Unlike Redisson, a waiter's place does not inherit the timeouts of the
//! waiters ahead of it (the chain behind its queue hangs, redisson #3004,
//! #2883, #3730, #1353): each place expires [`QUEUE_LEASE`] after its waiter
//! last confirmed it, and every waiter confirms it at least every third of
//! that while it waits. Every script first drops the places that expired, so
//! a waiter that died costs the ones behind it at most one `QUEUE_LEASE`.
//! Times are the server's (`TIME`), so client clocks do not matter.

use std::time::Duration;

use redis::{ConnectionLike, RedisResult, Script, Value};

use super::millis;
use super::plain::{mint_fn, UNLOCK_MESSAGE};
use crate::names::{channel_name, queue_key, timeout_key, token_key};

/// How long a waiter's place in the queue lasts without being confirmed.
pub(crate) const QUEUE_LEASE: Duration = Duration::from_secs(5);

/// The server time in ms as `now`, and the places that expired dropped.
const PURGE: &str = r#"
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local dead = redis.call('zrangebyscore', KEYS[3], '-inf', now)
for i = 1, #dead do
    redis.call('lrem', KEYS[2], 0, dead[i])
    redis.call('zrem', KEYS[3], dead[i])
end
"#;

/// Acquire: KEYS lock, queue, timeouts; ARGV lease, owner, queue lease.
/// Ours already → one more hold, nil. Free and (no queue or we are first) →
/// ours, out of the queue, nil. Otherwise take (or confirm) our place at the
/// end of the queue and return how long to wait: the holder's PTTL, or when
/// the lock is free but another waiter is first, until that waiter's place
/// expires; -1 when the holder has no expiry.
///
/// Fenced (a token counter in `KEYS[4]`): a first hold returns `{token}`, a
/// reentrant one `{-1}` (it keeps the token of the outer hold).
const ACQUIRE: &str = r#"
if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
    redis.call('hincrby', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    if KEYS[4] then
        return {-1}
    end
    return nil
end
local first = redis.call('lindex', KEYS[2], 0)
if redis.call('exists', KEYS[1]) == 0 and ((not first) or first == ARGV[2]) then
    if first then
        redis.call('lpop', KEYS[2])
    end
    redis.call('zrem', KEYS[3], ARGV[2])
    redis.call('hset', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    if KEYS[4] then
        return {mint(KEYS[4])}
    end
    return nil
end
if redis.call('zadd', KEYS[3], now + tonumber(ARGV[3]), ARGV[2]) == 1 then
    redis.call('rpush', KEYS[2], ARGV[2])
end
local ttl = redis.call('pttl', KEYS[1])
if ttl == -2 then
    first = redis.call('lindex', KEYS[2], 0)
    return math.max(tonumber(redis.call('zscore', KEYS[3], first)) - now, 0)
end
return ttl
"#;

/// Release: KEYS lock, queue, timeouts, channel; ARGV message, lease, owner.
/// Not ours → nil; more holds → count − 1, 0; the last → delete, wake the
/// first live waiter on its own channel, 1.
const RELEASE: &str = r#"
if redis.call('hexists', KEYS[1], ARGV[3]) == 0 then
    return nil
end
if redis.call('hincrby', KEYS[1], ARGV[3], -1) > 0 then
    redis.call('pexpire', KEYS[1], ARGV[2])
    return 0
end
redis.call('del', KEYS[1])
local next = redis.call('lindex', KEYS[2], 0)
if next then
    redis.call('publish', KEYS[4] .. ':' .. next, ARGV[1])
end
return 1
"#;

/// Cancel: KEYS lock, queue, timeouts, channel; ARGV message, owner. Leaves
/// the queue; if we were first and the lock is free, wakes the next waiter so
/// it does not wait for our place to expire.
const CANCEL: &str = r#"
local first = redis.call('lindex', KEYS[2], 0)
redis.call('lrem', KEYS[2], 0, ARGV[2])
redis.call('zrem', KEYS[3], ARGV[2])
if first == ARGV[2] and redis.call('exists', KEYS[1]) == 0 then
    local next = redis.call('lindex', KEYS[2], 0)
    if next then
        redis.call('publish', KEYS[4] .. ':' .. next, ARGV[1])
    end
end
return 1
"#;

/// What a fair acquire attempt found.
pub(crate) enum FairAcquire {
    /// Ours now, with a new token (fenced first hold), `Some(None)` for a
    /// fenced reentrant hold, `None` when not fenced.
    Acquired(Option<Option<u64>>),
    /// Queued; wait at most this long before trying again (`None`: the
    /// holder has no expiry).
    Queued(Option<Duration>),
}

/// The fair lock's scripts.
pub(crate) struct FairScripts {
    acquire: Script,
    release: Script,
    cancel: Script,
}

impl FairScripts {
    pub(crate) fn new() -> Self {
        FairScripts {
            acquire: Script::new(&format!("{PURGE}{}{ACQUIRE}", mint_fn!())),
            release: Script::new(&format!("{PURGE}{RELEASE}")),
            cancel: Script::new(CANCEL),
        }
    }

    pub(crate) fn acquire(
        &self,
        con: &mut dyn ConnectionLike,
        key: &str,
        owner: &str,
        lease: Duration,
        fenced: bool,
    ) -> RedisResult<FairAcquire> {
        let mut invocation = self.acquire.key(key);
        invocation.key(queue_key(key)).key(timeout_key(key));
        if fenced {
            invocation.key(token_key(key));
        }
        let reply: Value = invocation
            .arg(millis(lease))
            .arg(owner)
            .arg(millis(QUEUE_LEASE))
            .invoke(con)?;
        Ok(match reply {
            Value::Nil => FairAcquire::Acquired(None),
            Value::Array(items) => FairAcquire::Acquired(Some(match items.first() {
                Some(Value::Int(n)) if *n > 0 => Some(*n as u64),
                _ => None,
            })),
            Value::Int(ms) if ms >= 0 => {
                FairAcquire::Queued(Some(Duration::from_millis(ms as u64)))
            }
            _ => FairAcquire::Queued(None),
        })
    }

    /// `Some(true)` freed, `Some(false)` still held by other holds, `None`
    /// not ours.
    pub(crate) fn release(
        &self,
        con: &mut dyn ConnectionLike,
        key: &str,
        owner: &str,
        lease: Duration,
    ) -> RedisResult<Option<bool>> {
        let freed: Option<i64> = self
            .release
            .key(key)
            .key(queue_key(key))
            .key(timeout_key(key))
            .key(channel_name(key))
            .arg(UNLOCK_MESSAGE)
            .arg(millis(lease))
            .arg(owner)
            .invoke(con)?;
        Ok(freed.map(|n| n == 1))
    }

    pub(crate) fn cancel(
        &self,
        con: &mut dyn ConnectionLike,
        key: &str,
        owner: &str,
    ) -> RedisResult<()> {
        self.cancel
            .key(key)
            .key(queue_key(key))
            .key(timeout_key(key))
            .key(channel_name(key))
            .arg(UNLOCK_MESSAGE)
            .arg(owner)
            .invoke(con)
    }
}
