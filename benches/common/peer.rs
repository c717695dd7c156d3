//! R1, the async face against the best Rust peer in that peer's own shape
//! (built with the tests package's `peers` feature): a thread that enters
//! its own current-thread tokio runtime for each call (`block_on`), as
//! rslock's users on threads run it. rslock's pair (`LockManager::lock` +
//! `unlock`: `SET NX PX`, then a compare-and-delete script, on the `redis`
//! crate's multiplexed connection) beside leasehold's async pair and its
//! blocking pair, in alternating blocks on one server, each with what
//! Redis spent on it (`INFO cpu`) — where the time of a pair goes.

use std::time::{Duration, Instant};

use leasehold::LockClient;

use crate::measure::redis_cpu_us;

/// One side of R1: pairs/s (median block), Redis CPU µs per pair.
pub(crate) struct Side {
    pub(crate) rate: f64,
    pub(crate) redis_us: f64,
}

pub(crate) struct Peer {
    pub(crate) rslock: Side,
    pub(crate) lh_async: Side,
    pub(crate) lh_blocking: Side,
    /// Medians of the per-block ratios to rslock's rate.
    pub(crate) async_ratio: f64,
    pub(crate) blocking_ratio: f64,
}

/// R1: blocks of 1,000 pairs of each, in turn, for `secs` (5 rounds at
/// least).
pub(crate) fn r1(url: &str, secs: f64) -> Peer {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let manager = rslock::LockManager::new(vec![url.to_owned()]);
    let client = LockClient::new(url).unwrap();
    let tasks = client.to_async();
    const BLOCK: usize = 1_000;
    const TTL: Duration = Duration::from_secs(30);
    // Each block: pairs/s and Redis's CPU per pair.
    let block = |run: &mut dyn FnMut()| {
        let cpu = redis_cpu_us(url);
        let t = Instant::now();
        for _ in 0..BLOCK {
            run();
        }
        let rate = BLOCK as f64 / t.elapsed().as_secs_f64();
        (rate, (redis_cpu_us(url) - cpu) / BLOCK as f64)
    };
    let mut rounds: Vec<[(f64, f64); 3]> = Vec::new();
    let until = Instant::now() + Duration::from_secs_f64(secs);
    while rounds.len() < 5 || Instant::now() < until {
        let peer = block(&mut || {
            rt.block_on(async {
                let lock = manager.lock("r1-rslock", TTL).await.unwrap();
                manager.unlock(&lock).await;
            })
        });
        let asynch = block(&mut || {
            rt.block_on(async {
                let guard = tasks.lock("r1-async").await.unwrap();
                guard.unlock().await.unwrap();
            })
        });
        let blocking = block(&mut || client.lock("r1-blocking").unwrap().unlock().unwrap());
        rounds.push([peer, asynch, blocking]);
    }
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let side = |i: usize| Side {
        rate: median(rounds.iter().map(|r| r[i].0).collect()),
        redis_us: median(rounds.iter().map(|r| r[i].1).collect()),
    };
    let ratio = |i: usize| median(rounds.iter().map(|r| r[i].0 / r[0].0).collect());
    Peer {
        async_ratio: ratio(1),
        blocking_ratio: ratio(2),
        rslock: side(0),
        lh_async: side(1),
        lh_blocking: side(2),
    }
}

/// A row of the table: (figure, rslock, leasehold, ratio, target, met).
type Row = (String, String, String, String, &'static str, Option<bool>);

/// R1's rows for the table.
pub(crate) fn rows(p: &Peer) -> Vec<Row> {
    let cpu = |s: &Side| format!("{:.1}", s.redis_us);
    vec![
        (
            "R1 async pair, a thread's own current-thread runtime per call (floor: rslock's pair)"
                .into(),
            format!("{:.0}", p.rslock.rate),
            format!("{:.0}", p.lh_async.rate),
            format!("{:.2}", p.async_ratio),
            "≥ 1.0",
            Some(p.async_ratio >= 1.0),
        ),
        (
            "R1 blocking pair (floor: rslock's pair, same blocks)".into(),
            format!("{:.0}", p.rslock.rate),
            format!("{:.0}", p.lh_blocking.rate),
            format!("{:.2}", p.blocking_ratio),
            "",
            None,
        ),
        (
            "R1 Redis CPU µs per pair: rslock / leasehold async (blocking)".into(),
            cpu(&p.rslock),
            format!("{} ({})", cpu(&p.lh_async), cpu(&p.lh_blocking)),
            format!("{:.2}", p.lh_async.redis_us / p.rslock.redis_us),
            "",
            None,
        ),
    ]
}
