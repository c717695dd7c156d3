//! W4: 100,000 live watchdog guards on one client at the default 30 s lease.
//! Reports round trips per renewal period, renewal-thread CPU per period (from
//! /proc/self/task/<tid>/stat) and client memory per live guard (RSS delta).
//!
//! `cargo bench --bench renewal` (about a minute; `GUARDS=…` to change the
//! count). `scripts/bench.sh` runs the same measurement inside its table.

#[path = "../tests/support/mod.rs"]
mod support;

#[path = "common/w4.rs"]
mod w4;

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return; // `cargo test --benches` asks for a listing; nothing to list
    }
    let n: usize = std::env::var("GUARDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    let server = support::RedisServer::start();
    let r = w4::run(&server.url(), n);
    println!(
        "acquired {} guards in {:.1} s; client memory per live guard: {:.0} bytes (RSS delta)",
        r.guards, r.acquire_secs, r.bytes_per_guard
    );
    println!(
        "renewal period {:?}: {:.0} renewals and {:.0} round trips per period; renewal thread CPU {:.2} s per period = {:.2} % of one core; leases lost {}",
        r.period,
        r.renewals_per_period,
        r.round_trips_per_period,
        r.cpu_secs_per_period,
        r.cpu_percent,
        r.leases_lost
    );
}
