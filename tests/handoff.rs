//! In-process queueing and handoff: threads of one client wait in arrival
//! order without touching Redis, a release hands the lock to the next one in a
//! single script, and other clients waiting for the same lock are not starved.

mod support;

use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use leasehold::{LockClient, LockOptions};
use redis::Commands;
use support::{eventually, RedisServer};

/// Waits until `client` has `n` threads queued in-process.
fn wait_queued(client: &LockClient, n: u64) {
    assert!(
        eventually(Duration::from_secs(10), || client.stats().waiters_queued
            == n),
        "expected {n} queued threads, stats: {:?}",
        client.stats()
    );
}

/// Spawns a thread of `client` that takes `name`, records `tag` inside the
/// critical section, holds it for `hold`, and releases it.
fn contender(
    client: &LockClient,
    name: &str,
    tag: &str,
    hold: Duration,
    log: &Arc<Mutex<Vec<String>>>,
) -> thread::JoinHandle<()> {
    let (client, name, tag, log) = (client.clone(), name.to_owned(), tag.to_owned(), log.clone());
    thread::spawn(move || {
        let g = client.lock(&name).unwrap();
        log.lock().unwrap().push(tag);
        thread::sleep(hold);
        g.unlock().unwrap();
    })
}

#[test]
fn threads_of_one_client_are_served_in_arrival_order_one_script_per_handoff() {
    let server = RedisServer::start();
    let client = LockClient::new(&server.url()).unwrap();
    let log = Arc::new(Mutex::new(Vec::new()));
    let holder = client.lock("fifo").unwrap();
    let mut threads = Vec::new();
    for i in 0..5u64 {
        threads.push(contender(
            &client,
            "fifo",
            &format!("t{i}"),
            Duration::ZERO,
            &log,
        ));
        wait_queued(&client, i + 1);
    }
    server.reset_stats();
    holder.unlock().unwrap();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(*log.lock().unwrap(), ["t0", "t1", "t2", "t3", "t4"]);
    assert_eq!(client.stats().handoffs, 5);
    assert_eq!(client.stats().waiters_queued, 0);
    let calls = server.command_calls();
    // Six releases (five of them handoffs) and nothing else: the queued
    // threads sent no acquire attempt and nobody subscribed. (The release
    // script was new to this server: one EVALSHA met NOSCRIPT and was resent.)
    let count = |c: &str| calls.get(c).copied().unwrap_or(0);
    // (Redis 6.2 counts `SCRIPT LOAD` as `script`, 7 as `script|load`.)
    let loads = count("script|load") + count("script");
    assert_eq!(count("evalsha") - loads, 6, "{calls:?}");
    assert_eq!(
        calls.get("publish"),
        Some(&1),
        "only the last release is public: {calls:?}"
    );
    assert_eq!(calls.get("subscribe"), None, "{calls:?}");
    let exists: bool = server.connection().exists("fifo").unwrap();
    assert!(!exists, "the last release freed the lock");
}

#[test]
fn a_handed_over_lock_carries_the_successors_owner_and_lease() {
    let server = RedisServer::start();
    let client = LockClient::new(&server.url()).unwrap();
    let holder = client.lock("h").unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let c = client.clone();
    let url = server.url();
    let t = thread::spawn(move || {
        let g = c
            .lock_with("h", LockOptions::new().lease(Duration::from_secs(5)))
            .unwrap();
        let mut con = redis::Client::open(url).unwrap().get_connection().unwrap();
        let fields: std::collections::HashMap<String, i64> = con.hgetall("h").unwrap();
        let pttl: i64 = con.pttl("h").unwrap();
        let reentered = c.lock("h").unwrap(); // same thread: one more hold
        let count: i64 = con.hget("h", fields.keys().next().unwrap()).unwrap();
        drop(reentered);
        tx.send((fields, pttl, count, g.is_held())).unwrap();
        done_rx.recv().unwrap(); // hold until the main thread has looked
        g.unlock().unwrap();
    });
    wait_queued(&client, 1);
    let holder_fields: std::collections::HashMap<String, i64> =
        server.connection().hgetall("h").unwrap();
    holder.unlock().unwrap();
    let (fields, pttl, count, held) = rx.recv_timeout(Duration::from_secs(10)).unwrap();
    assert_eq!(fields.len(), 1, "one owner after the handoff: {fields:?}");
    let (owner, n) = fields.iter().next().unwrap();
    assert_eq!(*n, 1);
    assert!(
        !holder_fields.contains_key(owner),
        "the successor is another owner than the holder"
    );
    assert!(
        (4_000..=5_000).contains(&pttl),
        "successor's 5 s lease: {pttl}"
    );
    assert_eq!(count, 2, "reentrant hold on a handed-over lock");
    assert!(held);
    // The old holder's thread has no hold any more: it cannot take it now.
    assert!(client.try_lock("h").unwrap().is_none());
    done_tx.send(()).unwrap();
    t.join().unwrap();
    assert!(client.try_lock("h").unwrap().is_some());
}

#[test]
fn a_client_hands_over_at_most_twice_in_a_row_while_another_client_waits() {
    // Without anyone else waiting, every release goes to the next thread.
    let server = RedisServer::start();
    let a = LockClient::new(&server.url()).unwrap();
    let log = Arc::new(Mutex::new(Vec::new()));
    let hold = Duration::from_millis(20);
    let holder = a.lock("x").unwrap();
    let mut threads = Vec::new();
    for i in 1..=3u64 {
        threads.push(contender(&a, "x", &format!("a{i}"), hold, &log));
        wait_queued(&a, i);
    }
    holder.unlock().unwrap();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(a.stats().handoffs, 3, "alone, every release is a handoff");

    // Another client waiting (subscribed): after two handoffs in a row the
    // lock is released publicly and the third thread has to race for it.
    let b = LockClient::new(&server.url()).unwrap();
    let a = LockClient::new(&server.url()).unwrap();
    let log = Arc::new(Mutex::new(Vec::new()));
    let holder = a.lock("x").unwrap();
    let mut threads = Vec::new();
    for i in 1..=3u64 {
        threads.push(contender(&a, "x", &format!("a{i}"), hold, &log));
        wait_queued(&a, i);
    }
    let remote = contender(&b, "x", "b", Duration::ZERO, &log);
    assert!(eventually(Duration::from_secs(10), || b
        .stats()
        .waiters_parked
        == 1));
    holder.unlock().unwrap();
    for t in threads {
        t.join().unwrap();
    }
    remote.join().unwrap();
    let log = log.lock().unwrap().clone();
    assert_eq!(&log[..2], ["a1", "a2"], "{log:?}");
    assert!(log[2..].contains(&"b".to_owned()), "{log:?}");
    assert_eq!(
        a.stats().handoffs,
        2,
        "a2's release was public because b waited: {log:?}"
    );
}

/// After a release that went public because another client waited, the
/// thread queued here lets that client take the lock first. Timing decides
/// a single round (the yield is bounded, so a very slow remote waiter can
/// lose it), so the test asks for most of the rounds, not all.
#[test]
fn after_a_public_release_the_local_thread_lets_the_waiting_client_go_first() {
    let server = RedisServer::start();
    let a = LockClient::new(&server.url()).unwrap();
    let b = LockClient::new(&server.url()).unwrap();
    let rounds = 8;
    let mut remote_first = 0;
    for round in 0..rounds {
        let name = format!("yield:{round}");
        let log = Arc::new(Mutex::new(Vec::new()));
        let before = a.stats().handoffs;
        let holder = a.lock(&name).unwrap();
        let mut threads = Vec::new();
        for i in 1..=3u64 {
            threads.push(contender(&a, &name, &format!("a{i}"), Duration::ZERO, &log));
            wait_queued(&a, i);
        }
        let remote = contender(&b, &name, "b", Duration::ZERO, &log);
        assert!(eventually(Duration::from_secs(10), || b
            .stats()
            .waiters_parked
            == 1));
        holder.unlock().unwrap();
        for t in threads {
            t.join().unwrap();
        }
        remote.join().unwrap();
        let log = log.lock().unwrap().clone();
        assert_eq!(&log[..2], ["a1", "a2"], "{log:?}");
        assert_eq!(a.stats().handoffs - before, 2, "{log:?}");
        if log[2] == "b" {
            remote_first += 1;
        }
    }
    assert!(
        remote_first * 4 >= rounds * 3,
        "the waiting client went first in only {remote_first} of {rounds} rounds"
    );
}

#[test]
fn our_own_subscription_does_not_count_as_another_waiter() {
    let server = RedisServer::start();
    let a = LockClient::new(&server.url()).unwrap();
    let b = LockClient::new(&server.url()).unwrap();
    let log = Arc::new(Mutex::new(Vec::new()));
    let remote_holder = b.lock("y").unwrap();
    // a's first thread must wait on pub/sub (b holds it); the rest queue.
    let mut threads = Vec::new();
    for i in 1..=4u64 {
        threads.push(contender(&a, "y", &format!("a{i}"), Duration::ZERO, &log));
        wait_queued(&a, i - 1);
        if i == 1 {
            assert!(eventually(Duration::from_secs(10), || a
                .stats()
                .waiters_parked
                == 1));
        }
    }
    wait_queued(&a, 3);
    remote_holder.unlock().unwrap();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(*log.lock().unwrap(), ["a1", "a2", "a3", "a4"]);
    assert_eq!(
        a.stats().handoffs,
        3,
        "a's own subscription is subtracted: nobody else waited"
    );
}

#[test]
fn a_queued_thread_gives_up_at_its_deadline_and_leaves_the_queue() {
    let server = RedisServer::start();
    let client = LockClient::new(&server.url()).unwrap();
    let holder = client.lock("d").unwrap();
    let c = client.clone();
    let impatient = thread::spawn(move || {
        let started = Instant::now();
        let got = c.try_lock_for("d", Duration::from_millis(300)).unwrap();
        (got.is_some(), started.elapsed())
    });
    wait_queued(&client, 1);
    let log = Arc::new(Mutex::new(Vec::new()));
    let patient = contender(&client, "d", "patient", Duration::ZERO, &log);
    wait_queued(&client, 2);
    let (got, waited) = impatient.join().unwrap();
    assert!(!got);
    assert!(
        waited >= Duration::from_millis(300) && waited < Duration::from_secs(3),
        "{waited:?}"
    );
    assert_eq!(
        client.stats().waiters_queued,
        1,
        "only the patient one is left"
    );
    holder.unlock().unwrap();
    patient.join().unwrap();
    assert_eq!(*log.lock().unwrap(), ["patient"]);
    assert_eq!(client.stats().handoffs, 1);
}

#[test]
fn an_expired_lease_of_a_kept_guard_lets_the_queue_try_redis() {
    let server = RedisServer::start();
    let client = LockClient::new(&server.url()).unwrap();
    let short = LockOptions::new().lease(Duration::from_millis(500));
    // From before the lease was set: the lock cannot be had again sooner
    // than 500 ms after this, however long the reply took.
    let started = Instant::now();
    let stale = client.lock_with("e", short).unwrap();
    let (got_tx, got_rx) = std::sync::mpsc::channel();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let c = client.clone();
    let t = thread::spawn(move || {
        let g = c.lock("e").unwrap();
        got_tx.send(()).unwrap();
        done_rx.recv().unwrap(); // hold until the stale guard was checked
        g.unlock().unwrap();
    });
    got_rx
        .recv_timeout(Duration::from_secs(5))
        .expect("the queued thread got the lock");
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(450) && waited < Duration::from_secs(3),
        "the queued thread waited for the lease, not the guard: {waited:?}"
    );
    assert!(!stale.is_held());
    assert!(stale.unlock().unwrap_err().is_not_held());
    let exists: bool = server.connection().exists("e").unwrap();
    assert!(exists, "the stale unlock left the new holder's lock alone");
    done_tx.send(()).unwrap();
    t.join().unwrap();
}

#[test]
fn reentry_is_not_queued_behind_waiters() {
    let server = RedisServer::start();
    let client = LockClient::new(&server.url()).unwrap();
    let log = Arc::new(Mutex::new(Vec::new()));
    let outer = client.lock("r").unwrap();
    let t = contender(&client, "r", "other", Duration::ZERO, &log);
    wait_queued(&client, 1);
    let inner = client.lock("r").unwrap(); // does not wait behind `other`
    drop(inner);
    thread::sleep(Duration::from_millis(100));
    assert!(log.lock().unwrap().is_empty(), "still held through `outer`");
    drop(outer);
    t.join().unwrap();
    assert_eq!(*log.lock().unwrap(), ["other"]);
    assert_eq!(client.stats().handoffs, 1);
}

#[test]
fn the_last_guard_frees_the_lock_whatever_count_redis_shows() {
    let server = RedisServer::start();
    let client = LockClient::new(&server.url()).unwrap();
    let mut con = server.connection();
    let guard = client.lock("stale").unwrap();
    let owners: Vec<String> = con.hkeys("stale").unwrap();
    // A count Redis kept from a hold this client no longer has (a lost
    // lease's guard dropped without sending, an unconfirmed handoff).
    let _: i64 = con.hincr("stale", &owners[0], 2).unwrap();
    guard.unlock().unwrap();
    let exists: bool = con.exists("stale").unwrap();
    assert!(
        !exists,
        "the last local hold released every hold of its owner"
    );
    // And a fresh first hold resets a stale count instead of adding to it.
    let _: i64 = con.hset("stale", &owners[0], 5).unwrap();
    let _: bool = con.pexpire("stale", 30_000).unwrap();
    let again = client.lock("stale").unwrap();
    let count: i64 = con.hget("stale", &owners[0]).unwrap();
    assert_eq!(count, 1);
    drop(again);
    let exists: bool = con.exists("stale").unwrap();
    assert!(!exists);
}
