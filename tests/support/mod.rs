//! Throwaway `redis-server`s and what tests do with them, by concern:
//! `server` (one server: start, restart, signal, inspect), `tls` (TLS-only
//! servers and their certificates), `topology` (replicas, Sentinels,
//! clusters, slots), `monitor` (`MONITOR`), `history` (checking recorded
//! critical sections), `child` (test children), `proxy` (a fault proxy),
//! `redisson` (Redisson's scripts on the wire). No test uses a server it did
//! not start.
#![allow(dead_code, unused_imports)]

pub mod child;
pub mod history;
pub mod monitor;
pub mod proxy;
pub mod redisson;
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
