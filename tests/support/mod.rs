//! Throwaway `redis-server`s and what tests do with them, by concern:
//! `server` (one server: start, restart, signal, inspect), `tls` (TLS-only
//! servers and their certificates), `topology` (replicas, Sentinels,
//! clusters, slots), `monitor` (`MONITOR`), `history` (checking recorded
//! critical sections), `child` (test children), `proxy` (a fault proxy),
//! `redisson` (Redisson's scripts on the wire), `redisson_semaphore` (its
//! expirable semaphore's). No test uses a server it did
//! not start.
#![allow(dead_code, unused_imports)]

pub mod child;
pub mod history;
pub mod monitor;
pub mod proxy;
pub mod redisson;
pub mod redisson_semaphore;
pub mod server;
pub mod tls;
pub mod topology;

use std::time::{Duration, Instant};

pub use child::*;
pub use history::*;
pub use monitor::*;
pub use server::*;
pub use tls::*;
pub use topology::*;

/// Polls `cond` until it holds or `within` passes; returns whether it held.
pub fn eventually(within: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Polls the PTTL of `key` through `con` until it rises above the lowest
/// value seen so far — a renewal (or another write of its lease) landed in
/// Redis — or `within` passes; returns whether it rose. Left alone, a key's
/// PTTL only falls, and is -2 once it expired.
pub fn renewed_in(con: &mut redis::Connection, key: &str, within: Duration) -> bool {
    use redis::Commands;
    let mut lowest = i64::MAX;
    eventually(within, || {
        let pttl: i64 = con.pttl(key).unwrap();
        if pttl > 0 && pttl > lowest {
            return true;
        }
        lowest = lowest.min(pttl);
        false
    })
}

/// Application data an operator's tool must never take for a lock: two
/// hashes and a string, written through `con`. Returns each key with what
/// it is, as the refusal names it; [`application_data_intact`] checks it.
pub fn seed_application_data(con: &mut redis::Connection) -> [(&'static str, &'static str); 3] {
    use redis::Commands;
    let _: () = con
        .hset_multiple("user:1", &[("name", "Ada"), ("email", "ada@example.com")])
        .unwrap();
    let _: () = con
        .hset_multiple("pages", &[("page:1", "17"), ("page:2", "5")])
        .unwrap();
    let _: () = con.set("greeting", "hello").unwrap();
    [
        ("user:1", "a hash"),
        ("pages", "a hash"),
        ("greeting", "a string"),
    ]
}

/// Whether what [`seed_application_data`] wrote is still there, unchanged.
pub fn application_data_intact(con: &mut redis::Connection) -> bool {
    use redis::Commands;
    con.hget::<_, _, String>("user:1", "email").ok().as_deref() == Some("ada@example.com")
        && con.hget::<_, _, String>("user:1", "name").ok().as_deref() == Some("Ada")
        && con.hget::<_, _, i64>("pages", "page:1").ok() == Some(17)
        && con.hget::<_, _, i64>("pages", "page:2").ok() == Some(5)
        && con.get::<_, String>("greeting").ok().as_deref() == Some("hello")
}

/// A current-thread tokio runtime with its drivers (the async tests').
pub fn current_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// A two-worker tokio runtime with its drivers (the async tests').
pub fn multi_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// A small deterministic generator (xorshift) for random points and
/// states; seed it with a non-zero number. (The simulator has its own,
/// with more to it.)
pub struct Rng(pub u64);

impl Rng {
    /// A number in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}
