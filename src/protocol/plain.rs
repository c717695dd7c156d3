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

use std::time::Duration;

use redis::{ConnectionLike, RedisResult};

use super::line::line_fns;
use super::{millis, Call, Lua, PubSub, Release, Request};
use crate::names::{channel_name, line_key, line_yield_key, token_key};

/// The message published when a lock is freed (Redisson's `UNLOCK_MESSAGE`).
pub(crate) const UNLOCK_MESSAGE: &str = "0";

/// The Lua helper `companion(prefix)`: a companion name of the lock whose
/// unlock channel is `KEYS[2]` (`redisson_lock__channel:{<key>}`), with
/// `prefix` instead of the channel's — the grant channels
/// `leasehold_grant:{<key>}:<client id>`. Only channels are named in Lua
/// (every key a script touches is one of its `KEYS`); `names.rs` is the
/// reference (a test checks that both agree).
macro_rules! companion_fn {
    () => {
        r#"
local function companion(prefix)
    return prefix .. string.sub(KEYS[2], 23)
end
"#
    };
}
pub(crate) use companion_fn;

/// The acquire logic both acquire scripts share, around `$then` (what to
/// return once the hold is taken). KEYS: lock, line, the yield marker (,
/// token counter). ARGV: lease, owner, alive, place — or our element in
/// line, `<until>|<place>`, as the last attempt's reply gave it (, mint).
///
/// Free, or already ours → one more hold and the lease `ARGV[1]` (a
/// re-entry only lengthens the lease: the owner's other guards count on
/// theirs);
/// `ARGV[3]` is how many guards of this owner are alive in its client: `0`
/// makes it the first hold whatever count Redis still shows for the owner
/// — a stale count from a lost lease, an unconfirmed handoff or a grant
/// nobody heard must not outlive it; a re-entry that finds the lock free
/// (the earlier holds ran out in Redis) counts those guards again, so their
/// releases count down to this hold instead of freeing the lock under it.
/// Our place in the line (`ARGV[4]`, see `protocol::place_of`), if first,
/// goes. But a free lock is not taken while another live place is first in
/// line (it is that waiter's turn: wait until its place would expire) or
/// while the lock is left to other libraries' waiters (the yield marker):
/// then the reply is how long to wait. Dead places at the head are dropped
/// on the way — ours too: a waiter that let its place expire joins again at
/// the end, behind the live ones.
///
/// A key that is not a lock (an application's hash or string; see
/// `admin::shape_fn!`) → `{'n', <its shape>}`, nothing changed.
///
/// Held by someone else → its PTTL (-1 when it has no expiry) when
/// `ARGV[4]` is empty (a single try leaves no place), `{'f', PTTL}` when
/// the holder is not leasehold's (Redisson's: its release only publishes
/// the unlock message, so the waiter must hear the unlock channel). A
/// waiter's place is taken or confirmed at the end of the line first, and
/// the reply is `{flags, PTTL, until}`: `until` is the expiry of its
/// element, which its next attempt names.
macro_rules! acquire_script {
    ($($then:expr),+) => {
        concat!(
            r#"
-- One call on the uncontended path: neither the lock nor a line exists.
-- That path defines no helper either: each function a script defines costs
-- Redis a closure on every call, so they are defined where they are used,
-- in the block below (together about a third of the uncontended acquire's
-- time on Redis).
local found = redis.call('exists', KEYS[1], KEYS[2])
local first = false
local free = found == 0
local counted = false
if not free then
"#,
            line_fns!(),
            r#"
-- Whether an owner (`<client id>:<n>`) is a leasehold client's: its id
-- carries UUID version 8 (the 15th character; `names::new_client_id`),
-- Redisson's version 4.
local function ours(owner)
    return string.byte(owner, 15) == 56
end
-- Our place: `ARGV[4]` is the place, or `<until>|<place>` — our element
-- as the last attempt's reply left it, to confirm in the line.
local me = ARGV[4]
local bar = string.find(me, '|', 2, true)
if bar then
    me = string.sub(me, bar + 1)
end
-- The first live place of the line whose first element is `first`, and
-- how long it still lives (ms), dropping dead elements at the head on the
-- way.
local function head(line, first)
    while first do
        local place, ms = entry(first)
        if place then
            return place, ms - now()
        end
        redis.call('lpop', line)
        first = redis.call('lindex', line, 0)
    end
    return nil
end
-- A new place goes at the end; a known one (still in line) is confirmed
-- where it stands (`LSET`). Returns whether the place is new and its new
-- expiry. One element per place: only a wait's first attempt sends the
-- bare place (a new wait's place was never sent before, and a wait whose
-- attempt went unanswered names its element as unknown, `0|<place>`);
-- every later one names the element the last reply gave it. When that is
-- not in line — granted or dropped as dead, or rewritten by an attempt
-- whose reply was lost, or a rewrite lost in a failover — the place is
-- looked for in the whole line (rare), and goes at the end again only
-- when it is not there.
local function join()
    if ARGV[4] == '' then
        return false
    end
    local til = now() + placed(me)
    local el = til .. '|' .. me
    local at = bar and redis.call('lpos', KEYS[2], ARGV[4])
    if bar and not at then
        local tail = '|' .. me
        local els = redis.call('lrange', KEYS[2], 0, -1)
        for i = 1, #els do
            if string.sub(els[i], -#tail) == tail then
                at = i - 1
                break
            end
        end
    end
    if at then
        redis.call('lset', KEYS[2], at, el)
    else
        redis.call('rpush', KEYS[2], el)
    end
    line_live(KEYS[2])
    return not at, til
end
-- "Wait `ms`", after taking or confirming our place: `ms` alone (no
-- place), or `{flags, ms, until}` — `f` in `flags` when the holder is
-- another library's, `j` when our place was new (joined): a place taken
-- again was granted (or dropped as dead) since the waiter's last attempt,
-- so a grant naming it may predate this attempt; `until` our element's
-- expiry (the next attempt names the element by it).
local function waiting(ms, foreign)
    local new, til = join()
    local flags = (foreign and 'f' or '') .. (new and 'j' or '')
    if not til then
        if flags == '' then
            return ms
        end
        return {flags, ms}
    end
    return {flags, ms, til}
end
if found == 1 then
    -- Exactly one of them exists: the lock is free if it is the line (a
    -- missing list's LINDEX is false in Lua).
    first = redis.call('lindex', KEYS[2], 0)
    free = first ~= false
end
if free and first then
    local wait
    first, wait = head(KEYS[2], first)
    if first and first ~= me then
        return waiting(wait, false)
    end
    if first and redis.call('get', KEYS[3]) == 'y' then
        return waiting(math.max(redis.call('pttl', KEYS[3]), 1), false)
    end
end
-- Held: by us (one more hold), or by whom. A holder that is not
-- leasehold's (`ours`) releases with the unlock message only. A key that
-- is no lock (an application's hash or string) is refused, untouched; a
-- read/write lock's hash (`mode`) is another kind's lock, held.
local mine = free
local foreign = false
if not free then
    -- The helpers of a key that may be no lock, and of a re-entry, are
    -- defined only where they are used (each definition costs a closure).
    local fields = redis.pcall('hkeys', KEYS[1])
    if fields.err then
"#,
            $crate::protocol::admin::shape_fn!(),
            r#"
        return not_a_lock(KEYS[1])
    end
    for i = 1, #fields do
        local field = fields[i]
        if field == ARGV[2] then
            mine = true
        elseif not ours(field) then
            if field ~= 'mode' then
"#,
            $crate::protocol::admin::shape_fn!(),
            r#"
                if not lock_owner(field) then
                    return not_a_lock(KEYS[1])
                end
            end
            foreign = true
        end
    end
end
if not mine then
    return waiting(redis.call('pttl', KEYS[1]), foreign)
end
if not free and ARGV[3] ~= '0' then
    -- A re-entry: the owner's other guards count on their own leases,
    -- which this one must not cut short.
"#,
            $crate::protocol::keep_fn!(),
            r#"
    redis.call('hincrby', KEYS[1], ARGV[2], 1)
    ttl_at_least(KEYS[1], ARGV[1])
    counted = true
end
end
-- Ours: the first hold (see `ARGV[3]` above), and our place goes.
if not counted then
    redis.call('hset', KEYS[1], ARGV[2], ARGV[3] + 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
end
if first then
    redis.call('lpop', KEYS[2])
end
"#,
            $($then),+
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

/// Fenced acquire: taken → `{token}` — a new token from `KEYS[4]`
/// (`redisson_lock_token:{<key>}`) when `ARGV[5] == "1"` or the lock was
/// free, else `{-1}` (a reentrant hold keeps its token). Held elsewhere →
/// PTTL.
pub(crate) const ACQUIRE_FENCED: &str = acquire_script!(
    "    if ARGV[5] ~= '1' and not free then\n        return {-1}\n    end\n",
    mint_fn!(),
    "    return {mint(KEYS[4])}\n"
);

/// Release. KEYS: lock, unlock channel, line, the yield marker, the token
/// counter. ARGV: keep (`protocol::Keep`), owner, last (, successor, force,
/// successor lease, successor fenced). The grant channels (channels, not
/// keys) are named after the unlock channel (see [`companion_fn!`]).
///
/// Not ours → nil. With `ARGV[3] == "1"` this is the owner's last hold in its
/// client: its field goes (`HDEL`, and the hash with it — a lock hash has one
/// owner field). Otherwise counted: more holds in Redis → count − 1, the
/// lease set as `ARGV[1]` says (what the owner's remaining guards count on:
/// `protocol::Keep`), return 0; the last → delete. Then, the lock being
/// free, the first of these that applies:
/// - a successor in `ARGV[4]` (a thread of the same client queued for it),
///   and either `ARGV[5] == "1"` (the client's run of handoffs is short) or
///   nobody else waits (no live place in the line, nobody subscribed to the
///   unlock channel — leasehold's waiters hear it only while another
///   library holds the lock, so `PUBSUB NUMSUB` counts other libraries'
///   waiters) → the lock passes to it with its lease
///   `ARGV[6]`, return 2 — or `{2, token}` with a token minted for a fenced
///   successor (`ARGV[7] == "1"`);
/// - a live place first in line, and no other library's waiter, or fewer than
///   two grants in a row while one waits → **grant**: the lock is set to that
///   place's owner with the short lease the place names (at most
///   [`GRANT_LEASE`], see [`granted_fn!`]), the place goes, and its
///   client alone hears it on its grant channel
///   (`leasehold_grant:{<key>}:<client id>`): the message is the place, then
///   a token minted for it when the place asked for one (it ends in `f`), so
///   a fenced grantee needs no round trip either. Return 4. After two grants
///   in a row while other libraries' waiters are subscribed, the lock is left
///   to them instead: for 20 ms (the yield marker) no leasehold acquire
///   takes it, and the first waiter in line is told on its grant channel
///   (`0`: try again) so it does not sleep until it confirms its place;
/// - otherwise publish the unlock message (`0`, Redisson's), return 1 — or 3
///   when a successor was named but others wait (so it should let them go
///   first).
pub(crate) const RELEASE: &str = concat!(
    r#"
if ARGV[3] == '1' then
    if redis.call('hdel', KEYS[1], ARGV[2]) == 0 then
        return nil
    end
else
"#,
    super::keep_fn!(),
    r#"
    local count = redis.call('hget', KEYS[1], ARGV[2])
    if not count then
        return nil
    end
    if tonumber(count) > 1 then
        redis.call('hincrby', KEYS[1], ARGV[2], -1)
        keep(KEYS[1], ARGV[1])
        return 0
    end
    redis.call('del', KEYS[1])
end
-- Nobody named to pass the lock to, and nobody in line: the unlock
-- message, before any helper is defined (as in the acquire, the
-- uncontended path pays for no closure).
local first = false
if not ARGV[4] then
    first = redis.call('lpop', KEYS[3])
    if not first then
        redis.call('publish', KEYS[2], '0')
        return 1
    end
end
"#,
    mint_fn!(),
    companion_fn!(),
    line_fns!(),
    r#"
-- A local successor with a short run of handoffs gets it whatever waits.
-- Otherwise the first live place is taken out of the line: its element
-- popped (above when nobody is named; dead ones at the head are dropped on
-- the way), its expiry read from it. It goes back if it is not granted. A
-- place of the releasing owner is dropped too: a holder waits for nothing,
-- so it is a copy an ended wait of its left behind (an attempt that
-- reached Redis after its retry), and granting it would hold the lock for
-- nobody.
local others = 0
local place = nil
if not (ARGV[4] and ARGV[5] == '1') then
    if ARGV[4] then
        first = redis.call('lpop', KEYS[3])
    end
    local own = ARGV[2] .. '#'
    while first do
        place = entry(first)
        if place and string.sub(place, 1, #own) ~= own then
            break
        end
        place = nil
        first = redis.call('lpop', KEYS[3])
    end
    -- Other libraries' waiters (leasehold's hear the unlock channel only
    -- while another library holds the lock).
    if ARGV[4] or first then
        others = redis.call('pubsub', 'numsub', KEYS[2])[2]
    end
end
if ARGV[4] and (ARGV[5] == '1' or ((not first) and others == 0)) then
    redis.call('hset', KEYS[1], ARGV[4], 1)
    redis.call('pexpire', KEYS[1], ARGV[6])
    if ARGV[7] == '1' then
        return {2, mint(KEYS[5])}
    end
    return 2
end
if first then
    local yield = KEYS[4]
    local streak = nil
    local grants = 0
    if others > 0 then
        streak = redis.call('get', yield)
        grants = tonumber(streak) or 0
    end
    if others == 0 or (streak ~= 'y' and grants < 2) then
        -- A place is `<client id>:<n>#…` (`protocol::place_of`): its owner
        -- ends before the `#` that `entry` found after the first colon
        -- (one of each in every place a client makes), the client id
        -- before that colon — plain finds, no pattern, and none can miss.
        local colon = string.find(place, ':', 2, true)
        local owner = string.sub(place, 1, string.find(place, '#', colon + 2, true) - 1)
        redis.call('hset', KEYS[1], owner, 1)
        redis.call('pexpire', KEYS[1], granted(place))
        if others > 0 then
            redis.call('psetex', yield, 60000, grants + 1)
        end
        local msg = place
        if string.sub(place, -1) == 'f' then
            msg = place .. ' ' .. string.format('%.0f', mint(KEYS[5]))
        end
        local client = string.sub(place, 1, colon - 1)
        redis.call('publish', companion('leasehold_grant') .. ':' .. client, msg)
        return 4
    end
    -- Left to other libraries' waiters: the element goes back, first and
    -- unchanged (its waiter names it so when it confirms), and its waiter
    -- tries again after the marker.
    redis.call('lpush', KEYS[3], first)
    line_live(KEYS[3])
    redis.call('psetex', yield, 20, 'y')
    redis.call('publish', companion('leasehold_grant') .. ':' .. string.match(place, '^(.*):'), '0')
end
redis.call('publish', KEYS[2], '0')
if ARGV[4] then
    return 3
end
return 1
"#
);

/// Leave the line: KEYS lock, line; ARGV place (bare, never an element),
/// owner. Drops the place's element, whatever its expiry (the one caller
/// that may not know it is the undo of an attempt whose reply was lost):
/// the line is read whole, which a wait does only when it gives up.
/// Returns 1 when the lock is set to the owner — a grant that came while
/// its waiter gave up, which the caller then releases.
pub(crate) const LEAVE: &str = r#"
local tail = '|' .. ARGV[1]
local els = redis.call('lrange', KEYS[2], 0, -1)
for i = 1, #els do
    if string.sub(els[i], -#tail) == tail then
        redis.call('lrem', KEYS[2], 1, els[i])
    end
end
return redis.call('hexists', KEYS[1], ARGV[2])
"#;

/// Whom a release may hand the lock to directly: a thread of the same
/// client queued for it (the ledger's handover picks it).
#[derive(Clone, Copy)]
pub(crate) struct Successor<'h> {
    pub(crate) owner: &'h str,
    pub(crate) lease: Duration,
    /// Hand over even when other clients wait (the streak is short yet).
    pub(crate) force: bool,
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
    pub(super) acquire: Lua,
    pub(super) acquire_fenced: Lua,
    pub(super) release: Lua,
    pub(super) leave: Lua,
}

impl PlainScripts {
    pub(crate) fn new(pubsub: PubSub) -> Self {
        PlainScripts {
            acquire: pubsub.lua(ACQUIRE),
            acquire_fenced: pubsub.lua(ACQUIRE_FENCED),
            release: pubsub.lua(RELEASE),
            leave: pubsub.lua(LEAVE),
        }
    }

    /// One acquire as a call (one `EVALSHA`; `SCRIPT LOAD` and a retry only
    /// when the server's script cache was flushed).
    pub(crate) fn acquire_call(&'static self, req: &Request<'_>) -> Call {
        let (key, fenced) = (req.key, req.fence != Fence::None);
        let lua = if fenced {
            &self.acquire_fenced
        } else {
            &self.acquire
        };
        lua.call(
            3 + usize::from(fenced),
            (
                key,
                line_key(key),
                line_yield_key(key),
                fenced.then(|| token_key(key)),
                millis(req.lease),
                req.owner,
                req.alive,
                req.place.unwrap_or(""),
                fenced.then_some(req.fence == Fence::Mint),
            ),
        )
    }

    /// One release as a call; `successor` is whom the lock may pass to
    /// directly.
    pub(crate) fn release_call(&'static self, rel: &Release<'_>) -> Call {
        let key = rel.key;
        let successor = rel
            .successor
            .map(|next| (next.owner, next.force, millis(next.lease), next.fenced));
        self.release.call(
            5,
            (
                key,
                channel_name(key),
                line_key(key),
                line_yield_key(key),
                token_key(key),
                rel.keep.arg(),
                rel.field,
                rel.last,
                successor,
            ),
        )
    }

    /// Leaves the line: drops `place`; true when the lock is set to `owner`
    /// meanwhile (a grant its waiter will not use: release it).
    pub(crate) fn leave(
        &self,
        con: &mut dyn ConnectionLike,
        key: &str,
        owner: &str,
        place: &str,
    ) -> RedisResult<bool> {
        let keys = (key, line_key(key));
        let held: i64 = self.leave.query(con, 2, (keys, place, owner))?;
        Ok(held == 1)
    }
}

/// What a grant message on a client's grant channel says: the place it was
/// for (`<owner>#<n>`, `f` at the end for a fenced waiter) and the token
/// minted for it, if it asked for one. `None` for anything else.
pub(crate) fn parse_grant(payload: &[u8]) -> Option<(&str, Option<u64>)> {
    let text = std::str::from_utf8(payload).ok()?;
    let (place, token) = match text.split_once(' ') {
        Some((place, token)) => (place, Some(token.parse().ok()?)),
        None => (text, None),
    };
    place.contains('#').then_some((place, token))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::names::grant_prefix;

    #[test]
    fn the_scripts_derived_names_agree_with_rust() {
        for key in ["job", "a{t}b", "{user:7}:cart", "x:y"] {
            // `companion(prefix)`: prefix .. string.sub(channel, 23)
            let tail = &channel_name(key).to_string()[22..];
            assert_eq!(
                format!("redisson_lock_token{tail}"),
                token_key(key).to_string()
            );
            assert_eq!(format!("leasehold_grant{tail}:"), grant_prefix(key));
        }
    }

    #[test]
    fn grants_name_their_place_and_token() {
        assert_eq!(parse_grant(b"u:1#7"), Some(("u:1#7", None)));
        assert_eq!(parse_grant(b"u:1#7 123"), Some(("u:1#7", Some(123))));
        assert_eq!(parse_grant(b"0"), None);
        assert_eq!(parse_grant(b"u:1#7 x"), None);
        assert_eq!(parse_grant(&[0xff, b'#']), None);
    }
}
