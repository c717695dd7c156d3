//! The semaphore's Lua scripts (see the module's opening comment for the
//! layout they keep): a prelude of helpers every script starts with, then
//! acquire, release, leave the line, set and add permits, and the reads.

/// The Lua prelude of every semaphore script: the keys, the server's clock
/// in ms (`now`), and the helpers `counter()` (the counter's value, false
/// when there is none — or nil and the error reply `NOTASEMAPHORE <what
/// the key is>` when it holds anything but a whole number, an
/// application's hash, list or string: the calls that write refuse it,
/// untouched), `ids(blob)` (16-byte permit ids),
/// `total()` (permits available and out; nil while the counter does not
/// exist), `head(first)` (the first live place in line and the ids it asks
/// for — `first`, when given, the line's head as the script read it —
/// dropping on the way dead places and places asking for more permits than
/// the semaphore has — their waiters' next attempt is refused), `reclaim()`
/// (takes expired permits out of the lease table: how many), `place(p)`
/// (until when place `p` lives, ms, and the ids it asks for; nil when it
/// has no entry), `give(n, announce, first)`
/// (gives `n` permits back: to the places first in line while
/// what each asks for fits — each set with the short lease its place names,
/// its place gone, its client told on its grant channel
/// `leasehold_sgrant:{<key>}:<client id>` with the place, unless it is the
/// place of the acquire running (`me`), which answers it (`mine_given`) —
/// then, with `announce`, the count left available on Redisson's channel,
/// for its waiters: they are not in our line; returns the count available
/// after, or nil when nothing came back, nobody waits and nothing is
/// announced: the counter untouched and unread; `first` is passed to
/// `head`) and, only in the scripts that use them ([`counter_fn!`],
/// [`join_fn!`]), `counter()` and `join(place, blob)` (takes a place at
/// the end of the line, or confirms it where it stands; true when it was
/// new).
///
/// Redisson's waiters beside ours (`others()`: the subscribers of
/// Redisson's channel that are not leasehold clients' — each leasehold
/// client waiting subscribes `leasehold_swait:{<key>}` beside it, see
/// `names::semaphore_waiters`): Redisson's acquire takes permits only when
/// the counter has them, which a release that gives them to our line first
/// never leaves — and a Redisson thread that releases takes its permit
/// back at once when it acquires again, before any waiter hears of it. So
/// while they wait, permits coming back (a release, expired ones taken
/// back) that would go to our line are left
/// in the counter instead when Redisson's clients hold none or fewer
/// than leasehold's (told apart by the permit ids in the lease table, see
/// `raw::permits::permit_id`): announced on their channel, and kept from
/// leasehold's acquires by a place no waiter has at the head of our line
/// (`~yield:0#0`) until permits come back to a leasehold script (a
/// release) or at most [`yield_ms!`] (an acquire that finds it waits until
/// then; the next script drops it once expired). Each side then holds
/// about half of the permits.
macro_rules! prelude {
    () => {
        concat!(base!(), helpers!(), counter_fn!())
    };
}

/// The helper `counter()` (see [`prelude!`]): only in the scripts that
/// read the counter as a whole (each helper defined costs Redis a closure
/// on every call that reaches it).
macro_rules! counter_fn {
    () => {
        r#"
local function counter()
    local v = redis.pcall('get', N)
    if type(v) == 'table' then
        return nil, redis.error_reply('NOTASEMAPHORE a ' .. redis.call('type', N)['ok'])
    end
    if v and not string.match(v, '^%-?%d+$') then
        return nil, redis.error_reply('NOTASEMAPHORE a string holding "'
            .. string.sub(v, 1, 60) .. '", which is no count of permits')
    end
    return v, nil
end
"#
    };
}

/// The helper `join(place, blob)` (see [`prelude!`]): the acquire's only.
macro_rules! join_fn {
    () => {
        concat!(
            r#"
local function join(p, blob)
    local new = redis.call('hset', P, p, (now + placed(p)) .. ' ' .. blob) == 1
    if new then
        redis.call('rpush', L, p)
    end
    -- No place lives longer: the line of waiters that all died goes by
    -- itself, its list with its places.
    redis.call('pexpire', P, "#,
            $crate::protocol::line::place_lease_ms!(),
            r#")
    redis.call('pexpire', L, "#,
            $crate::protocol::line::place_lease_ms!(),
            r#")
    return new
end
"#
        )
    };
}

/// What every semaphore script starts with (see [`prelude!`]): the keys
/// and `now` — all the acquire's and the release's uncontended paths need
/// before the rest of the prelude ([`helpers!`]) is defined: each helper
/// costs Redis a closure, and one more for each local it uses, on every
/// call (together about a third of an uncontended call's time on Redis).
macro_rules! base {
    () => {
        concat!(
            r#"
local N, T, C, L, P = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local clock = redis.call('time')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
"#
        )
    };
}

/// The rest of the prelude (see [`prelude!`]).
macro_rules! helpers {
    () => {
        concat!(
            $crate::protocol::line::granted_fn!(),
            r#"
local function reclaim()
"#,
            take_expired!(),
            r#"
    return #expired
end
local me = false
local mine_given = false
local function ids(blob)
    local out = {}
    for i = 1, #blob - 15, 16 do
        out[#out + 1] = string.sub(blob, i, i + 15)
    end
    return out
end
local function total()
    local v = redis.call('get', N)
    if not v then
        return nil
    end
    return tonumber(v) + redis.call('zcard', T)
end
local function place(p)
    local v = redis.call('hget', P, p)
    local sp = v and string.find(v, ' ', 1, true)
    if not sp then
        return nil
    end
    return tonumber(string.sub(v, 1, sp - 1)), string.sub(v, sp + 1)
end
local function head(first)
    first = first or redis.call('lindex', L, 0)
    local all = first and total()
    while first do
        local until_ms, blob = place(first)
        -- A place is `<client id>:<n>#…` (`protocol::place_of`); plain
        -- finds, no pattern.
        local colon = string.find(first, ':', 2, true)
        local mark = colon and string.find(first, '#', colon + 2, true)
        if until_ms and until_ms > now and mark and mark < #first
                and not (all and #blob / 16 > all) then
            return first, blob
        end
        redis.call('lpop', L)
        redis.call('hdel', P, first)
        first = redis.call('lindex', L, 0)
    end
    return nil
end
local function others()
    local n = redis.call('pubsub', 'numsub', C, 'leasehold_swait' .. string.sub(C, 12))
    return n[2] - n[4]
end
local YIELD = '~yield:0#0'
local function give(n, announce, first)
    local avail = n > 0 and redis.call('incrby', N, n)
    local first, blob = head(first)
    if not (avail or first or announce) then
        -- Nothing came back, nobody waits, nothing to announce.
        return nil
    end
    avail = avail or tonumber(redis.call('get', N) or '0')
    if first == YIELD and n > 0 then
        -- What was left to Redisson's waiters had its turn: permits coming
        -- back are ours to give again.
        redis.call('lpop', L)
        redis.call('hdel', P, YIELD)
        first, blob = head()
    end
    if n > 0 and first and first ~= YIELD and others() > 0 then
        local mine, theirs = 0, 0
        for _, id in ipairs(redis.call('zrange', T, 0, 999)) do
            if string.byte(id, 9) == 30 and string.byte(id, 10) == 165
                    and math.floor(string.byte(id, 7) / 16) == 8 then
                mine = mine + 1
            else
                theirs = theirs + 1
            end
        end
        if theirs == 0 or theirs < mine then
            redis.call('lpush', L, YIELD)
            redis.call('hset', P, YIELD, (now + "#,
            $crate::protocol::semaphore::yield_ms!(),
            r#") .. ' ')
            redis.call('publish', C, avail)
            return avail
        end
    end
    while first and first ~= YIELD and math.floor(#blob / 16) <= avail do
        avail = redis.call('decrby', N, math.floor(#blob / 16))
        local expiry = now + granted(first)
        for _, id in ipairs(ids(blob)) do
            redis.call('zadd', T, expiry, id)
        end
        redis.call('lpop', L)
        redis.call('hdel', P, first)
        if first ~= me then
            -- Its client: the id before the one colon of a place `head`
            -- let through.
            redis.call('publish', 'leasehold_sgrant' .. string.sub(L, 16) .. ':'
                .. string.sub(first, 1, string.find(first, ':', 2, true) - 1), first)
        else
            mine_given = true
        end
        first, blob = head()
    end
    if announce and avail > 0 then
        redis.call('publish', C, avail)
    end
    return avail
end
"#
        )
    };
}

/// The Lua that takes expired permits out of the lease table, at most
/// [`reclaim_max!`] of them, into `local expired` (their ids): `reclaim()`'s
/// body, and the release's, which needs the ids (and defines no helper).
macro_rules! take_expired {
    () => {
        concat!(
            "local expired = redis.call('zrangebyscore', T, 0, now, 'limit', 0, ",
            $crate::protocol::semaphore::reclaim_max!(),
            ")\nif #expired > 0 then\n    redis.call('zrem', T, unpack(expired))\nend\n"
        )
    };
}

/// Expired permits one script takes back at most (the rest by the next).
macro_rules! reclaim_max {
    () => {
        "1000"
    };
}
pub(crate) use reclaim_max;

/// Acquire. ARGV: permits, lease ms, place (`''`: a single try, no place),
/// the ids (16 bytes each, as many as permits).
///
/// A counter key that is no semaphore's → the `NOTASEMAPHORE` error reply;
/// no counter at all (its permits were never set, or it was deleted) →
/// `{3}`, nothing changed: nothing would ever give permits to a waiter.
///
/// Our own ids past their lease (a grant heard too late) and every expired
/// permit go back first (to the line). Then: our ids in the table — a grant
/// to our place came first, or just now — are ours, with our own lease:
/// `{1}`. More permits asked for than the semaphore has in all: our place
/// goes, `{2, total}`. Otherwise, with nobody before us in line (no live
/// place, or ours first) and enough permits available, they are taken (the
/// counter's TTL copied to the table, as Redisson does): `{1}`. Otherwise
/// our place is taken or confirmed and the reply is `{0, ms until the
/// soonest lease ends + 1 (-1: no lease ends), available, 1 (0: the
/// counter does not exist), 1 when our place was new in the line (0:
/// confirmed where it stood)}` — on a confirmation, a place new again was
/// granted (or dropped as dead) since: a grant naming it may predate this
/// attempt (see `raw::permits`, the grants a wait may trust).
pub(crate) const ACQUIRE: &str = concat!(
    base!(),
    r#"
-- Takes the permits asked for: their ids with our lease, the counter's
-- TTL copied to the table (as Redisson does).
local function take()
    redis.call('decrby', N, ARGV[1])
    local expiry = now + tonumber(ARGV[2])
    for i = 1, #ARGV[4] - 15, 16 do
        redis.call('zadd', T, expiry, string.sub(ARGV[4], i, i + 15))
    end
    local ttl = redis.call('pttl', N)
    if ttl > 0 then
        redis.call('pexpire', T, ttl)
    end
end
-- The uncontended path, before the helpers are defined: a counter that
-- is a whole number with the permits asked for, nobody in line, no
-- permit past its lease, our ids not given to us (the first tells) —
-- where the full path below takes the permits at once, and so does this
-- (checked against it: tests/semaphore_paths.rs,
-- `the_uncontended_paths_do_what_the_full_ones_do`).
local free = redis.pcall('get', N)
if type(free) == 'string' and string.match(free, '^%-?%d+$')
        and tonumber(free) >= tonumber(ARGV[1])
        and not redis.call('lindex', L, 0)
        and not redis.call('zrangebyscore', T, 0, now, 'limit', 0, 1)[1]
        and not redis.call('zscore', T, string.sub(ARGV[4], 1, 16)) then
    take()
    return {1}
end
"#,
    helpers!(),
    counter_fn!(),
    join_fn!(),
    r#"
local set, bad = counter()
if bad then
    return bad
end
if not set then
    return {3}
end
me = ARGV[3]
local k = tonumber(ARGV[1])
local lease = tonumber(ARGV[2])
local mine = ids(ARGV[4])
-- Our ids given to us before (a grant heard, or not yet): ours, unless
-- their lease ran out (then they go back with the expired ones).
local back = 0
local given = false
for i, id in ipairs(mine) do
    local score = redis.call('zscore', T, id)
    if score and tonumber(score) <= now then
        back = back + redis.call('zrem', T, id)
    elseif score and i == 1 then
        given = true
    end
end
back = back + reclaim()
-- The counter as it is now: `give` read or moved it, or (nil: it found
-- nobody in line) left it as `counter()` read it.
local avail = give(back, back > 0)
local busy = avail ~= nil
avail = avail or tonumber(set)
if given or (mine_given and redis.call('zscore', T, mine[1])) then
    for _, id in ipairs(mine) do
        redis.call('zadd', T, 'xx', now + lease, id)
    end
    return {1}
end
-- All the semaphore has (available and out) is read only when what is
-- available is not enough: it is never less.
local all = avail >= k and avail or total()
if k > all then
    if ARGV[3] ~= '' and redis.call('hdel', P, ARGV[3]) == 1 then
        redis.call('lrem', L, 1, ARGV[3])
    end
    return {2, all}
end
local first = busy and head()
if (not first or first == ARGV[3]) and avail >= k then
    take()
    if first then
        redis.call('lpop', L)
        redis.call('hdel', P, first)
    end
    return {1}
end
local joined = 0
if ARGV[3] ~= '' and join(ARGV[3], ARGV[4]) then
    joined = 1
end
local wait = -1
local soonest = redis.call('zrange', T, 0, 0, 'withscores')
if soonest[2] and tonumber(soonest[2]) < "#,
    "922337203685477",
    r#" then
    wait = math.max(tonumber(soonest[2]) - now, 0) + 1
end
if first == YIELD then
    local left = place(YIELD) - now + 1
    if wait < 0 or left < wait then
        wait = left
    end
end
return {0, wait, avail, 1, joined}
"#
);

/// Release. ARGV: the ids. Each of them still in the table goes (expired
/// ones too: they would be reclaimed anyway), with every expired permit;
/// all go back (to the line first). Reply `{present, alive}`: how many of
/// ours were still there, and how many of those had not expired.
pub(crate) const RELEASE: &str = concat!(
    base!(),
    r#"
-- Read before anything is written (a line key that is no list fails the
-- call here, with nothing changed).
local first = redis.call('lindex', L, 0)
-- Expired permits go back (as `reclaim` takes them, not defined here):
-- ours among them were present, not alive. When they were all read (fewer
-- than the most one script takes), one of ours still in the table is
-- alive — taken out in one call, without reading its lease first.
"#,
    take_expired!(),
    r#"
local all_read = #expired < "#,
    reclaim_max!(),
    r#"
local present, alive, n = 0, 0, #expired
-- Looked up, not scanned: up to 1,000 ids of ours against 1,000 expired.
local gone = false
for _, e in ipairs(expired) do
    gone = gone or {}
    gone[e] = true
end
for i = 1, #ARGV[1] - 15, 16 do
    local id = string.sub(ARGV[1], i, i + 15)
    if gone and gone[id] then
        present = present + 1
    else
        local score = not all_read and redis.call('zscore', T, id)
        if redis.call('zrem', T, id) == 1 then
            present, n = present + 1, n + 1
            if all_read or tonumber(score) > now then
                alive = alive + 1
            end
        end
    end
end
-- Nobody in line, before the helpers are defined: what came back goes to
-- the counter and is announced, all `give` does then (checked against it:
-- tests/semaphore_paths.rs, `the_uncontended_paths_do_what_the_full_ones_do`).
if not first then
    local avail = n > 0 and redis.call('incrby', N, n)
    if avail and avail > 0 then
        redis.call('publish', C, avail)
    end
    return {present, alive}
end
"#,
    helpers!(),
    r#"
-- The line's head as read above: nothing since changed the line.
give(n, n > 0, first)
return {present, alive}
"#
);

/// Leave the line. ARGV: place, the ids. The place goes (from the list too
/// when its expiry is already gone: nothing is left behind), and so do our
/// permits if a grant gave them to us meanwhile; what that gives back — and
/// what our place held up, if it was first — goes to the line, and what is
/// left available is announced (Redisson's waiters may have waited behind
/// our place). Reply: how many permits of ours were granted (and are given
/// back now).
pub(crate) const LEAVE: &str = concat!(
    prelude!(),
    r#"
redis.call('hdel', P, ARGV[1])
redis.call('lrem', L, 1, ARGV[1])
local ours = 0
for _, id in ipairs(ids(ARGV[2])) do
    ours = ours + redis.call('zrem', T, id)
end
give(ours + reclaim(), true)
return ours
"#
);

/// Set the number of permits. ARGV: the total, `1` to set it only when the
/// semaphore has none set yet (Redisson's `trySetPermits`). The total
/// counts permits taken (the lease table) and available (the counter), as
/// Redisson's `setPermits`: the counter moves by the difference. Reply: 1
/// when set, 0 when it was set already (`ARGV[2] == '1'`).
pub(crate) const SET_PERMITS: &str = concat!(
    prelude!(),
    r#"
local _, bad = counter()
if bad then
    return bad
end
local current = redis.call('get', N)
if current and ARGV[2] == '1' then
    return 0
end
reclaim()
local free = tonumber(ARGV[1]) - redis.call('zcard', T)
if current then
    if free ~= tonumber(current) then
        redis.call('incrby', N, free - tonumber(current))
    end
else
    redis.call('set', N, free)
end
give(0, true)
return 1
"#
);

/// Add permits (a negative number takes them away; the counter may go
/// below zero while more are taken than there are). ARGV: the number.
/// Reply: the permits available after.
pub(crate) const ADD_PERMITS: &str = concat!(
    prelude!(),
    r#"
local _, bad = counter()
if bad then
    return bad
end
redis.call('incrby', N, ARGV[1])
local back = reclaim()
give(back, back > 0 or tonumber(ARGV[1]) > 0)
return tonumber(redis.call('get', N))
"#
);

/// Available permits, after expired ones went back (a write, as
/// Redisson's `availablePermits`). Reply: the counter, nil when there is
/// none.
pub(crate) const AVAILABLE: &str = concat!(
    prelude!(),
    r#"
local _, bad = counter()
if bad then
    return bad
end
local back = reclaim()
give(back, back > 0)
return redis.call('get', N)
"#
);

/// What an operator sees (reads only): `{now ms, counter (nil: none), {id,
/// expiry, …} of the lease table, {place, ms it lives, permits asked, …}
/// of the line}`.
pub(crate) const INSPECT: &str = r#"
local N, T, L, P = KEYS[1], KEYS[2], KEYS[4], KEYS[5]
local clock = redis.call('time')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local places = {}
for _, p in ipairs(redis.call('lrange', L, 0, 999)) do
    local v = string.sub(p, 1, 1) ~= '~' and redis.call('hget', P, p)
    local sp = v and string.find(v, ' ', 1, true)
    local ttl = sp and tonumber(string.sub(v, 1, sp - 1)) - now
    if ttl and ttl > 0 then
        places[#places + 1] = p
        places[#places + 1] = ttl
        places[#places + 1] = math.floor((#v - sp) / 16)
    end
end
local held = {}
for i, v in ipairs(redis.call('zrange', T, 0, 999, 'withscores')) do
    if i % 2 == 1 then
        held[#held + 1] = v
    else
        held[#held + 1] = string.format('%.0f', tonumber(v))
    end
end
return {now, redis.call('get', N), held, places}
"#;
