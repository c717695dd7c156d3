//! The fair lock's protocol: Redisson's `RedissonFairLock` layout — the lock
//! hash, a queue list `redisson_lock_queue:{<name>}`, a timeout zset
//! `redisson_lock_timeout:{<name>}`, and one channel per waiter
//! `redisson_lock__channel:{<name>}:<owner>` so a release wakes exactly the
//! next waiter.
//!
//! Queue timeouts follow Redisson's chain, so both serve a mixed queue in
//! arrival order; but a leasehold place lives only while its waiter
//! confirms it (see [`PURGE`]; a chain of dead waiters hangs Redisson's
//! queue for minutes, redisson #3004, #2883, #3730, #1353), so a dead
//! leasehold waiter costs those behind it at most one [`QUEUE_LEASE`].
//! Times are the server's (`TIME`).
//!
//! A leasehold waiter marks its queue entry as its own in a hash beside the
//! queue (`leasehold_fair:{<name>}`: owner → its place and until when the
//! place lives, `<place> <ms>`), so the release
//! grants it the lock directly — set to it, told on its channel — and it
//! needs no acquire round trip. Redisson's waiters (no mark) are woken with
//! the unlock message as Redisson's release wakes them: a Redisson client
//! that found the lock already set to its owner would count a second hold.

use std::time::Duration;

use redis::{ConnectionLike, RedisResult};

use super::admin::shape_fn;
use super::line::granted_fn;
use super::plain::{mint_fn, UNLOCK_MESSAGE};
use super::{keep_fn, millis, Call, Fence, Lua, PubSub, Release, Request};
use crate::names::{channel_name, fair_marks_key, queue_key, timeout_key, token_key};
use crate::options::Kind;

/// How long a waiter's place in the queue lasts without being confirmed.
pub(crate) const QUEUE_LEASE: Duration = Duration::from_secs(5);

/// Redisson's `threadWaitTime` (its fair lock's default, 5 minutes): the
/// step of the chain of queue timeouts, and what each of Redisson's
/// acquires takes off every one of them. In the scripts as `WAIT` (a unit test pins the literal).
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) const REDISSON_THREAD_WAIT: Duration = Duration::from_secs(300);

/// The helpers every fair script shares: `now` (the server time in ms),
/// `WAIT` ([`REDISSON_THREAD_WAIT`]), `alive(mark)` (until when the place a
/// mark names lives, ms; nil for a granted or unreadable mark) and
/// `purge(marks)`, which drops the dead waiters at the head of the queue.
///
/// Queue timeouts follow Redisson's chain: a new waiter's is the last one's
/// plus `WAIT` (or the lock's PTTL plus `WAIT` from now), and Redisson's
/// acquire takes `WAIT` off every one. So Redisson's own purge — the head,
/// when its timeout passed on the Redisson host's clock — keeps leasehold's
/// places as it keeps its own (a place at the head lives about `WAIT` after
/// it was queued, as Redisson's), and a mixed queue is served in arrival
/// order. Leasehold's acquires take nothing off (that would cost a command
/// per queued waiter per critical section); a new place's timeout is capped
/// at what a fresh chain would give (`WAIT` per place from the lock's
/// expiry), so timeouts never grow without bound. Liveness of leasehold's
/// places is leasehold's own: the time its mark names (`<place> <ms>`), which
/// its waiter confirms ([`QUEUE_LEASE`]); a marked place past it is dead
/// (every key is one of the script's `KEYS`, none is named in Lua). An unmarked
/// place (Redisson's) is dead when its timeout passed — a Redisson waiter
/// that died costs those behind it up to `WAIT` per place, as in Redisson.
pub(super) const PURGE: &str = r#"
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local WAIT = 300000
local function alive(mark)
    return mark and tonumber(string.match(mark, ' (%d+)$'))
end
local function purge(marks)
    while true do
        local first = redis.call('lindex', KEYS[2], 0)
        if not first then
            return
        end
        local mark = redis.call('hget', marks, first)
        local until_ms = alive(mark)
        if until_ms and until_ms > now then
            return
        end
        local dead = mark ~= false
        if not dead then
            local timeout = redis.call('zscore', KEYS[3], first)
            dead = timeout ~= false and tonumber(timeout) <= now
        end
        if not dead then
            return
        end
        redis.call('lpop', KEYS[2])
        redis.call('zrem', KEYS[3], first)
        redis.call('hdel', marks, first)
    end
end
-- The queue and its timeouts expire a step after their last place's
-- timeout (at least `floor` ms from now), set again whenever less than a
-- step is left: a queue whose waiters all died goes by itself, and a place
-- Redisson's waiter takes after ours is still covered (it chains a step
-- after the last). One PTTL when nothing is due.
local function queue_lives(floor)
    if redis.call('pttl', KEYS[2]) < WAIT then
        local last = redis.call('zrange', KEYS[3], -1, -1, 'withscores')[2]
        if last then
            local life = math.max(tonumber(last) - now, floor) + WAIT
            redis.call('pexpire', KEYS[2], life)
            redis.call('pexpire', KEYS[3], life)
        end
    end
end
"#;

/// Acquire: KEYS lock, queue, timeouts, leasehold marks (, token counter);
/// ARGV lease, owner, queue lease (the waiter's own: at most
/// [`QUEUE_LEASE`], at most its lease), place (`''`: a single try), alive
/// (how many guards of the owner are alive in its client, as the plain
/// lock's `ARGV[3]`). Ours already → one more hold (the lease only
/// lengthened: the owner's other guards count on theirs), nil — or the
/// first hold when no guard is alive (a count Redis still shows is stale)
/// or the lock was granted to this wait's place (the mark says
/// `<place>!`): a grant whose message was lost or that must be taken as
/// asked. Free and (no queue or we are first) → ours, out of the queue,
/// nil; a re-entry that finds the lock free (the earlier holds ran out in
/// Redis) counts the guards alive again, so their releases count down to
/// it instead of freeing the lock under it. Otherwise take our place at the end of
/// the queue (timeout chained after the last, as Redisson's) or keep it,
/// mark it leasehold's with its place (`-` for a single try) so a release
/// may grant it the lock directly, and confirm it: the mark names until
/// when it lives (now + the queue lease). Return how long to wait: the holder's PTTL, or when the
/// lock is free but another waiter is first, until that waiter's place
/// would be dropped (at most the queue lease); -1 when the holder has no
/// expiry — as `{'j', ms}` when a waiter's place was new (its first
/// attempt, or the place was granted or dropped since its last: a grant
/// naming it may then predate this attempt; see `raw::waiting`).
///
/// A key that is not a lock (an application's hash or string; see
/// `admin::shape_fn!`) → `{'n', <its shape>}`, nothing changed.
///
/// Fenced (a token counter in `KEYS[5]`): a first hold returns `{token}`, a
/// reentrant one `{-1}` (it keeps the token of the outer hold).
pub(super) const ACQUIRE: &str = r#"
purge(KEYS[4])
local guards = tonumber(ARGV[5])
local function first_hold()
    redis.call('hset', KEYS[1], ARGV[2], guards + 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    if KEYS[5] then
        return {mint(KEYS[5])}
    end
    return nil
end
local ours = redis.pcall('hexists', KEYS[1], ARGV[2])
if type(ours) == 'table' then
    return not_a_lock(KEYS[1])
end
if ours == 1 then
    if guards == 0 or ARGV[4] ~= '' and redis.call('hget', KEYS[4], ARGV[2]) == ARGV[4] .. '!' then
        redis.call('hdel', KEYS[4], ARGV[2])
        return first_hold()
    end
    redis.call('hincrby', KEYS[1], ARGV[2], 1)
    ttl_at_least(KEYS[1], ARGV[1])
    if KEYS[5] then
        return {-1}
    end
    return nil
end
local first = redis.call('lindex', KEYS[2], 0)
if redis.call('exists', KEYS[1]) == 0 and ((not first) or first == ARGV[2]) then
    if first then
        redis.call('lpop', KEYS[2])
        redis.call('zrem', KEYS[3], ARGV[2])
        redis.call('hdel', KEYS[4], ARGV[2])
    end
    return first_hold()
end
-- Held by another, or waited for: an application's hash is no lock (a
-- read/write lock's `mode` is another kind's lock, held).
for _, f in ipairs(redis.call('hkeys', KEYS[1])) do
    if f ~= 'mode' and not lock_owner(f) then
        return not_a_lock(KEYS[1])
    end
end
-- A place taken again (granted, or dropped as dead, since this waiter's
-- last attempt) answers `{'j', ms}`: a grant naming it may predate this
-- attempt (the plain lock's `j`, `plain::ACQUIRE`'s `waiting`).
local new = redis.call('zscore', KEYS[3], ARGV[2]) == false
local joined = new and ARGV[4] ~= ''
local function waiting(ms)
    if joined then
        return {'j', ms}
    end
    return ms
end
if new then
    local fresh = now + math.max(redis.call('pttl', KEYS[1]), 0)
        + WAIT * (redis.call('llen', KEYS[2]) + 1)
    local last = redis.call('lindex', KEYS[2], -1)
    local timeout = last and redis.call('zscore', KEYS[3], last)
    if timeout then
        timeout = math.min(tonumber(timeout) + WAIT, fresh)
    else
        timeout = fresh
    end
    redis.call('zadd', KEYS[3], timeout, ARGV[2])
    redis.call('lrem', KEYS[2], 0, ARGV[2])
    redis.call('rpush', KEYS[2], ARGV[2])
end
local mark = ARGV[4]
if mark == '' then
    mark = '-'
end
redis.call('hset', KEYS[4], ARGV[2], mark .. ' ' .. (now + tonumber(ARGV[3])))
redis.call('pexpire', KEYS[4], 60000)
queue_lives(tonumber(ARGV[3]))
local ttl = redis.call('pttl', KEYS[1])
if ttl == -2 then
    first = redis.call('lindex', KEYS[2], 0)
    local left = alive(redis.call('hget', KEYS[4], first))
    if left then
        left = left - now
    else
        left = tonumber(redis.call('zscore', KEYS[3], first) or now) - now
    end
    return waiting(math.max(math.min(left, tonumber(ARGV[3])), 0))
end
return waiting(ttl)
"#;

/// Release: KEYS lock, queue, timeouts, channel, leasehold marks, token
/// counter; ARGV message, keep (`protocol::Keep`), owner, last (`1`: the owner's
/// last hold in its client — a count above 1 is stale, from a reply that was
/// lost). Not ours → nil; more holds (and not the last) → count − 1, the
/// lease set as keep says, 0; the
/// last → delete (and the owner's mark: a hold granted directly kept its
/// `<place>!`), and the first live waiter is
/// woken on its own channel, 1: a leasehold waiter (its mark names its
/// place) by a **grant** — the lock set to it with the grant lease its place
/// names (its own lease, at most 3 s; see `granted_fn!`), its
/// place gone, the message its place (and a token minted for it when the place ends in
/// `f`), so it needs no round trip — any other (Redisson's, a single try)
/// by the unlock message, as Redisson's own release does.
pub(super) const RELEASE: &str = r#"
if redis.call('hexists', KEYS[1], ARGV[3]) == 0 then
    return nil
end
if ARGV[4] ~= '1' and redis.call('hincrby', KEYS[1], ARGV[3], -1) > 0 then
    keep(KEYS[1], ARGV[2])
    return 0
end
redis.call('del', KEYS[1])
redis.call('hdel', KEYS[5], ARGV[3])
purge(KEYS[5])
local next = redis.call('lindex', KEYS[2], 0)
if next then
    queue_lives(0)
    local place = string.match(redis.call('hget', KEYS[5], next) or '', '^(%S+) %d+$')
    if place and place ~= '-' then
        redis.call('hset', KEYS[1], next, 1)
        redis.call('pexpire', KEYS[1], granted(place))
        redis.call('lpop', KEYS[2])
        redis.call('zrem', KEYS[3], next)
        redis.call('hset', KEYS[5], next, place .. '!')
        local msg = place
        if string.sub(place, -1) == 'f' then
            msg = place .. ' ' .. string.format('%.0f', mint(KEYS[6]))
        end
        redis.call('publish', KEYS[4] .. ':' .. next, msg)
        return 1
    end
    redis.call('publish', KEYS[4] .. ':' .. next, ARGV[1])
end
return 1
"#;

/// Cancel: KEYS lock, queue, timeouts, channel, leasehold marks; ARGV
/// message, owner. Leaves the queue; if we were first and the lock is free,
/// wakes the next waiter so it does not wait for our place to expire.
/// Returns 1 when the lock is set to the owner: a grant that came while its
/// waiter gave up (the caller releases it).
pub(super) const CANCEL: &str = r#"
local first = redis.call('lindex', KEYS[2], 0)
redis.call('lrem', KEYS[2], 0, ARGV[2])
redis.call('zrem', KEYS[3], ARGV[2])
redis.call('hdel', KEYS[5], ARGV[2])
if first == ARGV[2] and redis.call('exists', KEYS[1]) == 0 then
    local next = redis.call('lindex', KEYS[2], 0)
    if next then
        redis.call('publish', KEYS[4] .. ':' .. next, ARGV[1])
    end
end
return redis.call('hexists', KEYS[1], ARGV[2])
"#;

/// The fair lock's scripts.
pub(crate) struct FairScripts {
    pub(super) acquire: Lua,
    pub(super) release: Lua,
    pub(super) cancel: Lua,
}

impl FairScripts {
    pub(crate) fn new(pubsub: PubSub) -> Self {
        FairScripts {
            acquire: pubsub.lua(&format!(
                "{PURGE}{}{}{}{ACQUIRE}",
                mint_fn!(),
                keep_fn!(),
                shape_fn!()
            )),
            release: pubsub.lua(&format!(
                "{PURGE}{}{}{}{RELEASE}",
                mint_fn!(),
                granted_fn!(),
                keep_fn!()
            )),
            cancel: pubsub.lua(CANCEL),
        }
    }

    /// One acquire as a call; `req.place`: the waiter's place in the queue,
    /// when it has one.
    pub(crate) fn acquire_call(&'static self, req: &Request<'_>) -> Call {
        let (key, fenced) = (req.key, req.fence != Fence::None);
        let place = super::place_lease(Kind::Fair, req.lease).unwrap_or(QUEUE_LEASE);
        self.acquire.call(
            4 + usize::from(fenced),
            (
                key,
                queue_key(key),
                timeout_key(key),
                fair_marks_key(key),
                fenced.then(|| token_key(key)),
                millis(req.lease),
                req.owner,
                millis(place),
                req.place.unwrap_or(""),
                req.alive,
            ),
        )
    }

    /// One release as a call.
    pub(crate) fn release_call(&'static self, rel: &Release<'_>) -> Call {
        let args = (UNLOCK_MESSAGE, rel.keep.arg(), rel.field, rel.last);
        (self.release).call(6, (five_keys(rel.key), token_key(rel.key), args))
    }

    /// Leaves the queue; true when the lock was granted to `owner`
    /// meanwhile (release it).
    pub(crate) fn cancel(
        &self,
        con: &mut dyn ConnectionLike,
        key: &str,
        owner: &str,
    ) -> RedisResult<bool> {
        let held: i64 = (self.cancel).query(con, 5, (five_keys(key), UNLOCK_MESSAGE, owner))?;
        Ok(held == 1)
    }
}

/// The lock, queue, timeouts, channel and marks of `key`: the first keys
/// of a release and a cancel.
fn five_keys(key: &str) -> (&str, String, String, String, String) {
    (
        key,
        queue_key(key),
        timeout_key(key),
        channel_name(key).to_string(),
        fair_marks_key(key),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scripts_chain_timeouts_in_redissons_step() {
        let step = format!("local WAIT = {}\n", millis(REDISSON_THREAD_WAIT));
        assert!(PURGE.contains(&step), "{PURGE}");
    }
}
