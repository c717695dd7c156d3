//! A Redisson client played on the wire, for mixed tests: its key and
//! channel names, its `RLock` acquire and release scripts, its read lock's
//! renewal, and its pub/sub waiting (`LockPubSub`: subscribe to the unlock
//! channel first, then try; retry on each message or when the holder's
//! lease would have run out).
//!
//! Written from Redisson's source at 4.7.1-SNAPSHOT (commit 6686397, August
//! 2026): `RedissonLock.tryLockInnerAsync` / `unlockInnerAsync`,
//! `RedissonObject.prefixName`, `PublishSubscribeService` (sharded pub/sub in
//! clusters since 3.22.0: `SSUBSCRIBE`, and the scripts publish with
//! `ARGV[4]` = `spublish`), `RedissonReadLock.renewExpirationAsync`. The
//! unlock latch Redisson ≥ 3.24 writes (`redisson_unlock_latch:…`) is kept.

use std::time::{Duration, Instant};

/// Redisson's `RLock` acquire (`tryLockInnerAsync`). KEYS: lock. ARGV:
/// lease ms, owner.
pub const ACQUIRE: &str = r#"
if ((redis.call('exists', KEYS[1]) == 0) or (redis.call('hexists', KEYS[1], ARGV[2]) == 1)) then
    redis.call('hincrby', KEYS[1], ARGV[2], 1);
    redis.call('pexpire', KEYS[1], ARGV[1]);
    return nil;
end;
return redis.call('pttl', KEYS[1]);
"#;

/// Redisson's `RLock` release (`unlockInnerAsync`). KEYS: lock, channel,
/// unlock latch. ARGV: message, lease ms, owner, publish command, latch ms.
pub const RELEASE: &str = r#"
local val = redis.call('get', KEYS[3]);
if val ~= false then
    return tonumber(val);
end;
if (redis.call('hexists', KEYS[1], ARGV[3]) == 0) then
    return nil;
end;
local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1);
if (counter > 0) then
    redis.call('pexpire', KEYS[1], ARGV[2]);
    redis.call('set', KEYS[3], 0, 'px', ARGV[5]);
    return 0;
else
    redis.call('del', KEYS[1]);
    redis.call(ARGV[4], KEYS[2], ARGV[1]);
    redis.call('set', KEYS[3], 1, 'px', ARGV[5]);
    return 1;
end;
"#;

/// Redisson's read lock acquire (`RedissonReadLock.tryLockInnerAsync`).
/// KEYS: hash, the thread's timeout prefix. ARGV: lease ms, owner, owner's
/// write field.
pub const READ_ACQUIRE: &str = r#"
local mode = redis.call('hget', KEYS[1], 'mode');
if (mode == false) then
    redis.call('hset', KEYS[1], 'mode', 'read');
    redis.call('hset', KEYS[1], ARGV[2], 1);
    redis.call('set', KEYS[2] .. ':1', 1);
    redis.call('pexpire', KEYS[2] .. ':1', ARGV[1]);
    redis.call('pexpire', KEYS[1], ARGV[1]);
    return nil;
end;
if (mode == 'read') or (mode == 'write' and redis.call('hexists', KEYS[1], ARGV[3]) == 1) then
    local ind = redis.call('hincrby', KEYS[1], ARGV[2], 1);
    local key = KEYS[2] .. ':' .. ind;
    redis.call('set', key, 1);
    redis.call('pexpire', key, ARGV[1]);
    local remainTime = redis.call('pttl', KEYS[1]);
    redis.call('pexpire', KEYS[1], math.max(remainTime, ARGV[1]));
    return nil;
end;
return redis.call('pttl', KEYS[1]);
"#;

/// Redisson ≥ 4.4's read lock renewal (`renewal.ReadLockTask`), for one
/// lock and one thread: every hold's timeout key of the thread, and the
/// hash set to the lease — also when that shortens it. KEYS: hash, the
/// lock's timeout prefix base (`{<name>}`). ARGV: lease ms, 1, owner.
pub const READ_RENEW: &str = r#"
local counter = redis.call('hget', KEYS[1], ARGV[3]);
if (counter ~= false) then
    for c=counter, 1, -1 do
        redis.call('pexpire', KEYS[2] .. ':' .. ARGV[3] .. ':rwlock_timeout:' .. c, ARGV[1]);
    end;
    redis.call('pexpire', KEYS[1], ARGV[1]);
    return 1;
end;
return 0;
"#;

/// Redisson's write lock acquire (`RedissonWriteLock.tryLockInnerAsync`).
/// KEYS: hash. ARGV: lease ms, the thread's write field.
pub const WRITE_ACQUIRE: &str = r#"
local mode = redis.call('hget', KEYS[1], 'mode');
if (mode == false) then
    redis.call('hset', KEYS[1], 'mode', 'write');
    redis.call('hset', KEYS[1], ARGV[2], 1);
    redis.call('pexpire', KEYS[1], ARGV[1]);
    return nil;
end;
if (mode == 'write') then
    if (redis.call('hexists', KEYS[1], ARGV[2]) == 1) then
        redis.call('hincrby', KEYS[1], ARGV[2], 1);
        local currentExpire = redis.call('pttl', KEYS[1]);
        redis.call('pexpire', KEYS[1], currentExpire + ARGV[1]);
        return nil;
    end;
end;
return redis.call('pttl', KEYS[1]);
"#;

/// Redisson's fair lock acquire (`RedissonFairLock.tryLockInnerAsync`,
/// the waiting form). KEYS: lock, queue, timeouts. ARGV: lease ms, owner,
/// thread wait ms (300000 by default), the client's current time ms.
pub const FAIR_ACQUIRE: &str = r#"
while true do
    local firstThreadId2 = redis.call('lindex', KEYS[2], 0);
    if firstThreadId2 == false then
        break;
    end;
    local timeout = redis.call('zscore', KEYS[3], firstThreadId2);
    if timeout ~= false and tonumber(timeout) <= tonumber(ARGV[4]) then
        redis.call('zrem', KEYS[3], firstThreadId2);
        redis.call('lpop', KEYS[2]);
    else
        break;
    end;
end;
if (redis.call('exists', KEYS[1]) == 0)
    and ((redis.call('exists', KEYS[2]) == 0)
        or (redis.call('lindex', KEYS[2], 0) == ARGV[2])) then
    redis.call('lpop', KEYS[2]);
    redis.call('zrem', KEYS[3], ARGV[2]);
    local keys = redis.call('zrange', KEYS[3], 0, -1);
    for i = 1, #keys, 1 do
        redis.call('zincrby', KEYS[3], -tonumber(ARGV[3]), keys[i]);
    end;
    redis.call('hset', KEYS[1], ARGV[2], 1);
    redis.call('pexpire', KEYS[1], ARGV[1]);
    return nil;
end;
if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
    redis.call('hincrby', KEYS[1], ARGV[2],1);
    redis.call('pexpire', KEYS[1], ARGV[1]);
    return nil;
end;
local timeout = redis.call('zscore', KEYS[3], ARGV[2]);
if timeout ~= false then
    local ttl = redis.call('pttl', KEYS[1]);
    return math.max(0, ttl);
end;
local lastThreadId = redis.call('lindex', KEYS[2], -1);
local ttl;
if lastThreadId ~= false and lastThreadId ~= ARGV[2] and redis.call('zscore', KEYS[3], lastThreadId) ~= false then
    ttl = tonumber(redis.call('zscore', KEYS[3], lastThreadId)) - tonumber(ARGV[4]);
else
    ttl = redis.call('pttl', KEYS[1]);
end;
local timeout = ttl + tonumber(ARGV[3]) + tonumber(ARGV[4]);
if redis.call('zadd', KEYS[3], timeout, ARGV[2]) == 1 then
    redis.call('rpush', KEYS[2], ARGV[2]);
end;
return ttl;
"#;

/// Redisson's fair lock release (`RedissonFairLock.unlockInnerAsync`).
/// KEYS: lock, queue, timeouts, channel, unlock latch. ARGV: message, lease
/// ms, owner, current time ms, publish command, latch ms.
pub const FAIR_RELEASE: &str = r#"
local val = redis.call('get', KEYS[5]);
if val ~= false then
    return tonumber(val);
end;
while true do
    local firstThreadId2 = redis.call('lindex', KEYS[2], 0);
    if firstThreadId2 == false then
        break;
    end;
    local timeout = redis.call('zscore', KEYS[3], firstThreadId2);
    if timeout ~= false and tonumber(timeout) <= tonumber(ARGV[4]) then
        redis.call('zrem', KEYS[3], firstThreadId2);
        redis.call('lpop', KEYS[2]);
    else
        break;
    end;
end;
if (redis.call('exists', KEYS[1]) == 0) then
    local nextThreadId = redis.call('lindex', KEYS[2], 0);
    if nextThreadId ~= false then
        redis.call(ARGV[5], KEYS[4] .. ':' .. nextThreadId, ARGV[1]);
    end;
    redis.call('set', KEYS[5], 1, 'px', ARGV[6]);
    return 1;
end;
if (redis.call('hexists', KEYS[1], ARGV[3]) == 0) then
    return nil;
end;
local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1);
if (counter > 0) then
    redis.call('pexpire', KEYS[1], ARGV[2]);
    redis.call('set', KEYS[5], 0, 'px', ARGV[6]);
    return 0;
end;
redis.call('del', KEYS[1]);
redis.call('set', KEYS[5], 1, 'px', ARGV[6]);
local nextThreadId = redis.call('lindex', KEYS[2], 0);
if nextThreadId ~= false then
    redis.call(ARGV[5], KEYS[4] .. ':' .. nextThreadId, ARGV[1]);
end;
return 1;
"#;

/// The client's clock in ms, as Redisson sends `System.currentTimeMillis()`.
fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// Redisson's write lock release (`RedissonWriteLock.unlockInnerAsync`).
/// KEYS: hash, channel, unlock latch. ARGV: message (`1`), lease ms, write
/// field, publish command, latch ms.
pub const WRITE_RELEASE: &str = r#"
local val = redis.call('get', KEYS[3]);
if val ~= false then
    return tonumber(val);
end;
local mode = redis.call('hget', KEYS[1], 'mode');
if (mode == false) then
    redis.call(ARGV[4], KEYS[2], ARGV[1]);
    redis.call('set', KEYS[3], 1, 'px', ARGV[5]);
    return nil;
end;
if (mode == 'write') then
    local lockExists = redis.call('hexists', KEYS[1], ARGV[3]);
    if (lockExists == 0) then
        return nil;
    else
        local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1);
        if (counter > 0) then
            redis.call('pexpire', KEYS[1], ARGV[2]);
            redis.call('set', KEYS[3], 0, 'px', ARGV[5]);
            return 0;
        else
            redis.call('hdel', KEYS[1], ARGV[3]);
            if (redis.call('hlen', KEYS[1]) == 1) then
                redis.call('del', KEYS[1]);
                redis.call(ARGV[4], KEYS[2], ARGV[1]);
            else
                redis.call('hset', KEYS[1], 'mode', 'read');
            end;
            redis.call('set', KEYS[3], 1, 'px', ARGV[5]);
            return 1;
        end;
    end;
end;
return nil;
"#;

/// Redisson's `suffixName`: `{<name>}:<suffix>`, or `<name>:<suffix>` when
/// the name has a hash tag of its own.
pub fn suffix_name(name: &str, suffix: &str) -> String {
    if name.contains('{') {
        format!("{name}:{suffix}")
    } else {
        format!("{{{name}}}:{suffix}")
    }
}

/// Redisson's `prefixName`: `<prefix>:{<name>}`, or `<prefix>:<name>` when
/// the name has a hash tag of its own.
pub fn prefix_name(prefix: &str, name: &str) -> String {
    if name.contains('{') {
        format!("{prefix}:{name}")
    } else {
        format!("{prefix}:{{{name}}}")
    }
}

/// One Redisson client (one UUID), talking to the server (or cluster node)
/// of `url` that serves the names it is given.
pub struct Redisson {
    url: String,
    con: redis::Connection,
    id: String,
    /// `"spublish"` with sharded pub/sub, `"publish"` otherwise.
    publish: &'static str,
}

impl Redisson {
    pub fn new(url: &str, sharded: bool) -> Redisson {
        let con = redis::Client::open(url).unwrap().get_connection().unwrap();
        Redisson {
            url: url.to_owned(),
            con,
            id: "0a0b0c0d-1111-4222-8333-000000c0ffee".to_owned(),
            publish: if sharded { "spublish" } else { "publish" },
        }
    }

    /// The hash field of thread `thread`.
    pub fn owner(&self, thread: u64) -> String {
        format!("{}:{thread}", self.id)
    }

    /// One acquire: `None` when held now, else the holder's PTTL.
    pub fn try_lock(&mut self, name: &str, lease: Duration, thread: u64) -> Option<i64> {
        redis::Script::new(ACQUIRE)
            .key(name)
            .arg(lease.as_millis() as u64)
            .arg(self.owner(thread))
            .invoke(&mut self.con)
            .unwrap()
    }

    /// One release: `Some(true)` freed (and published), `Some(false)` still
    /// held, `None` not held by this thread.
    pub fn unlock(&mut self, name: &str, thread: u64) -> Option<bool> {
        // A new request id per unlock, as Redisson's (a repeated one would
        // read the latch of the earlier unlock and change nothing).
        let latch = format!(
            "{}:{}",
            prefix_name("redisson_unlock_latch", name),
            request_id(thread)
        );
        let r: Option<i64> = redis::Script::new(RELEASE)
            .key(name)
            .key(prefix_name("redisson_lock__channel", name))
            .key(latch)
            .arg(0)
            .arg(30_000)
            .arg(self.owner(thread))
            .arg(self.publish)
            .arg(3_000)
            .invoke(&mut self.con)
            .unwrap();
        r.map(|n| n == 1)
    }

    /// One read acquire: `None` when held now, else the PTTL to wait.
    pub fn try_read(&mut self, name: &str, lease: Duration, thread: u64) -> Option<i64> {
        let owner = self.owner(thread);
        redis::Script::new(READ_ACQUIRE)
            .key(name)
            .key(suffix_name(name, &format!("{owner}:rwlock_timeout")))
            .arg(lease.as_millis() as u64)
            .arg(&owner)
            .arg(format!("{owner}:write"))
            .invoke(&mut self.con)
            .unwrap()
    }

    /// One read renewal as Redisson ≥ 4.4 sends it. True when renewed.
    pub fn renew_read(&mut self, name: &str, lease: Duration, thread: u64) -> bool {
        let base = if name.contains('{') {
            name.to_owned()
        } else {
            format!("{{{name}}}")
        };
        let r: i64 = redis::Script::new(READ_RENEW)
            .key(name)
            .key(base)
            .arg(lease.as_millis() as u64)
            .arg(1)
            .arg(self.owner(thread))
            .invoke(&mut self.con)
            .unwrap();
        r == 1
    }

    /// One write acquire: `None` when held now, else the PTTL to wait.
    pub fn try_write(&mut self, name: &str, lease: Duration, thread: u64) -> Option<i64> {
        redis::Script::new(WRITE_ACQUIRE)
            .key(name)
            .arg(lease.as_millis() as u64)
            .arg(format!("{}:write", self.owner(thread)))
            .invoke(&mut self.con)
            .unwrap()
    }

    /// One fair acquire (waiting form): `None` when held now, else the PTTL.
    pub fn try_fair(&mut self, name: &str, lease: Duration, thread: u64) -> Option<i64> {
        redis::Script::new(FAIR_ACQUIRE)
            .key(name)
            .key(prefix_name("redisson_lock_queue", name))
            .key(prefix_name("redisson_lock_timeout", name))
            .arg(lease.as_millis() as u64)
            .arg(self.owner(thread))
            .arg(300_000)
            .arg(now_ms())
            .invoke(&mut self.con)
            .unwrap()
    }

    /// `RFairLock.lock(lease)` as Redisson waits: on the thread's own
    /// channel, retrying on each message or the holder's PTTL. Returns when
    /// it was held, or `None` after `within`.
    pub fn fair_lock(
        &mut self,
        name: &str,
        lease: Duration,
        thread: u64,
        within: Duration,
    ) -> Option<Instant> {
        let channel = format!(
            "{}:{}",
            prefix_name("redisson_lock__channel", name),
            self.owner(thread)
        );
        let mut sub = self.listen(&channel);
        let until = Instant::now() + within;
        loop {
            let Some(ttl) = self.try_fair(name, lease, thread) else {
                return Some(Instant::now());
            };
            let now = Instant::now();
            if now >= until {
                return None;
            }
            let wait = Duration::from_millis(ttl.max(1) as u64).min(until - now);
            let _ = sub.next(wait);
        }
    }

    /// One fair release: `Some(true)` freed (the next waiter told).
    pub fn fair_unlock(&mut self, name: &str, thread: u64) -> Option<bool> {
        let latch = format!(
            "{}:{}",
            prefix_name("redisson_unlock_latch", name),
            request_id(thread)
        );
        let r: Option<i64> = redis::Script::new(FAIR_RELEASE)
            .key(name)
            .key(prefix_name("redisson_lock_queue", name))
            .key(prefix_name("redisson_lock_timeout", name))
            .key(prefix_name("redisson_lock__channel", name))
            .key(latch)
            .arg(0)
            .arg(30_000)
            .arg(self.owner(thread))
            .arg(now_ms())
            .arg(self.publish)
            .arg(3_000)
            .invoke(&mut self.con)
            .unwrap();
        r.map(|n| n == 1)
    }

    /// One write release: `Some(true)` freed.
    pub fn write_unlock(&mut self, name: &str, thread: u64) -> Option<bool> {
        let latch = format!(
            "{}:{}",
            prefix_name("redisson_unlock_latch", name),
            request_id(thread)
        );
        let r: Option<i64> = redis::Script::new(WRITE_RELEASE)
            .key(name)
            .key(prefix_name("redisson_rwlock", name))
            .key(latch)
            .arg(1)
            .arg(30_000)
            .arg(format!("{}:write", self.owner(thread)))
            .arg(self.publish)
            .arg(3_000)
            .invoke(&mut self.con)
            .unwrap();
        r.map(|n| n == 1)
    }

    /// `RLock.lock(lease)` as Redisson waits: subscribe to the unlock
    /// channel, try, and retry on each message or the holder's PTTL, until
    /// held or `within`. Returns when it was held, or `None`.
    pub fn lock(
        &mut self,
        name: &str,
        lease: Duration,
        thread: u64,
        within: Duration,
    ) -> Option<Instant> {
        let mut sub = self.listen(&prefix_name("redisson_lock__channel", name));
        let until = Instant::now() + within;
        loop {
            let Some(ttl) = self.try_lock(name, lease, thread) else {
                return Some(Instant::now());
            };
            let now = Instant::now();
            if now >= until {
                return None;
            }
            let wait = Duration::from_millis(ttl.max(1) as u64).min(until - now);
            let _ = sub.next(wait);
        }
    }

    /// A subscriber to `channel` on this client's node, as Redisson's
    /// `PublishSubscribeService` subscribes (`SSUBSCRIBE` when sharded).
    pub fn listen(&self, channel: &str) -> Listener {
        Listener::start(&self.url, channel, self.publish == "spublish")
    }
}

/// A unique unlock request id (Redisson's is a random UUID).
fn request_id(thread: u64) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static UNLOCKS: AtomicU64 = AtomicU64::new(0);
    let n = UNLOCKS.fetch_add(1, Ordering::Relaxed);
    format!("{:08x}-{thread:04}-4000-8000-{n:012}", std::process::id())
}

/// A raw (S)SUBSCRIBE connection.
pub struct Listener {
    con: redis::Connection,
}

impl Listener {
    /// Subscribed (the confirmation read) when it returns.
    pub fn start(url: &str, channel: &str, sharded: bool) -> Listener {
        let mut con = redis::Client::open(url).unwrap().get_connection().unwrap();
        let verb = if sharded { "SSUBSCRIBE" } else { "SUBSCRIBE" };
        con.send_packed_command(&redis::cmd(verb).arg(channel).get_packed_command())
            .unwrap();
        let mut l = Listener { con };
        let confirm = l.read(Duration::from_secs(5)).expect("the confirmation");
        assert_eq!(
            confirm[0].to_ascii_uppercase(),
            verb.to_ascii_uppercase(),
            "{confirm:?}"
        );
        l
    }

    /// The next message's payload within `wait`, or `None`.
    pub fn next(&mut self, wait: Duration) -> Option<String> {
        let until = Instant::now() + wait;
        loop {
            let left = until.saturating_duration_since(Instant::now());
            let parts = self.read(left.max(Duration::from_millis(1)))?;
            if parts[0].ends_with("message") {
                return parts.last().cloned();
            }
            if Instant::now() >= until {
                return None;
            }
        }
    }

    fn read(&mut self, wait: Duration) -> Option<Vec<String>> {
        self.con.set_read_timeout(Some(wait)).unwrap();
        let v = match self.con.recv_response() {
            Ok(v) => v,
            Err(e) if e.is_timeout() => return None,
            Err(e) => panic!("listener: {e}"),
        };
        let items = match v {
            redis::Value::Array(items) => items,
            redis::Value::Push { data, .. } => data,
            other => panic!("listener: {other:?}"),
        };
        Some(
            items
                .iter()
                .map(|i| match i {
                    redis::Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
                    redis::Value::SimpleString(s) => s.clone(),
                    redis::Value::Int(n) => n.to_string(),
                    other => format!("{other:?}"),
                })
                .collect(),
        )
    }
}
