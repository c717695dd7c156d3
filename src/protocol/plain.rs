//! The plain (and fenced) lock's protocol, with no threads: acquire, release
//! and renew as Lua scripts, wire-compatible with Redisson's `RLock`.
//!
//! Layout (the same as Redisson's, so Java and Rust services can guard one
//! resource):
//! - the lock key is a hash `{ "<client-uuid>:<thread-n>": hold_count }` with
//!   a `PEXPIRE` of the lease;
//! - when the count reaches zero the key is deleted and `0` is published on
//!   `redisson_lock__channel:{<key>}` (the braces keep the channel in the
//!   key's cluster slot).
//!
//! Every owner check happens inside the scripts; names and owners travel only
//! as `KEYS[]`/`ARGV[]`, never inside Lua source.

use std::time::Duration;

use redis::{ConnectionLike, RedisResult, Script, Value};

use super::{evalsha, millis, run, token, unexpected, Released};
use crate::names::{channel_name, token_key};

/// The message published when a lock is freed (Redisson's `UNLOCK_MESSAGE`).
pub(crate) const UNLOCK_MESSAGE: &str = "0";

/// The acquire logic both acquire scripts share, around `$then` (what to
/// return once the hold is taken): free, or already ours → one more hold and
/// the lease `ARGV[1]`; `ARGV[3] == "1"` (no guard of this owner is alive in
/// its client) makes it the first hold whatever count Redis still shows for
/// the owner — a stale count from a lost lease or an unconfirmed handoff must
/// not outlive it. Held by someone else → its PTTL (-1 when it has no expiry).
macro_rules! acquire_script {
    ($($then:expr),+) => {
        concat!(
            r#"
local free = redis.call('exists', KEYS[1]) == 0
if free or (redis.call('hexists', KEYS[1], ARGV[2]) == 1) then
    if ARGV[3] == '1' then
        redis.call('hset', KEYS[1], ARGV[2], 1)
    else
        redis.call('hincrby', KEYS[1], ARGV[2], 1)
    end
    redis.call('pexpire', KEYS[1], ARGV[1])
"#,
            $($then),+,
            r#"
end
return redis.call('pttl', KEYS[1])
"#
        )
    };
}

/// The Lua function `mint(key)` every fenced script defines: a new fencing
/// token from the counter `key` — one more than the last token, and never
/// less than the server clock in microseconds, so when Redis lost the counter
/// (restart without persistence, flush) new tokens still exceed every token
/// issued before, as long as the server clock did not go back and fewer than
/// a million tokens a second were taken on average. Lua numbers are doubles:
/// exact up to 2^53, i.e. for clock values until the 23rd century.
macro_rules! mint_fn {
    () => {
        r#"
local function mint(key)
    local t = redis.call('time')
    local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
    local tok = math.max(tonumber(redis.call('get', key) or '0') + 1, now)
    redis.call('set', key, string.format('%.0f', tok))
    return tok
end
"#
    };
}
pub(crate) use mint_fn;

/// Acquire (see [`acquire_script!`]): taken → nil.
pub(crate) const ACQUIRE: &str = acquire_script!("    return nil\n");

/// Fenced acquire: taken → `{token}` — a new token from `KEYS[2]`
/// (`redisson_lock_token:{<key>}`) when `ARGV[4] == "1"` or the lock was
/// free, else `{-1}` (a reentrant hold keeps its token). Held elsewhere →
/// PTTL.
pub(crate) const ACQUIRE_FENCED: &str = acquire_script!(
    "    if ARGV[4] ~= '1' and not free then\n        return {-1}\n    end\n",
    mint_fn!(),
    "    return {mint(KEYS[2])}\n"
);

/// Release: not ours → nil. With `ARGV[4] == "1"` this is the owner's last
/// hold in its client: its field goes (`HDEL`, and the hash with it — a lock
/// hash has one owner field). Otherwise counted: more holds in Redis → count
/// − 1, refresh the lease `ARGV[2]`, return 0; the last → delete. Then:
/// - with a successor in `ARGV[5]` (a thread of the same client queued for the
///   lock) and either `ARGV[7] == "1"` or nobody else subscribed to the unlock
///   channel (`PUBSUB NUMSUB` minus our own `ARGV[6]` subscriptions) → the
///   lock passes to the successor with its lease `ARGV[8]`, return 2 — or
///   `{2, token}` with a token minted from `KEYS[3]` for a fenced successor;
/// - otherwise publish the unlock message, return 1 — or 3 when a successor
///   was named but others wait (so it should let them go first).
pub(crate) const RELEASE: &str = concat!(
    r#"
if ARGV[4] == '1' then
    if redis.call('hdel', KEYS[1], ARGV[3]) == 0 then
        return nil
    end
else
    local count = redis.call('hget', KEYS[1], ARGV[3])
    if not count then
        return nil
    end
    if tonumber(count) > 1 then
        redis.call('hincrby', KEYS[1], ARGV[3], -1)
        redis.call('pexpire', KEYS[1], ARGV[2])
        return 0
    end
    redis.call('del', KEYS[1])
end
if ARGV[5] and (ARGV[7] == '1' or redis.call('pubsub', 'numsub', KEYS[2])[2] <= tonumber(ARGV[6])) then
    redis.call('hset', KEYS[1], ARGV[5], 1)
    redis.call('pexpire', KEYS[1], ARGV[8])
    if KEYS[3] then
"#,
    mint_fn!(),
    r#"
        return {2, mint(KEYS[3])}
    end
    return 2
end
redis.call('publish', KEYS[2], ARGV[1])
if ARGV[5] then
    return 3
end
return 1
"#
);

/// Renew: extends the lease only while our owner field is there; 1 if
/// renewed, 0 if the lease is no longer ours. Sent in pipelined batches by the
/// renewal thread (see `renewal.rs`), hence a plain source string.
///
/// A read hold of a read/write lock passes its timeout key prefix as
/// `KEYS[2]`: its own timeout keys are extended (not other readers' — a
/// crashed reader's hold must run out), it is lost when none of them is left,
/// and the hash's expiry is only ever lengthened.
pub(crate) const RENEW: &str = r#"
if redis.call('hexists', KEYS[1], ARGV[2]) == 0 then
    return 0
end
if KEYS[2] then
    local alive = 0
    for i = tonumber(redis.call('hget', KEYS[1], ARGV[2])), 1, -1 do
        alive = alive + redis.call('pexpire', KEYS[2] .. ':' .. i, ARGV[1])
    end
    if alive == 0 then
        return 0
    end
    local ttl = redis.call('pttl', KEYS[1])
    redis.call('pexpire', KEYS[1], math.max(ttl, tonumber(ARGV[1])))
    return 1
end
redis.call('pexpire', KEYS[1], ARGV[1])
return 1
"#;

/// What an acquire attempt found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Acquire {
    /// We hold it now (first hold or one more reentrant hold), with the
    /// fencing token minted by this acquire, if one was asked for.
    Acquired { fence: Option<u64> },
    /// Someone else holds it; `ttl` is its remaining lease, `None` when the
    /// key has no expiry (not written by a lease lock).
    HeldElsewhere { ttl: Option<Duration> },
}

/// Whom a release may hand the lock to directly: a thread of the same
/// client queued for it (see `local`).
#[derive(Clone, Copy)]
pub(crate) struct Successor<'h> {
    pub(crate) owner: &'h str,
    pub(crate) lease: Duration,
    /// Hand over even when other clients wait (the streak is short yet).
    pub(crate) force: bool,
    /// Our own subscriptions to the unlock channel (0 or 1), which the script
    /// subtracts from the channel's subscriber count.
    pub(crate) own_subscriptions: u32,
    /// The successor asked for a fencing token: the script mints one.
    pub(crate) fenced: bool,
}

/// Whether an acquire deals in fencing tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fence {
    /// A plain lock: no token, no extra key.
    None,
    /// Fenced, and this owner already has a token for its holds here.
    Keep,
    /// Fenced, and a new token is needed.
    Mint,
}

/// The plain lock's scripts, hashed once per client.
pub(crate) struct PlainScripts {
    acquire: Script,
    acquire_fenced: Script,
    release: Script,
}

impl PlainScripts {
    pub(crate) fn new() -> Self {
        PlainScripts {
            acquire: Script::new(ACQUIRE),
            acquire_fenced: Script::new(ACQUIRE_FENCED),
            release: Script::new(RELEASE),
        }
    }

    /// One `EVALSHA` (plus `SCRIPT LOAD` and a retry only when the server's
    /// script cache was flushed).
    pub(crate) fn acquire(
        &self,
        con: &mut dyn ConnectionLike,
        key: &str,
        owner: &str,
        lease: Duration,
        fresh: bool,
        fence: Fence,
    ) -> RedisResult<Acquire> {
        let fresh = if fresh { "1" } else { "0" };
        let reply: Value = match fence {
            Fence::None => {
                let mut cmd = evalsha(&self.acquire, 1);
                cmd.arg(key).arg(millis(lease)).arg(owner).arg(fresh);
                run(con, &self.acquire, &cmd)?
            }
            Fence::Keep | Fence::Mint => {
                let mut cmd = evalsha(&self.acquire_fenced, 2);
                cmd.arg(key)
                    .arg(token_key(key))
                    .arg(millis(lease))
                    .arg(owner)
                    .arg(fresh)
                    .arg(if fence == Fence::Mint { "1" } else { "0" });
                run(con, &self.acquire_fenced, &cmd)?
            }
        };
        Ok(match reply {
            Value::Nil => Acquire::Acquired { fence: None },
            Value::Array(items) => Acquire::Acquired {
                fence: items.first().and_then(token),
            },
            Value::Int(ms) if ms >= 0 => Acquire::HeldElsewhere {
                ttl: Some(Duration::from_millis(ms as u64)),
            },
            Value::Int(_) => Acquire::HeldElsewhere { ttl: None },
            other => return Err(unexpected("acquire", &other)),
        })
    }

    /// One `EVALSHA`; `lease` is what a remaining reentrant hold keeps;
    /// `last`: no other guard of `owner` is alive in this client;
    /// `successor` is whom the lock may pass to directly.
    pub(crate) fn release(
        &self,
        con: &mut dyn ConnectionLike,
        key: &str,
        owner: &str,
        lease: Duration,
        last: bool,
        successor: Option<Successor<'_>>,
    ) -> RedisResult<Released> {
        let fenced = successor.as_ref().is_some_and(|n| n.fenced);
        let mut cmd = evalsha(&self.release, if fenced { 3 } else { 2 });
        cmd.arg(key).arg(channel_name(key));
        if fenced {
            cmd.arg(token_key(key));
        }
        cmd.arg(UNLOCK_MESSAGE)
            .arg(millis(lease))
            .arg(owner)
            .arg(if last { "1" } else { "0" });
        if let Some(next) = &successor {
            cmd.arg(next.owner)
                .arg(next.own_subscriptions)
                .arg(if next.force { "1" } else { "0" })
                .arg(millis(next.lease));
        }
        let reply: Value = run(con, &self.release, &cmd)?;
        Ok(match reply {
            Value::Nil => Released::NotHeld,
            Value::Int(0) => Released::StillHeld,
            Value::Int(2) => Released::HandedOver { fence: None },
            Value::Array(items) => Released::HandedOver {
                fence: items.get(1).and_then(token),
            },
            Value::Int(3) => Released::FreedForOthers,
            Value::Int(_) => Released::Freed,
            other => return Err(unexpected("release", &other)),
        })
    }
}
