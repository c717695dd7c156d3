//! The semaphore's protocol, with no threads: acquire, release, leave the
//! line, set or add permits, and the reads, as Lua scripts on Redisson's
//! `RPermitExpirableSemaphore` layout (see `names::SemaphoreKeys`), so a
//! Java service and a Rust service share one semaphore:
//! - the counter `<key>` holds the permits available now;
//! - the lease table `{<key>}:timeout` holds one member per permit taken —
//!   its id, 16 raw bytes — scored by when its lease ends (epoch ms);
//! - an expired permit is taken back ("reclaimed") by whichever script runs
//!   next, of either library: it leaves the table and the counter grows;
//! - `redisson_sc:{<key>}` hears how many permits are available (a decimal
//!   number, never negative) when some came back and nobody of ours waits.
//!
//! Unlike Redisson, expiry is judged by the server's clock (`TIME` in the
//! scripts), never a client's; and waiting acquisitions stand in a line
//! (`leasehold_sline:{<key>}`, a list of places, and beside it the hash
//! `leasehold_sline:{<key>}:places`: each place → until when it lives and
//! the ids it asks for): permits that come back go to the first places in line
//! while what each asks for fits — set in the lease table with a short
//! lease, and its client alone is told on its grant channel — so one
//! waiter wakes per released permit, in order across processes.
//!
//! Every check is inside the scripts; permit ids travel as `ARGV[]`, names
//! as `KEYS[]` (counter, lease table, channel, line, places), never inside
//! Lua source; every key a script touches is one of its `KEYS` (only the
//! grant channels are named in Lua).

use std::time::Duration;

use redis::{Cmd, ConnectionLike, RedisResult, Script, Value};

use super::{evalsha, millis, run, unexpected, Call, Lua, PubSub};
use crate::names::SemaphoreKeys;

/// Redisson's score for a permit without a lease.
pub(crate) const NO_LEASE_SCORE: u64 = 922_337_203_685_477;

/// The most permits one acquisition may take at once (each is a member of
/// the lease table, written by one script).
pub(crate) const MAX_PERMITS_AT_ONCE: u32 = 1_000;

/// The Lua prelude of every semaphore script: the keys, the server's clock
/// in ms (`now`), and the helpers `ids(blob)` (16-byte permit ids),
/// `total()` (permits available and out; nil while the counter does not
/// exist), `head()` (the first live place in line and the ids it asks for,
/// dropping on the way dead places and places asking for more permits than
/// the semaphore has — their waiters' next attempt is refused), `reclaim()`
/// (takes expired permits out of the lease table: how many), `place(p)`
/// (until when place `p` lives, ms, and the ids it asks for; nil when it
/// has no entry), `give(n,
/// announce)` (gives `n` permits back: to the places first in line while
/// what each asks for fits — each set with the short lease its place names,
/// its place gone, its client told on its grant channel
/// `leasehold_sgrant:{<key>}:<client id>` with the place, unless it is the
/// place of the acquire running (`me`), which answers it — then, with
/// `announce`, the count left available on Redisson's channel, for its
/// waiters: they are not in our line) and `join(place, blob)` (takes a
/// place at the end of the line, or confirms it where it stands).
macro_rules! prelude {
    () => {
        concat!(
            $crate::protocol::plain::granted_fn!(),
            r#"
local N, T, C, L, P = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local clock = redis.call('time')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local me = false
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
local function head()
    local all = total()
    local first = redis.call('lindex', L, 0)
    while first do
        local until_ms, blob = place(first)
        if until_ms and until_ms > now and string.match(first, '^.+:.+#.+$')
                and not (all and #blob / 16 > all) then
            return first, blob
        end
        redis.call('lpop', L)
        redis.call('hdel', P, first)
        first = redis.call('lindex', L, 0)
    end
    return nil
end
local function reclaim()
    local expired = redis.call('zrangebyscore', T, 0, now, 'limit', 0, "#,
            $crate::protocol::semaphore::reclaim_max!(),
            r#")
    if #expired > 0 then
        redis.call('zrem', T, unpack(expired))
    end
    return #expired
end
local function give(n, announce)
    local avail
    if n > 0 then
        avail = redis.call('incrby', N, n)
    else
        avail = tonumber(redis.call('get', N) or '0')
    end
    local first, blob = head()
    while first and math.floor(#blob / 16) <= avail do
        avail = redis.call('decrby', N, math.floor(#blob / 16))
        local expiry = now + granted(first)
        for _, id in ipairs(ids(blob)) do
            redis.call('zadd', T, expiry, id)
        end
        redis.call('lpop', L)
        redis.call('hdel', P, first)
        if first ~= me then
            redis.call('publish', 'leasehold_sgrant' .. string.sub(L, 16) .. ':'
                .. string.match(first, '^(.*):'), first)
        end
        first, blob = head()
    end
    if announce and avail > 0 then
        redis.call('publish', C, avail)
    end
end
local function join(p, blob)
    if redis.call('hset', P, p, (now + placed(p)) .. ' ' .. blob) == 1 then
        redis.call('rpush', L, p)
    end
    -- No place lives longer: the places of waiters that all died go by
    -- themselves (their dead entries in the line with the next script).
    redis.call('pexpire', P, "#,
            $crate::protocol::plain::place_lease_ms!(),
            r#")
end
"#
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
/// Our own ids past their lease (a grant heard too late) and every expired
/// permit go back first (to the line). Then: our ids in the table — a grant
/// to our place came first, or just now — are ours, with our own lease:
/// `{1}`. More permits asked for than the semaphore has in all: our place
/// goes, `{2, total}`. Otherwise, with nobody before us in line (no live
/// place, or ours first) and enough permits available, they are taken (the
/// counter's TTL copied to the table, as Redisson does): `{1}`. Otherwise
/// our place is taken or confirmed and the reply is `{0, ms until the
/// soonest lease ends + 1 (-1: no lease ends), available, 1 (0: the
/// counter does not exist)}`.
pub(crate) const ACQUIRE: &str = concat!(
    prelude!(),
    r#"
me = ARGV[3]
local k = tonumber(ARGV[1])
local lease = tonumber(ARGV[2])
local mine = ids(ARGV[4])
local back = 0
for _, id in ipairs(mine) do
    local score = redis.call('zscore', T, id)
    if score and tonumber(score) <= now then
        back = back + redis.call('zrem', T, id)
    end
end
back = back + reclaim()
give(back, back > 0)
if redis.call('zscore', T, mine[1]) then
    for _, id in ipairs(mine) do
        redis.call('zadd', T, 'xx', now + lease, id)
    end
    return {1}
end
local all = total()
if all and k > all then
    if ARGV[3] ~= '' and redis.call('hdel', P, ARGV[3]) == 1 then
        redis.call('lrem', L, 1, ARGV[3])
    end
    return {2, all}
end
local first = head()
local avail = tonumber(redis.call('get', N) or '0')
if all and (not first or first == ARGV[3]) and avail >= k then
    redis.call('decrby', N, k)
    for _, id in ipairs(mine) do
        redis.call('zadd', T, now + lease, id)
    end
    if first then
        redis.call('lpop', L)
        redis.call('hdel', P, first)
    end
    local ttl = redis.call('pttl', N)
    if ttl > 0 then
        redis.call('pexpire', T, ttl)
    end
    return {1}
end
if ARGV[3] ~= '' then
    join(ARGV[3], ARGV[4])
end
local wait = -1
local soonest = redis.call('zrange', T, 0, 0, 'withscores')
if soonest[2] and tonumber(soonest[2]) < "#,
    "922337203685477",
    r#" then
    wait = math.max(tonumber(soonest[2]) - now, 0) + 1
end
if all then
    return {0, wait, avail, 1}
end
return {0, wait, 0, 0}
"#
);

/// Release. ARGV: the ids. Each of them still in the table goes (expired
/// ones too: they would be reclaimed anyway), with every expired permit;
/// all go back (to the line first). Reply `{present, alive}`: how many of
/// ours were still there, and how many of those had not expired.
pub(crate) const RELEASE: &str = concat!(
    prelude!(),
    r#"
local present, alive = 0, 0
for _, id in ipairs(ids(ARGV[1])) do
    local score = redis.call('zscore', T, id)
    if score then
        redis.call('zrem', T, id)
        present = present + 1
        if tonumber(score) > now then
            alive = alive + 1
        end
    end
end
local n = present + reclaim()
give(n, n > 0)
return {present, alive}
"#
);

/// Leave the line. ARGV: place, the ids. The place goes, and so do our
/// permits if a grant gave them to us meanwhile; what that gives back — and
/// what our place held up, if it was first — goes to the line, and what is
/// left available is announced (Redisson's waiters may have waited behind
/// our place). Reply: how many permits of ours were granted (and are given
/// back now).
pub(crate) const LEAVE: &str = concat!(
    prelude!(),
    r#"
if redis.call('hdel', P, ARGV[1]) == 1 then
    redis.call('lrem', L, 1, ARGV[1])
end
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
    local v = redis.call('hget', P, p)
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

/// What an acquire attempt found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Acquire {
    /// The permits are ours, with the lease asked for.
    Acquired,
    /// Not now: try again after at most `hint` (when the soonest lease ends;
    /// `None`: no lease ends). `available`: the counter (`None`: no permits
    /// were ever set).
    Wait {
        hint: Option<Duration>,
        available: Option<i64>,
    },
    /// More permits asked for than the semaphore has in all (`total`): it
    /// would wait forever. Our place, if any, is gone.
    TooMany { total: i64 },
}

/// What a release found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Released {
    /// Ids of ours still in the table (given back now).
    pub(crate) present: u32,
    /// Of those, the ones whose lease had not ended.
    pub(crate) alive: u32,
}

/// A permit in the lease table, as an operator sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HeldPermit {
    pub(crate) id: Vec<u8>,
    /// When its lease ends (epoch ms; [`NO_LEASE_SCORE`]: never).
    pub(crate) expiry_ms: u64,
}

/// A place in the line, as an operator sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LinePlace {
    pub(crate) place: String,
    /// How long it lives unless its waiter confirms it.
    pub(crate) ttl: Duration,
    pub(crate) permits: u32,
}

/// A semaphore as an operator's read found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct State {
    /// The server's clock (epoch ms).
    pub(crate) now_ms: u64,
    /// The counter (`None`: no permits were ever set).
    pub(crate) available: Option<i64>,
    pub(crate) held: Vec<HeldPermit>,
    pub(crate) line: Vec<LinePlace>,
}

/// The semaphore's scripts, hashed once per client.
pub(crate) struct SemaphoreScripts {
    acquire: Lua,
    release: Lua,
    leave: Script,
    set_permits: Script,
    add_permits: Script,
    available: Script,
    inspect: Script,
}

impl SemaphoreScripts {
    pub(crate) fn new(pubsub: PubSub) -> Self {
        SemaphoreScripts {
            acquire: pubsub.lua(ACQUIRE),
            release: pubsub.lua(RELEASE),
            leave: pubsub.script(LEAVE),
            set_permits: pubsub.script(SET_PERMITS),
            add_permits: pubsub.script(ADD_PERMITS),
            available: pubsub.script(AVAILABLE),
            inspect: Script::new(INSPECT),
        }
    }

    /// One `EVALSHA` of `script` on the semaphore's five keys, with `args`.
    fn call<T: redis::FromRedisValue>(
        con: &mut dyn ConnectionLike,
        script: &Script,
        keys: &SemaphoreKeys,
        args: &[&[u8]],
    ) -> RedisResult<T> {
        run(con, script, &Self::cmd(script, keys, args))
    }

    /// The `EVALSHA` of `script` on the semaphore's five keys, with `args`.
    fn cmd(script: &Script, keys: &SemaphoreKeys, args: &[&[u8]]) -> Cmd {
        let mut cmd = evalsha(script, 5);
        cmd.arg(&keys.counter)
            .arg(&keys.timeout)
            .arg(&keys.channel)
            .arg(&keys.line)
            .arg(&keys.places);
        for a in args {
            cmd.arg(*a);
        }
        cmd
    }

    /// One attempt to take `permits` permits with ids `ids` for `lease`;
    /// `place`: the waiter's place in line (`None`: a single try).
    pub(crate) fn acquire(
        &self,
        con: &mut dyn ConnectionLike,
        keys: &SemaphoreKeys,
        permits: u32,
        lease: Duration,
        place: Option<&str>,
        ids: &[u8],
    ) -> RedisResult<Acquire> {
        let call = self.acquire_call(keys, permits, lease, place, ids);
        acquire_reply(call.run(con)?)
    }

    /// [`acquire`](Self::acquire) as a call (read by [`acquire_reply`]):
    /// what the async face's reactor lane (feature `tokio`) sends.
    pub(crate) fn acquire_call(
        &self,
        keys: &SemaphoreKeys,
        permits: u32,
        lease: Duration,
        place: Option<&str>,
        ids: &[u8],
    ) -> Call<'_> {
        let (k, ms) = (permits.to_string(), millis(lease).to_string());
        let args: [&[u8]; 4] = [
            k.as_bytes(),
            ms.as_bytes(),
            place.unwrap_or("").as_bytes(),
            ids,
        ];
        self.acquire
            .call(Self::cmd(&self.acquire.script, keys, &args))
    }

    /// Gives back the permits with ids `ids`.
    pub(crate) fn release(
        &self,
        con: &mut dyn ConnectionLike,
        keys: &SemaphoreKeys,
        ids: &[u8],
    ) -> RedisResult<Released> {
        release_reply(self.release_call(keys, ids).run(con)?)
    }

    /// [`release`](Self::release) as a call (read by [`release_reply`]).
    pub(crate) fn release_call(&self, keys: &SemaphoreKeys, ids: &[u8]) -> Call<'_> {
        self.release
            .call(Self::cmd(&self.release.script, keys, &[ids]))
    }

    /// Leaves `place`, giving back what a grant gave it meanwhile: how many
    /// permits that was.
    pub(crate) fn leave(
        &self,
        con: &mut dyn ConnectionLike,
        keys: &SemaphoreKeys,
        place: &str,
        ids: &[u8],
    ) -> RedisResult<u32> {
        Self::call(con, &self.leave, keys, &[place.as_bytes(), ids])
    }

    /// Sets the total number of permits (`only_if_unset`: only when none was
    /// set yet; false when it was).
    pub(crate) fn set_permits(
        &self,
        con: &mut dyn ConnectionLike,
        keys: &SemaphoreKeys,
        total: u32,
        only_if_unset: bool,
    ) -> RedisResult<bool> {
        let total = total.to_string();
        let flag: &[u8] = if only_if_unset { b"1" } else { b"0" };
        let set: i64 = Self::call(con, &self.set_permits, keys, &[total.as_bytes(), flag])?;
        Ok(set == 1)
    }

    /// Adds `delta` permits (negative: takes them away); the count available
    /// after.
    pub(crate) fn add_permits(
        &self,
        con: &mut dyn ConnectionLike,
        keys: &SemaphoreKeys,
        delta: i64,
    ) -> RedisResult<i64> {
        let delta = delta.to_string();
        Self::call(con, &self.add_permits, keys, &[delta.as_bytes()])
    }

    /// Available permits after expired ones went back (`None`: never set).
    pub(crate) fn available(
        &self,
        con: &mut dyn ConnectionLike,
        keys: &SemaphoreKeys,
    ) -> RedisResult<Option<i64>> {
        Self::call(con, &self.available, keys, &[])
    }

    /// An operator's read of the whole semaphore (the first 1,000 permits
    /// and places).
    pub(crate) fn inspect(
        &self,
        con: &mut dyn ConnectionLike,
        keys: &SemaphoreKeys,
    ) -> RedisResult<State> {
        let reply: Value = Self::call(con, &self.inspect, keys, &[])?;
        parse_state(&reply).ok_or_else(|| unexpected("semaphore inspect", &reply))
    }
}

fn parse_state(reply: &Value) -> Option<State> {
    let Value::Array(items) = reply else {
        return None;
    };
    let [Value::Int(now), avail, Value::Array(held), Value::Array(line)] = items.as_slice() else {
        return None;
    };
    let available = match avail {
        Value::Nil => None,
        Value::BulkString(n) => Some(std::str::from_utf8(n).ok()?.parse().ok()?),
        _ => return None,
    };
    let bytes = |v: &Value| match v {
        Value::BulkString(b) => Some(b.clone()),
        _ => None,
    };
    let held = held
        .chunks(2)
        .map(|pair| {
            let id = bytes(pair.first()?)?;
            let expiry_ms = String::from_utf8(bytes(pair.get(1)?)?).ok()?.parse().ok()?;
            Some(HeldPermit { id, expiry_ms })
        })
        .collect::<Option<Vec<_>>>()?;
    let line = line
        .chunks(3)
        .map(|t| {
            let place = String::from_utf8(bytes(t.first()?)?).ok()?;
            let (Some(Value::Int(ttl)), Some(Value::Int(k))) = (t.get(1), t.get(2)) else {
                return None;
            };
            Some(LinePlace {
                place,
                ttl: Duration::from_millis(u64::try_from(*ttl).ok()?),
                permits: u32::try_from(*k).ok()?,
            })
        })
        .collect::<Option<Vec<_>>>()?;
    Some(State {
        now_ms: u64::try_from(*now).ok()?,
        available,
        held,
        line,
    })
}

/// What an acquire's reply says.
pub(crate) fn acquire_reply(reply: Value) -> RedisResult<Acquire> {
    match &reply {
        Value::Array(items) => match items.as_slice() {
            [Value::Int(1)] => Ok(Acquire::Acquired),
            [Value::Int(0), Value::Int(wait), Value::Int(avail), Value::Int(exists)] => {
                Ok(Acquire::Wait {
                    hint: u64::try_from(*wait).ok().map(Duration::from_millis),
                    available: (*exists == 1).then_some(*avail),
                })
            }
            [Value::Int(2), Value::Int(total)] => Ok(Acquire::TooMany { total: *total }),
            _ => Err(unexpected("semaphore acquire", &reply)),
        },
        _ => Err(unexpected("semaphore acquire", &reply)),
    }
}

/// What a release's reply says: how many of the ids were present, and how
/// many of those were alive.
pub(crate) fn release_reply(reply: Value) -> RedisResult<Released> {
    let count = |v: &Value| match v {
        Value::Int(n) => u32::try_from(*n).ok(),
        _ => None,
    };
    match &reply {
        Value::Array(items) => match items.as_slice() {
            [present, alive] => match (count(present), count(alive)) {
                (Some(present), Some(alive)) => Ok(Released { present, alive }),
                _ => Err(unexpected("semaphore release", &reply)),
            },
            _ => Err(unexpected("semaphore release", &reply)),
        },
        _ => Err(unexpected("semaphore release", &reply)),
    }
}

/// What a grant message on a client's semaphore grant channel says: the
/// place it was for. `None` for anything else.
pub(crate) fn parse_grant(payload: &[u8]) -> Option<&str> {
    let place = std::str::from_utf8(payload).ok()?;
    place.contains('#').then_some(place)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scripts_derive_the_names_rust_gives() {
        assert!(ACQUIRE.contains(&NO_LEASE_SCORE.to_string()));
        for key in ["sem", "a{t}b", "{user:7}:exports"] {
            let keys = SemaphoreKeys::of(key);
            // 'leasehold_sgrant' .. string.sub(L, 16) .. ':' .. id
            let tail = &keys.line[15..];
            assert_eq!(
                format!("leasehold_sgrant{tail}:c1"),
                keys.grant_channel("c1")
            );
        }
        assert_eq!(
            SemaphoreKeys::of("sem"),
            SemaphoreKeys {
                counter: "sem".into(),
                timeout: "{sem}:timeout".into(),
                channel: "redisson_sc:{sem}".into(),
                line: "leasehold_sline:{sem}".into(),
                places: "leasehold_sline:{sem}:places".into(),
            }
        );
        assert_eq!(SemaphoreKeys::of("{app}:sem").timeout, "{app}:sem:timeout");
    }

    #[test]
    fn grants_name_a_place() {
        assert_eq!(parse_grant(b"u:1#7@3000/3000"), Some("u:1#7@3000/3000"));
        assert_eq!(parse_grant(b"3"), None);
        assert_eq!(parse_grant(&[0xff, b'#']), None);
    }

    #[test]
    fn an_operators_read_is_parsed() {
        let reply = Value::Array(vec![
            Value::Int(1_000),
            Value::BulkString(b"-2".to_vec()),
            Value::Array(vec![
                Value::BulkString(vec![1; 16]),
                Value::BulkString(b"4000".to_vec()),
            ]),
            Value::Array(vec![
                Value::BulkString(b"u:1#2@3000/3000".to_vec()),
                Value::Int(2500),
                Value::Int(2),
            ]),
        ]);
        let state = parse_state(&reply).unwrap();
        assert_eq!(state.available, Some(-2));
        assert_eq!(state.held[0].expiry_ms, 4000);
        assert_eq!(state.line[0].permits, 2);
        assert_eq!(parse_state(&Value::Int(1)), None);
    }
}
