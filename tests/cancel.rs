//! One `Cancel` fired while 100 threads and 100 tasks of one client wait on
//! a plain and a fair lock (queued in-process, parked on pub/sub, in the
//! fair queue): every wait is woken by the cancel itself — no polling — and
//! returns `Cancelled`, leaving no place behind in Redis.

mod support;

use std::time::{Duration, Instant};

use leasehold::{Cancel, LockClient, LockOptions};
use redis::Commands;
use support::{eventually, RedisServer};

const THREADS: usize = 100;
const TASKS: usize = 100;

#[test]
fn one_cancel_wakes_a_hundred_threads_and_a_hundred_tasks_at_once() {
    let server = RedisServer::start();
    let holder = LockClient::new(&server.url()).unwrap();
    let waiter = LockClient::new(&server.url()).unwrap();
    let names = [
        ("cancel:plain", LockOptions::new()),
        ("cancel:fair", LockOptions::new().fair()),
    ];
    let held: Vec<_> = names
        .iter()
        .map(|(name, opts)| holder.lock_with(name, opts.clone()).unwrap())
        .collect();
    let cancel = Cancel::new();
    let options = |i: usize| {
        let (name, opts) = &names[i % 2];
        (*name, opts.clone().cancel_on(&cancel))
    };
    let threads: Vec<_> = (0..THREADS)
        .map(|i| {
            let (c, (name, opts)) = (waiter.clone(), options(i));
            std::thread::spawn(move || (c.lock_with(name, opts).map(drop), Instant::now()))
        })
        .collect();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let tasks: Vec<_> = (0..TASKS)
        .map(|i| {
            let (c, (name, opts)) = (waiter.to_async(), options(i));
            rt.spawn(async move { (c.lock_with(name, opts).await.map(drop), Instant::now()) })
        })
        .collect();
    // Every wait parked: queued behind the client's active waiter of its
    // name, or parked on its subscription.
    let all = (THREADS + TASKS) as u64;
    assert!(
        eventually(Duration::from_secs(30), || waiter.stats().waiters_parked
            >= all),
        "waiting: {:?}",
        waiter.stats()
    );
    let cancelled = Instant::now();
    cancel.cancel();
    let mut took: Vec<Duration> = Vec::new();
    for t in threads {
        let (r, at) = t.join().unwrap();
        assert!(
            r.as_ref().is_err_and(|e| e.is_cancelled()),
            "a thread: {r:?}"
        );
        took.push(at - cancelled);
    }
    for t in tasks {
        let (r, at) = rt.block_on(t).unwrap();
        assert!(r.as_ref().is_err_and(|e| e.is_cancelled()), "a task: {r:?}");
        took.push(at - cancelled);
    }
    took.sort();
    let pct = |p: usize| took[(took.len() * p / 100).min(took.len() - 1)];
    println!(
        "cancel to return, {} waits ({THREADS} threads, {TASKS} tasks): p50 {:?}, p99 {:?}, max {:?}",
        took.len(),
        pct(50),
        pct(99),
        took[took.len() - 1]
    );
    // Nothing else would end these waits: the holder keeps its locks (the
    // watchdog renews them) for as long as the test runs. A bound of
    // seconds against wake-ups of milliseconds.
    assert!(took[took.len() - 1] < Duration::from_secs(5), "{took:?}");
    assert_eq!(waiter.stats().waiters_parked, 0, "{:?}", waiter.stats());
    // No place left in Redis: the plain line, the fair queue and its
    // timeouts (a task's wait leaves its place in the background: soon,
    // not at once).
    let mut con = server.connection();
    let mut places = || -> (usize, usize, usize) {
        (
            con.llen("leasehold_line:{cancel:plain}").unwrap(),
            con.llen("redisson_lock_queue:{cancel:fair}").unwrap(),
            con.zcard("redisson_lock_timeout:{cancel:fair}").unwrap(),
        )
    };
    eventually(Duration::from_secs(5), || places() == (0, 0, 0));
    assert_eq!(places(), (0, 0, 0), "places left");
    for g in held {
        assert!(g.is_held(), "the holder kept it");
        g.unlock().unwrap();
    }
}
