//! W4: 100,000 live watchdog guards on one client at the default 30 s lease.
//! Reports round trips per renewal period, renewal-thread CPU per period (from
//! /proc/self/task/<tid>/stat) and client memory per live guard (RSS delta).
//!
//! `cargo bench --bench renewal` (about a minute; `GUARDS=…` to change the count).

#[path = "../tests/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use leasehold::LockClient;

/// utime + stime of the thread named `name`, in seconds.
fn thread_cpu(name: &str) -> Option<f64> {
    let ticks = 100.0; // USER_HZ on Linux
    for task in std::fs::read_dir("/proc/self/task").ok()? {
        let dir = task.ok()?.path();
        let comm = std::fs::read_to_string(dir.join("comm")).ok()?;
        if comm.trim() != name {
            continue;
        }
        let stat = std::fs::read_to_string(dir.join("stat")).ok()?;
        let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
        let utime: f64 = fields.get(11)?.parse().ok()?;
        let stime: f64 = fields.get(12)?.parse().ok()?;
        return Some((utime + stime) / ticks);
    }
    None
}

fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return; // `cargo test --benches` asks for a listing; nothing to list
    }
    let n: usize = std::env::var("GUARDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    let server = support::RedisServer::start();
    let client = LockClient::new(&server.url()).unwrap();
    let lease = client.watchdog_lease();
    let period = lease / 3;
    let names: Vec<String> = (0..n).map(|i| format!("w4:{i}")).collect();

    let rss_before = rss_bytes();
    let started = Instant::now();
    let guards: Vec<_> = names.iter().map(|k| client.lock(k).unwrap()).collect();
    let took = started.elapsed();
    let rss_after = rss_bytes();
    println!(
        "acquired {n} guards in {:.1} s; client memory per live guard: {:.0} bytes (RSS delta)",
        took.as_secs_f64(),
        (rss_after.saturating_sub(rss_before)) as f64 / n as f64
    );

    // Measure two whole renewal periods once every lease has renewed once.
    std::thread::sleep(period + Duration::from_secs(1));
    let s0 = client.stats();
    let cpu0 = thread_cpu("leasehold-renew").unwrap_or(0.0);
    let window = period * 2;
    std::thread::sleep(window);
    let s1 = client.stats();
    let cpu1 = thread_cpu("leasehold-renew").unwrap_or(0.0);
    let periods = window.as_secs_f64() / period.as_secs_f64();
    let trips = (s1.renewal_round_trips - s0.renewal_round_trips) as f64 / periods;
    let sent = (s1.renewals_sent - s0.renewals_sent) as f64 / periods;
    let cpu_share = (cpu1 - cpu0) / window.as_secs_f64() * 100.0;
    println!(
        "renewal at lease {lease:?} (period {period:?}): {sent:.0} renewals and {trips:.0} round trips per period; renewal thread CPU {:.2} s per period = {cpu_share:.2} % of one core; leases lost {}",
        (cpu1 - cpu0) / periods,
        s1.leases_lost
    );
    drop(guards);
}
