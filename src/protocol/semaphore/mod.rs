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
//!
//! Files: this one calls the scripts and reads their replies; `scripts.rs`
//! holds their Lua.

use std::time::Duration;

use redis::{ConnectionLike, RedisResult, Value};

use super::{items, millis, unexpected, Call, Lua, PubSub};
use crate::names::SemaphoreKeys;

mod scripts;
pub(crate) use scripts::{
    reclaim_max, ACQUIRE, ADD_PERMITS, AVAILABLE, INSPECT, LEAVE, RELEASE, SET_PERMITS,
};

/// Redisson's score for a permit without a lease.
pub(crate) const NO_LEASE_SCORE: u64 = 922_337_203_685_477;

/// How long permits left to Redisson's waiters are kept from leasehold's
/// acquires at most (until then the next leasehold release ends their
/// turn; Redisson's waiters hear the announcement and try within a round
/// trip or two). In the scripts as [`yield_ms!`].
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) const YIELD: Duration = Duration::from_millis(20);
macro_rules! yield_ms {
    () => {
        "20"
    };
}
pub(crate) use yield_ms;

/// The most permits one acquisition may take at once (each is a member of
/// the lease table, written by one script).
pub(crate) const MAX_PERMITS_AT_ONCE: u32 = 1_000;

/// What an acquire attempt found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Acquire {
    /// The permits are ours, with the lease asked for.
    Acquired,
    /// Not now: try again after at most `hint` (when the soonest lease ends;
    /// `None`: no lease ends). `available`: the counter (`None`: no permits
    /// were ever set). `joined`: our place was new in the line.
    Wait {
        hint: Option<Duration>,
        available: Option<i64>,
        joined: bool,
    },
    /// More permits asked for than the semaphore has in all (`total`): it
    /// would wait forever. Our place, if any, is gone.
    TooMany { total: i64 },
    /// The semaphore has no permits: they were never set (or its key was
    /// deleted). Nothing was changed.
    NotSet,
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
    pub(super) acquire: Lua,
    pub(super) release: Lua,
    pub(super) leave: Lua,
    pub(super) set_permits: Lua,
    pub(super) add_permits: Lua,
    pub(super) available: Lua,
    pub(super) inspect: Lua,
}

/// The semaphore's five keys, as every script takes them.
fn five(k: &SemaphoreKeys) -> (&str, &str, &str, &str, &str) {
    (&k.counter, &k.timeout, &k.channel, &k.line, &k.places)
}

impl SemaphoreScripts {
    pub(crate) fn new(pubsub: PubSub) -> Self {
        SemaphoreScripts {
            acquire: pubsub.lua(ACQUIRE),
            release: pubsub.lua(RELEASE),
            leave: pubsub.lua(LEAVE),
            set_permits: pubsub.lua(SET_PERMITS),
            add_permits: pubsub.lua(ADD_PERMITS),
            available: pubsub.lua(AVAILABLE),
            inspect: PubSub::Classic.lua(INSPECT),
        }
    }

    /// One attempt to take `permits` permits with ids `ids` for `lease`, as
    /// a call (read by [`acquire_reply`]); `place`: the waiter's place in
    /// line (`None`: a single try).
    pub(crate) fn acquire_call(
        &'static self,
        keys: &SemaphoreKeys,
        permits: u32,
        lease: Duration,
        place: Option<&str>,
        ids: &[u8],
    ) -> Call {
        let args = (permits, millis(lease), place.unwrap_or(""), ids);
        self.acquire.call(5, (five(keys), args))
    }

    /// Gives back the permits with ids `ids`, as a call (read by
    /// [`release_reply`]).
    pub(crate) fn release_call(&'static self, keys: &SemaphoreKeys, ids: &[u8]) -> Call {
        self.release.call(5, (five(keys), ids))
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
        self.leave.query(con, 5, (five(keys), place, ids))
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
        let set: i64 = (self.set_permits).query(con, 5, (five(keys), total, only_if_unset))?;
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
        self.add_permits.query(con, 5, (five(keys), delta))
    }

    /// Available permits after expired ones went back (`None`: never set).
    pub(crate) fn available(
        &self,
        con: &mut dyn ConnectionLike,
        keys: &SemaphoreKeys,
    ) -> RedisResult<Option<i64>> {
        self.available.query(con, 5, five(keys))
    }

    /// An operator's read of the whole semaphore (the first 1,000 permits
    /// and places).
    pub(crate) fn inspect(
        &self,
        con: &mut dyn ConnectionLike,
        keys: &SemaphoreKeys,
    ) -> RedisResult<State> {
        let reply: Value = self.inspect.query(con, 5, five(keys))?;
        parse_state(&reply).ok_or_else(|| unexpected("semaphore inspect", &reply))
    }
}

fn parse_state(reply: &Value) -> Option<State> {
    let [Value::Int(now), avail, Value::Array(held), Value::Array(line)] = items(reply) else {
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

/// Whether a semaphore acquire's reply says it took the permits (`{1}`).
pub(crate) fn took_permits(reply: &Value) -> bool {
    matches!(items(reply), [Value::Int(1)])
}

/// What an acquire's reply says.
pub(crate) fn acquire_reply(reply: Value) -> RedisResult<Acquire> {
    Ok(match items(&reply) {
        [Value::Int(1)] => Acquire::Acquired,
        [Value::Int(0), Value::Int(wait), Value::Int(avail), Value::Int(exists), Value::Int(joined)] => {
            Acquire::Wait {
                hint: u64::try_from(*wait).ok().map(Duration::from_millis),
                available: (*exists == 1).then_some(*avail),
                joined: *joined == 1,
            }
        }
        [Value::Int(2), Value::Int(total)] => Acquire::TooMany { total: *total },
        [Value::Int(3)] => Acquire::NotSet,
        _ => return Err(unexpected("semaphore acquire", &reply)),
    })
}

/// What a release's reply says: how many of the ids were present, and how
/// many of those were alive.
pub(crate) fn release_reply(reply: Value) -> RedisResult<Released> {
    if let [Value::Int(present), Value::Int(alive)] = items(&reply) {
        if let (Ok(present), Ok(alive)) = (u32::try_from(*present), u32::try_from(*alive)) {
            return Ok(Released { present, alive });
        }
    }
    Err(unexpected("semaphore release", &reply))
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
            // 'leasehold_swait' .. string.sub(C, 12)
            let tail = &keys.channel[11..];
            assert_eq!(
                Some(format!("leasehold_swait{tail}")),
                crate::names::semaphore_waiters(&keys.channel)
            );
        }
        assert_eq!(yield_ms!(), millis(YIELD).to_string());
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
