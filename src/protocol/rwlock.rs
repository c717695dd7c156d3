//! The read/write lock's protocol: Redisson's `RReadWriteLock` layout.
//!
//! - the lock key is a hash `{ "mode": "read"|"write", "<owner>": reads,
//!   "<owner>:write": writes }` with a `PEXPIRE`;
//! - every read hold has its own timeout key
//!   `{<key>}:<owner>:rwlock_timeout:<n>` (n = 1 for the first hold of the
//!   owner, 2 for the second, …), so each reader's lease runs on its own and
//!   the hash lives as long as the longest of them;
//! - unlocks publish on `redisson_rwlock:{<key>}`: `0` (wake one waiter of
//!   each client) when the last reader leaves, `1` (wake all) when a writer
//!   leaves.
//!
//! Where we differ from Redisson, and why:
//! - **Writers first.** A writer that has to wait enters
//!   `{<key>}:rwlock_write_waiters` (a zset of owners scored with the server
//!   time at which the entry expires, [`WRITER_INTENT`] after the writer last
//!   confirmed it). While a live writer waits, a reader that holds nothing
//!   yet waits too; readers already holding (reentrant reads, a writer's own
//!   reads) go on. So a steady stream of readers cannot starve a writer —
//!   Redisson lets it. A writer that gives up leaves the set at once; one
//!   that died drops out within `WRITER_INTENT`.
//! - **Each reader renews only its own holds** (Redisson's renewal extends
//!   every reader's timeout keys, so a crashed reader's hold lives as long as
//!   any other reader renews — and then one lease more). The hash's expiry is
//!   never shortened by a renewal, and every read hold (also one with an
//!   explicit lease, which is not extended) re-asserts it at least every
//!   [`READ_KEEPALIVE`]: Redisson ≥ 4.4's read renewal sets it to its own
//!   lease even when that shortens it.
//! - **Upgrading is refused** (a reader asking for the write lock would wait
//!   for itself forever in Redisson): the acquire answers at once and the
//!   client returns [`Error::UpgradeWouldDeadlock`](crate::Error).
//! - A writer that keeps read holds (a downgrade) and releases its write hold
//!   publishes `1`, so readers waiting for it get in (Redisson stays silent
//!   and they wait for their timeout).
//!
//! Every key and the channel share the lock key's cluster slot: the hash
//! tags are `{<key>}` (or the key's own tag when it has braces), as
//! Redisson's `suffixName`/`prefixName` make them.

use std::time::Duration;

use redis::{ConnectionLike, RedisResult};

use super::admin::shape_fn;
use super::{keep_fn, millis, Call, Lua, PubSub, Release, Request};
use crate::names::{push_tagged, rw_channel as channel, timeout_prefix, write_field, writers_key};
use crate::options::Kind;

/// How often a read hold re-asserts the shared hash's expiry at least (its
/// renewal, or for an explicit lease a keep-alive that extends nothing of
/// its own): another library's reader may set the hash's expiry shorter
/// (Redisson ≥ 4.4's read renewal sets it to its own lease), and when that
/// reader dies the hash must not run out under a live leasehold reader.
/// Holds as long as the other library's lease is longer than this plus a
/// round trip and the renewal thread's scheduling delay (a busy machine:
/// hundreds of ms; Redisson's default watchdog is 30 s).
pub(crate) const READ_KEEPALIVE: Duration = Duration::from_millis(500);

/// How long a waiting writer's place in the writer set lasts without being
/// confirmed; a waiting writer confirms it at least every third of that.
pub(crate) const WRITER_INTENT: Duration = Duration::from_secs(5);

/// Message of a read unlock (wake one waiter), Redisson's `UNLOCK_MESSAGE`.
const WAKE_ONE: &str = "0";
/// Message of a write unlock (wake every waiter), Redisson's
/// `READ_UNLOCK_MESSAGE`.
pub(crate) const WAKE_ALL: &str = "1";

/// The server time in ms as `now`.
pub(super) const NOW: &str = r#"
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
"#;

/// The Lua helper `lock_mode()` both acquires start with: the read/write
/// lock's `mode` (`read`, `write`; false when free) — or, for a key that is
/// not one, nil and the acquire's reply: `{'n', <its shape>}` for an application's
/// hash or string (see `admin::shape_fn!`), nothing changed; the holder's
/// PTTL for another kind's lock (a plain or fair lock's hash has no
/// `mode`: held, to wait for). One more command (`EXISTS`) only when no
/// `mode` was found.
pub(super) const LOCK_MODE: &str = r#"
local function lock_mode()
    local mode = redis.pcall('hget', KEYS[1], 'mode')
    if type(mode) == 'table' then
        return nil, not_a_lock(KEYS[1])
    end
    if mode == false and redis.call('exists', KEYS[1]) == 1 then
        if shape(KEYS[1])[1] ~= 'lock' then
            return nil, not_a_lock(KEYS[1])
        end
        return nil, redis.call('pttl', KEYS[1])
    end
    return mode, nil
end
"#;

/// Read acquire: KEYS hash, own timeout prefix, writer set; ARGV lease,
/// owner, owner's write field. nil when held; otherwise how long to wait at
/// most (ms; -1: no expiry known).
pub(super) const READ_ACQUIRE: &str = r#"
local mode, other = lock_mode()
if other then
    return other
end
if mode == 'write' and redis.call('hexists', KEYS[1], ARGV[3]) == 0 then
    return redis.call('pttl', KEYS[1])
end
if mode ~= 'write' and redis.call('hexists', KEYS[1], ARGV[2]) == 0 then
    redis.call('zremrangebyscore', KEYS[3], '-inf', now)
    local first = redis.call('zrange', KEYS[3], 0, 0, 'WITHSCORES')
    if first[1] then
        return math.max(tonumber(first[2]) - now, 1)
    end
end
if mode == false then
    redis.call('hset', KEYS[1], 'mode', 'read')
end
local n = redis.call('hincrby', KEYS[1], ARGV[2], 1)
redis.call('set', KEYS[2] .. ':' .. n, 1, 'px', ARGV[1])
local ttl = redis.call('pttl', KEYS[1])
redis.call('pexpire', KEYS[1], math.max(ttl, tonumber(ARGV[1])))
return nil
"#;

/// Write acquire: KEYS hash, writer set; ARGV lease, write field, owner,
/// writer intent ms (the writer's own: at most [`WRITER_INTENT`], at most
/// its lease). nil when held; -3 when the owner holds a read lock
/// (an upgrade would wait for itself); otherwise how long to wait at most.
pub(super) const WRITE_ACQUIRE: &str = r#"
local mode, other = lock_mode()
if other then
    return other
end
if mode == false then
    redis.call('hset', KEYS[1], 'mode', 'write', ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    redis.call('zrem', KEYS[2], ARGV[2])
    return nil
end
if mode == 'write' and redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
    redis.call('hincrby', KEYS[1], ARGV[2], 1)
    local ttl = redis.call('pttl', KEYS[1])
    redis.call('pexpire', KEYS[1], math.max(ttl, tonumber(ARGV[1])))
    return nil
end
if mode == 'read' and redis.call('hexists', KEYS[1], ARGV[3]) == 1 then
    return -3
end
redis.call('zadd', KEYS[2], now + tonumber(ARGV[4]), ARGV[2])
redis.call('pexpire', KEYS[2], math.max(redis.call('pttl', KEYS[2]), tonumber(ARGV[4])))
return redis.call('pttl', KEYS[1])
"#;

/// Read release: KEYS hash, channel, own timeout prefix, timeout key prefix,
/// writer set; ARGV owner, wake-all, wake-one message, last (`1`: the owner's
/// last read hold in its client — every read hold of it goes, a count above
/// 1 being stale from a lost reply), keep (`protocol::Keep`: what the
/// owner's remaining read holds keep, set on each of their timeout keys).
/// nil: not ours; 0: still held (by us or others);
/// 1: freed. The hash then lives as long as the longest remaining read
/// hold; holds whose timeout keys expired (crashed readers) count for
/// nothing, so the last live reader frees the lock.
pub(super) const READ_RELEASE: &str = r#"
if redis.call('hexists', KEYS[1], ARGV[1]) == 0 then
    return nil
end
local n = redis.call('hincrby', KEYS[1], ARGV[1], -1)
if ARGV[4] == '1' then
    for i = n + 1, 2, -1 do
        redis.call('del', KEYS[3] .. ':' .. i)
    end
    n = 0
end
if n == 0 then
    redis.call('hdel', KEYS[1], ARGV[1])
end
redis.call('del', KEYS[3] .. ':' .. (n + 1))
-- The owner's remaining read holds keep what their guards count on.
for i = n, 1, -1 do
    keep(KEYS[3] .. ':' .. i, ARGV[5])
end
local mode = redis.call('hget', KEYS[1], 'mode')
if mode == 'write' then
    return 0
end
if redis.call('hlen', KEYS[1]) > 1 then
    local longest = -3
    for _, field in ipairs(redis.call('hkeys', KEYS[1])) do
        local holds = tonumber(redis.call('hget', KEYS[1], field))
        if holds then
            for i = holds, 1, -1 do
                local ttl = redis.call('pttl', KEYS[4] .. ':' .. field .. ':rwlock_timeout:' .. i)
                longest = math.max(longest, ttl)
            end
        end
    end
    if longest > 0 then
        redis.call('pexpire', KEYS[1], longest)
        return 0
    end
end
redis.call('del', KEYS[1])
redis.call('zremrangebyscore', KEYS[5], '-inf', now)
if redis.call('zcard', KEYS[5]) > 0 then
    redis.call('publish', KEYS[2], ARGV[2])
else
    redis.call('publish', KEYS[2], ARGV[3])
end
return 1
"#;

/// Write release: KEYS hash, channel; ARGV write field, message, last (`1`:
/// the owner's last write hold in its client — a count above 1 is stale),
/// keep (`protocol::Keep`: what the remaining write holds keep).
/// nil: not ours; 0: more write holds; 1: the write hold ended (the lock is free, or
/// the owner's read holds remain and it is a read lock now).
pub(super) const WRITE_RELEASE: &str = r#"
if redis.call('hget', KEYS[1], 'mode') ~= 'write' or redis.call('hexists', KEYS[1], ARGV[1]) == 0 then
    return nil
end
if ARGV[3] ~= '1' and redis.call('hincrby', KEYS[1], ARGV[1], -1) > 0 then
    keep(KEYS[1], ARGV[4])
    return 0
end
redis.call('hdel', KEYS[1], ARGV[1])
if redis.call('hlen', KEYS[1]) == 1 then
    redis.call('del', KEYS[1])
else
    redis.call('hset', KEYS[1], 'mode', 'read')
end
redis.call('publish', KEYS[2], ARGV[2])
return 1
"#;

/// Cancel a writer's wait: KEYS hash, writer set, channel; ARGV write field.
/// When no live writer waits any more and no writer holds, wake everyone:
/// readers held back for the writer may go.
pub(super) const CANCEL_WRITER: &str = r#"
redis.call('zrem', KEYS[2], ARGV[1])
redis.call('zremrangebyscore', KEYS[2], '-inf', now)
if redis.call('zcard', KEYS[2]) == 0 and redis.call('hget', KEYS[1], 'mode') ~= 'write' then
    redis.call('publish', KEYS[3], ARGV[2])
end
return 1
"#;

/// The read/write lock's scripts.
pub(crate) struct RwScripts {
    pub(super) read_acquire: Lua,
    pub(super) write_acquire: Lua,
    pub(super) read_release: Lua,
    pub(super) write_release: Lua,
    pub(super) cancel_writer: Lua,
}

impl RwScripts {
    pub(crate) fn new(pubsub: PubSub) -> Self {
        RwScripts {
            read_acquire: pubsub.lua(&format!("{NOW}{}{LOCK_MODE}{READ_ACQUIRE}", shape_fn!())),
            write_acquire: pubsub.lua(&format!("{NOW}{}{LOCK_MODE}{WRITE_ACQUIRE}", shape_fn!())),
            read_release: pubsub.lua(&format!("{NOW}{}{READ_RELEASE}", keep_fn!())),
            write_release: pubsub.lua(&format!("{}{WRITE_RELEASE}", keep_fn!())),
            cancel_writer: pubsub.lua(&format!("{NOW}{CANCEL_WRITER}")),
        }
    }

    /// One read attempt, as a call.
    pub(crate) fn read_call(&'static self, req: &Request<'_>) -> Call {
        let (key, owner) = (req.key, req.owner);
        self.read_acquire.call(
            3,
            (
                key,
                timeout_prefix(key, owner),
                writers_key(key),
                millis(req.lease),
                owner,
                write_field(owner),
            ),
        )
    }

    /// One write attempt, as a call; a refused attempt (re)enters the
    /// waiting writers.
    pub(crate) fn write_call(&'static self, req: &Request<'_>) -> Call {
        let (key, owner) = (req.key, req.owner);
        let intent = super::place_lease(Kind::Write, req.lease).unwrap_or(WRITER_INTENT);
        self.write_acquire.call(
            2,
            (
                key,
                writers_key(key),
                millis(req.lease),
                write_field(owner),
                owner,
                millis(intent),
            ),
        )
    }

    /// Releases one read hold, as a call.
    pub(crate) fn read_release_call(&'static self, rel: &Release<'_>) -> Call {
        let (key, owner) = (rel.key, rel.field);
        let mut others = String::with_capacity(key.len() + 2);
        push_tagged(&mut others, key);
        self.read_release.call(
            5,
            (
                key,
                channel(key),
                timeout_prefix(key, owner),
                others,
                writers_key(key),
                owner,
                WAKE_ALL,
                WAKE_ONE,
                rel.last,
                rel.keep.arg(),
            ),
        )
    }

    /// Releases one write hold (`rel.field`: the owner's write field), as a
    /// call.
    pub(crate) fn write_release_call(&'static self, rel: &Release<'_>) -> Call {
        let key = rel.key;
        let keys = (key, channel(key));
        let args = (rel.field, WAKE_ALL, rel.last, rel.keep.arg());
        self.write_release.call(2, (keys, args))
    }

    /// A waiting writer gives up: out of the writer set, and readers held
    /// back for writers are woken when none is left.
    pub(crate) fn cancel_writer(
        &self,
        con: &mut dyn ConnectionLike,
        key: &str,
        owner: &str,
    ) -> RedisResult<()> {
        let keys = (key, writers_key(key), channel(key));
        self.cancel_writer
            .query(con, 3, (keys, write_field(owner), WAKE_ALL))
    }
}
