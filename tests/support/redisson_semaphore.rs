//! Redisson's `RPermitExpirableSemaphore` played on the wire, for mixed
//! tests: its names (`<name>`, `{<name>}:timeout`, `redisson_sc:{<name>}`),
//! 16-byte permit ids drawn by the client, expiry scores from the
//! client's own clock (epoch ms, passed to the scripts), and the logic of
//! its `tryAcquire`, `release(id)`, `availablePermits` and `trySetPermits`
//! scripts: expired permits are taken back ("reclaimed") by whichever
//! script runs next — at most as many as asked for, in `tryAcquire`.
//!
//! Written (our own Lua) from a reading of Redisson's
//! `RedissonPermitExpirableSemaphore` at 4.7.x (August 2026; its scripts
//! are unchanged since 3.41.0).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::redisson::{prefix_name, suffix_name};

/// Redisson's score for a permit taken without a lease.
pub const NO_LEASE: u64 = 922_337_203_685_477;

/// Takes back up to `ARGV[3]`-given `limit` expired permits (score ≤ now):
/// out of the table, into the counter; publishes the counter when positive.
/// KEYS: counter, table, channel; ARGV[1]: now, ARGV[2]: limit, ARGV[3]:
/// the publish command.
const RECLAIM: &str = r#"
local function reclaim(now, limit, publish)
    local gone = redis.call('zrangebyscore', KEYS[2], 0, now, 'limit', 0, limit)
    if #gone > 0 then
        redis.call('zrem', KEYS[2], unpack(gone))
        local value = redis.call('incrby', KEYS[1], #gone)
        if tonumber(value) > 0 then
            redis.call(publish, KEYS[3], value)
        end
    end
end
"#;

/// `tryAcquire(permits, lease)`. KEYS: counter, table, channel. ARGV:
/// permits, expiry score, now, no-lease score, publish command, then the
/// ids. Reply: `'OK'` taken; `':<soonest expiry>'` not now; nil not now
/// and no lease ends.
fn try_acquire_script() -> String {
    format!(
        "{RECLAIM}{}",
        r#"
local k = tonumber(ARGV[1])
reclaim(ARGV[3], k, ARGV[5])
local value = redis.call('get', KEYS[1])
if value ~= false and tonumber(value) >= k then
    redis.call('decrby', KEYS[1], k)
    for i = 6, #ARGV do
        redis.call('zadd', KEYS[2], ARGV[2], ARGV[i])
    end
    local ttl = redis.call('pttl', KEYS[1])
    if ttl > 0 then
        redis.call('pexpire', KEYS[2], ttl)
    end
    return 'OK'
end
local first = redis.call('zrange', KEYS[2], 0, 0, 'withscores')
if first[1] ~= nil and first[2] ~= ARGV[4] then
    return ':' .. first[2]
end
return nil
"#
    )
}

/// `tryRelease(id)`. KEYS: counter, channel, table (this order). ARGV:
/// id, 1, now, publish command. 1 released with its lease alive; 0 not
/// there, or expired (given back all the same).
const RELEASE: &str = r#"
local expiry = redis.call('zscore', KEYS[3], ARGV[1])
local removed = redis.call('zrem', KEYS[3], ARGV[1])
if tonumber(removed) ~= 1 then
    return 0
end
local value = redis.call('incrby', KEYS[1], ARGV[2])
redis.call(ARGV[4], KEYS[2], value)
if tonumber(expiry) <= tonumber(ARGV[3]) then
    return 0
end
return 1
"#;

/// `availablePermits()`. KEYS: counter, table, channel. ARGV: now,
/// publish command.
fn available_script() -> String {
    format!(
        "{RECLAIM}{}",
        r#"
reclaim(ARGV[1], -1, ARGV[2])
local value = redis.call('get', KEYS[1])
if value == false then
    return 0
end
return tonumber(value)
"#
    )
}

/// One Redisson client's view of one server (or the cluster node serving
/// the semaphores it is given), with its clock `skew` ahead of the host's.
pub struct RedissonSemaphore {
    con: redis::Connection,
    publish: &'static str,
    pub skew_ms: i64,
}

/// What a Redisson `tryAcquire` got.
#[derive(Debug, PartialEq, Eq)]
pub enum Tried {
    /// The permits' ids (hex, as Redisson returns them).
    Taken(Vec<String>),
    /// Not now; the soonest lease ends then (epoch ms), when one does.
    Later(Option<u64>),
}

impl RedissonSemaphore {
    pub fn new(url: &str, sharded: bool) -> Self {
        RedissonSemaphore {
            con: redis::Client::open(url).unwrap().get_connection().unwrap(),
            publish: if sharded { "spublish" } else { "publish" },
            skew_ms: 0,
        }
    }

    /// The client's clock: epoch ms, plus its skew.
    pub fn now(&self) -> u64 {
        let ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64;
        (ms + self.skew_ms) as u64
    }

    fn keys(name: &str) -> (String, String, String) {
        (
            name.to_owned(),
            suffix_name(name, "timeout"),
            prefix_name("redisson_sc", name),
        )
    }

    /// `trySetPermits(permits)`: true when the counter did not exist.
    pub fn try_set_permits(&mut self, name: &str, permits: u32) -> bool {
        let (counter, _, channel) = Self::keys(name);
        let set: i64 = redis::Script::new(
            "local v = redis.call('get', KEYS[1]); if v == false then redis.call('set', KEYS[1], ARGV[1]); redis.call(ARGV[2], KEYS[2], ARGV[1]); return 1; end; return 0;",
        )
        .key(counter)
        .key(channel)
        .arg(permits)
        .arg(self.publish)
        .invoke(&mut self.con)
        .unwrap();
        set == 1
    }

    /// `tryAcquire(permits, lease)` once (`lease` `None`: no lease).
    pub fn try_acquire(&mut self, name: &str, permits: u32, lease: Option<Duration>) -> Tried {
        let (counter, table, channel) = Self::keys(name);
        let now = self.now();
        let expiry = lease.map_or(NO_LEASE, |l| now + l.as_millis() as u64);
        let ids: Vec<[u8; 16]> = (0..permits)
            .map(|_| *uuid::Uuid::new_v4().as_bytes())
            .collect();
        let script = redis::Script::new(&try_acquire_script());
        let mut inv = script.key(counter);
        inv.key(table)
            .key(channel)
            .arg(permits)
            .arg(expiry)
            .arg(now)
            .arg(NO_LEASE)
            .arg(self.publish);
        for id in &ids {
            inv.arg(&id[..]);
        }
        let reply: Option<String> = inv.invoke(&mut self.con).unwrap();
        match reply.as_deref() {
            Some("OK") => Tried::Taken(ids.iter().map(|id| hex(id)).collect()),
            Some(hint) => Tried::Later(hint.strip_prefix(':').and_then(|h| h.parse().ok())),
            None => Tried::Later(None),
        }
    }

    /// `release(id)` (`id` in hex): true when it was there and alive.
    pub fn release(&mut self, name: &str, id: &str) -> bool {
        let (counter, table, channel) = Self::keys(name);
        let raw: Vec<u8> = (0..id.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&id[i..i + 2], 16).unwrap())
            .collect();
        let released: i64 = redis::Script::new(RELEASE)
            .key(counter)
            .key(channel)
            .key(table)
            .arg(raw)
            .arg(1)
            .arg(self.now())
            .arg(self.publish)
            .invoke(&mut self.con)
            .unwrap();
        released == 1
    }

    /// `availablePermits()`.
    pub fn available(&mut self, name: &str) -> i64 {
        let (counter, table, channel) = Self::keys(name);
        let now = self.now();
        redis::Script::new(&available_script())
            .key(counter)
            .key(table)
            .key(channel)
            .arg(now)
            .arg(self.publish)
            .invoke(&mut self.con)
            .unwrap()
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
