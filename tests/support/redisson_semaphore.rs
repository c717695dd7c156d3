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

/// One Redisson instance's waiting threads on one semaphore, as Redisson
/// runs them: one subscription to the semaphore's channel per instance
/// (`SemaphorePubSub`), each message — the count available — lets at most
/// that many of the instance's waiting threads try again (its latch is
/// released by `min(waiting, count)`), and a waiting thread also tries
/// again when the soonest lease it was told of ends. Nothing else wakes
/// it: a permit nobody announces is never seen.
pub struct RedissonWaiters {
    latch: std::sync::Arc<Latch>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    reader: Option<std::thread::JoinHandle<()>>,
}

#[derive(Default)]
struct Latch {
    /// (wake-ups released, threads waiting, stopped)
    state: std::sync::Mutex<(u64, u64, bool)>,
    cv: std::sync::Condvar,
}

impl Latch {
    fn release(&self, count: i64) {
        let mut s = self.state.lock().unwrap();
        let k = s.1.min(u64::try_from(count).unwrap_or(0));
        s.0 += k;
        self.cv.notify_all();
    }

    /// Waits for a wake-up until `until` (`None`: for ever); false when it
    /// timed out or the waiters were stopped.
    fn wait(&self, until: Option<std::time::Instant>) -> bool {
        let mut s = self.state.lock().unwrap();
        s.1 += 1;
        let woken = loop {
            if s.2 {
                break false;
            }
            if s.0 > 0 {
                s.0 -= 1;
                break true;
            }
            match until {
                None => s = self.cv.wait(s).unwrap(),
                Some(t) => {
                    let left = t.saturating_duration_since(std::time::Instant::now());
                    if left.is_zero() {
                        break false;
                    }
                    s = self.cv.wait_timeout(s, left).unwrap().0;
                }
            }
        };
        s.1 -= 1;
        woken
    }
}

impl RedissonWaiters {
    /// Subscribed to semaphore `name`'s channel on `url` (the node serving
    /// its slot; `sharded`: `SSUBSCRIBE`) when it returns.
    pub fn start(url: &str, name: &str, sharded: bool) -> Self {
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::sync::Arc;
        let latch = Arc::new(Latch::default());
        let stop = Arc::new(AtomicBool::new(false));
        let mut listener =
            super::redisson::Listener::start(url, &prefix_name("redisson_sc", name), sharded);
        let reader = {
            let (latch, stop) = (Arc::clone(&latch), Arc::clone(&stop));
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    if let Some(count) = listener.next(Duration::from_millis(100)) {
                        latch.release(count.parse().unwrap_or(0));
                    }
                }
            })
        };
        RedissonWaiters {
            latch,
            stop,
            reader: Some(reader),
        }
    }

    /// `acquire(lease)` of one permit by one of this instance's threads
    /// (using `java`, its own connection): its ids and how long it waited —
    /// or, once the waiters are stopped, how long it had waited in vain.
    pub fn acquire(
        &self,
        java: &mut RedissonSemaphore,
        name: &str,
        lease: Duration,
    ) -> Result<(Vec<String>, Duration), Duration> {
        let started = std::time::Instant::now();
        loop {
            match java.try_acquire(name, 1, Some(lease)) {
                Tried::Taken(ids) => return Ok((ids, started.elapsed())),
                Tried::Later(soonest) => {
                    let until = soonest.map(|ms| {
                        std::time::Instant::now()
                            + Duration::from_millis(ms.saturating_sub(java.now()))
                    });
                    if !self.latch.wait(until) && self.latch.state.lock().unwrap().2 {
                        return Err(started.elapsed());
                    }
                }
            }
        }
    }

    /// Whether [`stop`](Self::stop) was called.
    pub fn stopped(&self) -> bool {
        self.latch.state.lock().unwrap().2
    }

    /// Stops every waiting thread (their `acquire` returns `Err`) and the
    /// subscription.
    pub fn stop(&self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.latch.state.lock().unwrap().2 = true;
        self.latch.cv.notify_all();
    }
}

impl Drop for RedissonWaiters {
    fn drop(&mut self) {
        self.stop();
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
    }
}
