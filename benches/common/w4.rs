//! W4: many live watchdog guards on one client. Shared by the `renewal` and
//! `workloads` benches.

use std::time::{Duration, Instant};

use leasehold::LockClient;

/// What W4 measured.
pub struct W4 {
    pub guards: usize,
    pub acquire_secs: f64,
    pub bytes_per_guard: f64,
    pub period: Duration,
    pub renewals_per_period: f64,
    pub round_trips_per_period: f64,
    pub cpu_secs_per_period: f64,
    pub cpu_percent: f64,
    pub leases_lost: u64,
}

/// utime + stime of this process's thread named `name`, in seconds.
pub fn thread_cpu(name: &str) -> Option<f64> {
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

pub fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

/// Takes `n` guards on distinct names at the default 30 s lease, waits until
/// every lease renewed once, then measures two whole renewal periods.
pub fn run(url: &str, n: usize) -> W4 {
    let client = LockClient::new(url).unwrap();
    let lease = client.watchdog_lease();
    let period = lease / 3;
    let names: Vec<String> = (0..n).map(|i| format!("w4:{i}")).collect();

    let rss_before = rss_bytes();
    let started = Instant::now();
    let guards: Vec<_> = names.iter().map(|k| client.lock(k).unwrap()).collect();
    let acquire_secs = started.elapsed().as_secs_f64();
    let rss_after = rss_bytes();

    std::thread::sleep(period + Duration::from_secs(1));
    let s0 = client.stats();
    let cpu0 = thread_cpu("leasehold-renew").unwrap_or(0.0);
    let window = period * 2;
    std::thread::sleep(window);
    let s1 = client.stats();
    let cpu1 = thread_cpu("leasehold-renew").unwrap_or(0.0);
    let periods = window.as_secs_f64() / period.as_secs_f64();
    drop(guards);
    W4 {
        guards: n,
        acquire_secs,
        bytes_per_guard: rss_after.saturating_sub(rss_before) as f64 / n as f64,
        period,
        renewals_per_period: (s1.renewals_sent - s0.renewals_sent) as f64 / periods,
        round_trips_per_period: (s1.renewal_round_trips - s0.renewal_round_trips) as f64 / periods,
        cpu_secs_per_period: (cpu1 - cpu0) / periods,
        cpu_percent: (cpu1 - cpu0) / window.as_secs_f64() * 100.0,
        leases_lost: s1.leases_lost,
    }
}
