//! The async API's rows (issue 27), each beside the blocking figure it must
//! keep up with, from the same run: A1 uncontended (a current-thread tokio
//! runtime, one task, lock + unlock) against W1's blocking pairs in
//! alternating blocks, and the same for the other kinds (no target: what
//! the tokio transport gives them); A2c 8 tasks on one multi-thread runtime of tokio's
//! default size (a worker per CPU the process may use: one pinned, two
//! unpinned), each with its own `AsyncLockClient`, on one name — the W2c
//! shape and critical section (shared record, 20 µs of work). Built with
//! the `tokio` feature by scripts/bench.sh (the tokio transport: the task's own connection on its runtime).

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
    alternate(
        secs,
        || client.lock("a1-blocking").unwrap().unlock().unwrap(),
        async || {
            let g = tasks.lock("a1-async").await.unwrap();
            g.unlock().await.unwrap()
        },
    )
}

/// A1 for the other kinds (fair, read, write, one semaphore permit), as
/// A1 measures the plain lock: `(kind, figures)`.
pub(crate) fn a1_kinds(url: &str, secs: f64) -> Vec<(&'static str, AsyncUncontended)> {
    let client = LockClient::new(url).unwrap();
    let tasks = client.to_async();
    let secs = secs / 2.0;
    let sem = client.semaphore("a1-sem-blocking");
    sem.set_permits(1).unwrap();
    let task_sem = tasks.semaphore("a1-sem-async");
    task_sem.blocking().set_permits(1).unwrap();
    vec![
        (
            "fair",
            alternate(
                secs,
                || client.fair_lock("a1f-b").unwrap().unlock().unwrap(),
                async || {
                    tasks
                        .fair_lock("a1f-a")
                        .await
                        .unwrap()
                        .unlock()
                        .await
                        .unwrap()
                },
            ),
        ),
        (
            "read",
            alternate(
                secs,
                || client.read_lock("a1r-b").unwrap().unlock().unwrap(),
                async || {
                    tasks
                        .read_lock("a1r-a")
                        .await
                        .unwrap()
                        .unlock()
                        .await
                        .unwrap()
                },
            ),
        ),
        (
            "write",
            alternate(
                secs,
                || client.write_lock("a1w-b").unwrap().unlock().unwrap(),
                async || {
                    tasks
                        .write_lock("a1w-a")
                        .await
                        .unwrap()
                        .unlock()
                        .await
                        .unwrap()
                },
            ),
        ),
        (
            "semaphore",
            alternate(
                secs,
                || sem.acquire().unwrap().unlock().unwrap(),
                async || task_sem.acquire().await.unwrap().unlock().await.unwrap(),
            ),
        ),
    ]
}

/// Alternating blocks of 1,000 blocking pairs and 1,000 async pairs (a
/// current-thread tokio runtime, one task), for `secs` and at least five
/// blocks each; the rates and the median of per-block ratios.
fn alternate(
    secs: f64,
    mut blocking: impl FnMut(),
    mut asynch: impl AsyncFnMut(),
) -> AsyncUncontended {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    const BLOCK: usize = 1_000;
    let (mut ratios, mut blocking_rates, mut async_rates) = (Vec::new(), Vec::new(), Vec::new());
    let until = Instant::now() + Duration::from_secs_f64(secs);
    while ratios.len() < 5 || Instant::now() < until {
        let t = Instant::now();
        for _ in 0..BLOCK {
            blocking();
        }
        let b = BLOCK as f64 / t.elapsed().as_secs_f64();
        let t = Instant::now();
        rt.block_on(async {
            for _ in 0..BLOCK {
                asynch().await;
            }
        });
        let a = BLOCK as f64 / t.elapsed().as_secs_f64();
        ratios.push(a / b);
        blocking_rates.push(b);
        async_rates.push(a);
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    AsyncUncontended {
        blocking_rate: median(&mut blocking_rates),
        async_rate: median(&mut async_rates),
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
