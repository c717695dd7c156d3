//! The async API's rows (issue 27), each beside the blocking figure it must
//! keep up with, from the same run: A1 uncontended (a current-thread tokio
//! runtime, one task, lock + unlock) against W1's blocking pairs in
//! alternating blocks; A2c 8 tasks on one multi-thread runtime of tokio's
//! default size (a worker per CPU the process may use: one pinned, two
//! unpinned), each with its own `AsyncLockClient`, on one name — the W2c
//! shape and critical section (shared record, 20 µs of work). Built with
//! the `tokio` feature by scripts/bench.sh (the reactor lane).

use std::path::Path;
use std::time::{Duration, Instant};

use leasehold::{AsyncLockClient, LockClient};

use crate::contend::{Kind, Tally};

pub(crate) struct AsyncUncontended {
    pub(crate) blocking_rate: f64,
    pub(crate) async_rate: f64,
    /// Median of the per-block async / blocking ratios.
    pub(crate) ratio: f64,
}

/// A1: alternating blocks of blocking and async pairs on one client (two
/// names); the ratio is the median of per-block ratios.
pub(crate) fn a1(url: &str, secs: f64) -> AsyncUncontended {
    let client = LockClient::new(url).unwrap();
    let tasks = client.to_async();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    const BLOCK: usize = 1_000;
    let (mut ratios, mut blocking, mut asynch) = (Vec::new(), Vec::new(), Vec::new());
    let until = Instant::now() + Duration::from_secs_f64(secs);
    while ratios.len() < 5 || Instant::now() < until {
        let t = Instant::now();
        for _ in 0..BLOCK {
            client.lock("a1-blocking").unwrap().unlock().unwrap();
        }
        let b = BLOCK as f64 / t.elapsed().as_secs_f64();
        let t = Instant::now();
        rt.block_on(async {
            for _ in 0..BLOCK {
                tasks
                    .lock("a1-async")
                    .await
                    .unwrap()
                    .unlock()
                    .await
                    .unwrap();
            }
        });
        let a = BLOCK as f64 / t.elapsed().as_secs_f64();
        ratios.push(a / b);
        blocking.push(b);
        asynch.push(a);
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    AsyncUncontended {
        blocking_rate: median(&mut blocking),
        async_rate: median(&mut asynch),
        ratio: median(&mut ratios),
    }
}

/// A2c's contenders: 8 tasks, a client each, on `name` from `start` to
/// `until`; their tallies and in-process handoffs.
pub(crate) fn contend_tasks(
    url: &str,
    name: &str,
    shared_path: &Path,
    (start, until): (Instant, Instant),
) -> (Vec<Tally>, u64) {
    // Tokio's default size, as `#[tokio::main]` makes it: a worker per CPU
    // the process may run on (pinned: one; two workers on one CPU spend it
    // looking for each other's work).
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let handles: Vec<_> = (0..8u64)
            .map(|i| {
                let client = AsyncLockClient::new(url).unwrap();
                let name = name.to_owned();
                let shared = crate::contend::Shared::open(shared_path);
                let me = i + 1;
                tokio::spawn(async move {
                    let mut tally = Tally::default();
                    while Instant::now() < start {
                        tokio::time::sleep(Duration::from_micros(200)).await;
                    }
                    while Instant::now() < until {
                        let g = client.lock(&name).await.unwrap();
                        tally.critical_section(&shared, me, 1);
                        g.unlock().await.unwrap();
                    }
                    (tally, client.stats().handoffs)
                })
            })
            .collect();
        let mut tallies = Vec::new();
        let mut handoffs = 0;
        for h in handles {
            let (tally, theirs) = h.await.unwrap();
            tallies.push(tally);
            handoffs += theirs;
        }
        (tallies, handoffs)
    })
}

/// A2c: the W2c shape with tasks.
pub(crate) fn a2c(url: &str, secs: f64) -> crate::contend::Contended {
    crate::contend::measured(Kind::Async, "a2c", url, secs, |path| {
        let start = Instant::now() + Duration::from_millis(100);
        let until = start + Duration::from_secs_f64(secs);
        contend_tasks(url, "a2c", path, (start, until))
    })
}
