//! Exports a client's `stats()` periodically in the Prometheus text format,
//! while a few threads take a lock — what an operator would scrape or graph.
//!
//! ```text
//! REDIS_URL=redis://127.0.0.1/ cargo run --example stats_export
//! ```
//!
//! A real service would serve the text on its metrics endpoint (or feed the
//! same numbers to its metrics library) instead of printing it.

use std::fmt::Write as _;
use std::thread;
use std::time::{Duration, Instant};

use leasehold::{LockClient, Stats, WAIT_BUCKETS_MS};

/// `stats` as Prometheus metrics named `leasehold_*`, labelled `client`.
fn prometheus(client: &str, s: &Stats) -> String {
    let mut out = String::new();
    let mut metric = |name: &str, kind: &str, help: &str, value: u64| {
        let _ = writeln!(out, "# HELP leasehold_{name} {help}");
        let _ = writeln!(out, "# TYPE leasehold_{name} {kind}");
        let _ = writeln!(out, "leasehold_{name}{{client=\"{client}\"}} {value}");
    };
    metric(
        "acquisitions_total",
        "counter",
        "Locks taken.",
        s.acquisitions,
    );
    metric(
        "woken_acquisitions_total",
        "counter",
        "Locks taken by a waiter a release's message woke.",
        s.woken_acquisitions,
    );
    metric(
        "retried_acquisitions_total",
        "counter",
        "Locks taken by a waiter at a retry of its own (no message woke it).",
        s.retried_acquisitions,
    );
    metric(
        "wait_timeouts_total",
        "counter",
        "Bounded waits that ran out.",
        s.wait_timeouts,
    );
    metric(
        "waits_cancelled_total",
        "counter",
        "Waits cancelled.",
        s.waits_cancelled,
    );
    metric(
        "handoffs_total",
        "counter",
        "In-process handoffs.",
        s.handoffs,
    );
    metric(
        "leases_lost_total",
        "counter",
        "Leases found lost.",
        s.leases_lost,
    );
    metric(
        "live_leases",
        "gauge",
        "Watchdog leases renewed now.",
        s.live_leases,
    );
    metric(
        "waiters_parked",
        "gauge",
        "Threads waiting now.",
        s.waiters_parked,
    );
    metric(
        "subscriber_connected",
        "gauge",
        "The pub/sub subscriber is connected.",
        u64::from(s.subscriber_connected),
    );
    // The wait-time buckets as a cumulative histogram.
    let _ = writeln!(
        out,
        "# HELP leasehold_wait_seconds Time from lock call to guard."
    );
    let _ = writeln!(out, "# TYPE leasehold_wait_seconds histogram");
    let mut cumulative = 0;
    for (i, count) in s.wait_time.iter().enumerate() {
        cumulative += count;
        let le = WAIT_BUCKETS_MS
            .get(i)
            .map_or("+Inf".to_owned(), |ms| format!("{}", *ms as f64 / 1000.0));
        let _ = writeln!(
            out,
            "leasehold_wait_seconds_bucket{{client=\"{client}\",le=\"{le}\"}} {cumulative}"
        );
    }
    let _ = writeln!(
        out,
        "leasehold_wait_seconds_count{{client=\"{client}\"}} {cumulative}"
    );
    out
}

fn main() -> Result<(), leasehold::Error> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1/".into());
    let client = LockClient::connect(&url)?;
    let until = Instant::now() + Duration::from_secs(3);
    let workers: Vec<_> = (0..4)
        .map(|_| {
            let client = client.clone();
            thread::spawn(move || -> Result<(), leasehold::Error> {
                while Instant::now() < until {
                    let _g = client.lock("example:stats")?;
                    thread::sleep(Duration::from_millis(5));
                }
                Ok(())
            })
        })
        .collect();
    // Export every second while they work, then once more at the end.
    while Instant::now() < until {
        thread::sleep(Duration::from_secs(1));
        println!("{}", prometheus("example", &client.stats()));
    }
    for w in workers {
        w.join().expect("a worker panicked")?;
    }
    print!("{}", prometheus("example", &client.stats()));
    Ok(())
}
