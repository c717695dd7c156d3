//! The core lock against a real redis-server: layout, reentrancy, owner
//! checks, round trips, mutual exclusion, typed errors, bounded Drop.

mod support;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use leasehold::{LockClient, LockOptions};
use redis::Commands;
use support::{eventually, RedisServer};

fn fields(con: &mut redis::Connection, key: &str) -> Vec<(String, i64)> {
    let mut v: Vec<(String, i64)> = con.hgetall(key).unwrap();
    v.sort();
    v
}

#[test]
fn redis_layout_is_redissons_rlock() {
    let server = RedisServer::start();
    let client = LockClient::new(&server.url()).unwrap();
    let mut con = server.connection();

    let guard = client.lock("order:pay").unwrap();
    assert_eq!(guard.name(), "order:pay");
    let kind: String = redis::cmd("TYPE").arg("order:pay").query(&mut con).unwrap();
    assert_eq!(kind, "hash");
    let held = fields(&mut con, "order:pay");
    assert_eq!(held.len(), 1, "{held:?}");
    let (owner, count) = &held[0];
    let (uuid, thread) = owner.rsplit_once(':').unwrap();
    assert!(
        uuid::Uuid::parse_str(uuid).is_ok(),
        "owner {owner:?} starts with a uuid"
    );
    assert!(
        thread.parse::<u64>().is_ok(),
        "owner {owner:?} ends with a thread number"
    );
    assert_eq!(*count, 1);
    let pttl: i64 = con.pttl("order:pay").unwrap();
    assert!(
        pttl > 25_000 && pttl <= 30_000,
        "watchdog lease 30 s, pttl {pttl}"
    );

    // The last unlock deletes the key and publishes "0" on Redisson's channel.
    let mut sub_con = server.connection();
    let mut pubsub = sub_con.as_pubsub();
    pubsub
        .subscribe("redisson_lock__channel:{order:pay}")
        .unwrap();
    guard.unlock().unwrap();
    let exists: bool = con.exists("order:pay").unwrap();
    assert!(!exists);
    pubsub
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let msg = pubsub.get_message().unwrap();
    assert_eq!(msg.get_channel_name(), "redisson_lock__channel:{order:pay}");
    assert_eq!(msg.get_payload::<String>().unwrap(), "0");
}

#[test]
fn key_prefix_and_explicit_lease_are_applied() {
    let server = RedisServer::start();
    let client = LockClient::builder(&server.url())
        .key_prefix("billing:")
        .build()
        .unwrap();
    let mut con = server.connection();
    let opts = LockOptions::new().lease(Duration::from_secs(7));
    let guard = client.lock_with("invoice:7", opts).unwrap();
    assert_eq!(guard.key(), "billing:invoice:7");
    let pttl: i64 = con.pttl("billing:invoice:7").unwrap();
    assert!(
        pttl > 5_000 && pttl <= 7_000,
        "explicit lease 7 s, pttl {pttl}"
    );
    let bare: bool = con.exists("invoice:7").unwrap();
    assert!(!bare, "the unprefixed name is not touched");
    drop(guard);
    let exists: bool = con.exists("billing:invoice:7").unwrap();
    assert!(!exists, "drop released the lock");
}

#[test]
fn reentrant_per_thread_free_only_when_every_guard_is_gone() {
    let server = RedisServer::start();
    let client = LockClient::new(&server.url()).unwrap();
    let other_client = LockClient::new(&server.url()).unwrap();
    let mut con = server.connection();

    for outer_first in [true, false] {
        let g1 = client.lock("re").unwrap();
        let g2 = client
            .try_lock("re")
            .unwrap()
            .expect("same thread re-enters at once");
        assert_eq!(fields(&mut con, "re")[0].1, 2, "hold count 2");

        let taken_elsewhere = |c: &LockClient| {
            let c = c.clone();
            thread::spawn(move || c.try_lock("re").unwrap().is_some())
                .join()
                .unwrap()
        };
        assert!(
            !taken_elsewhere(&client),
            "another thread of the same client waits"
        );
        assert!(!taken_elsewhere(&other_client), "another client waits");

        let (first, second) = if outer_first { (g1, g2) } else { (g2, g1) };
        drop(first);
        assert_eq!(fields(&mut con, "re")[0].1, 1, "one hold left");
        assert!(
            !taken_elsewhere(&client),
            "still held after one of two drops"
        );
        let pttl: i64 = con.pttl("re").unwrap();
        assert!(
            pttl > 25_000,
            "the remaining hold keeps its lease, pttl {pttl}"
        );
        second.unlock().unwrap();
        let exists: bool = con.exists("re").unwrap();
        assert!(!exists, "free once every guard is gone");
        assert!(taken_elsewhere(&other_client), "and others can take it");
    }
}

#[test]
fn another_thread_waits_until_unlock() {
    let server = RedisServer::start();
    let client = LockClient::new(&server.url()).unwrap();
    let guard = client.lock("wait").unwrap();
    let (tx, rx) = mpsc::channel();
    let c = client.clone();
    let waiter = thread::spawn(move || {
        let g = c.lock("wait").unwrap();
        tx.send(Instant::now()).unwrap();
        drop(g);
    });
    assert!(
        rx.recv_timeout(Duration::from_millis(300)).is_err(),
        "the waiter must not get the lock while it is held"
    );
    let released = Instant::now();
    guard.unlock().unwrap();
    let acquired = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("the waiter gets the lock after unlock");
    assert!(acquired >= released);
    waiter.join().unwrap();
}

#[test]
fn many_threads_and_clients_increment_a_non_atomic_counter_exactly() {
    const CLIENTS: usize = 2;
    const THREADS: usize = 4;
    const ROUNDS: u64 = 100;
    let server = RedisServer::start();
    let inside = Arc::new(AtomicBool::new(false));
    let overlaps = Arc::new(AtomicU64::new(0));
    let mut handles = Vec::new();
    for _ in 0..CLIENTS {
        let client = LockClient::new(&server.url()).unwrap();
        for _ in 0..THREADS {
            let client = client.clone();
            let url = server.url();
            let inside = Arc::clone(&inside);
            let overlaps = Arc::clone(&overlaps);
            handles.push(thread::spawn(move || {
                let mut con = redis::Client::open(url).unwrap().get_connection().unwrap();
                for _ in 0..ROUNDS {
                    let _g = client.lock("counter-lock").unwrap();
                    if inside.swap(true, Ordering::SeqCst) {
                        overlaps.fetch_add(1, Ordering::SeqCst);
                    }
                    // Read-modify-write with a gap: lost updates show any overlap.
                    let n: u64 = con.get::<_, Option<u64>>("counter").unwrap().unwrap_or(0);
                    thread::yield_now();
                    let _: () = con.set("counter", n + 1).unwrap();
                    inside.store(false, Ordering::SeqCst);
                }
            }));
        }
    }
    for h in handles {
        h.join().unwrap();
    }
    let total: u64 = server.connection().get("counter").unwrap();
    assert_eq!(overlaps.load(Ordering::SeqCst), 0, "two holders overlapped");
    assert_eq!(total, CLIENTS as u64 * THREADS as u64 * ROUNDS);
}

#[test]
fn expired_guard_cannot_release_the_new_holders_lock() {
    let server = RedisServer::start();
    let old = LockClient::new(&server.url()).unwrap();
    let new = LockClient::new(&server.url()).unwrap();
    let mut con = server.connection();

    let stale = old
        .lock_with("acct", LockOptions::new().lease(Duration::from_millis(200)))
        .unwrap();
    assert!(eventually(Duration::from_secs(5), || {
        !con.exists::<_, bool>("acct").unwrap()
    }));
    let fresh = new.lock("acct").unwrap();
    let before = fields(&mut con, "acct");

    let err = stale.unlock().unwrap_err();
    assert!(err.is_not_held(), "{err:?}");
    assert!(err.to_string().contains("no longer held"), "{err}");
    assert_eq!(
        fields(&mut con, "acct"),
        before,
        "the new holder's hash is untouched"
    );
    let pttl: i64 = con.pttl("acct").unwrap();
    assert!(
        pttl > 25_000,
        "the new holder's lease is untouched, pttl {pttl}"
    );
    fresh.unlock().unwrap();
}

#[test]
fn uncontended_lock_unlock_is_two_round_trips() {
    let server = RedisServer::start();
    let client = LockClient::new(&server.url()).unwrap();
    // Warm up: open the pooled connection and load the scripts.
    client.lock("rt").unwrap().unlock().unwrap();
    let monitor = support::Monitor::start(&server);
    const N: usize = 50;
    for _ in 0..N {
        let g = client.lock("rt").unwrap();
        g.unlock().unwrap();
    }
    let sent = monitor.client_commands();
    // The renewal thread writes the client's registration (for operators)
    // every 2 s while the client is active: its own round trip, off the
    // lock path, a `HSET` + `PEXPIRE` at most once in a run this short.
    let (registration, lock_path): (Vec<_>, Vec<_>) =
        sent.iter().partition(|c| *c == "hset" || *c == "pexpire");
    assert!(registration.len() <= 2, "{sent:?}");
    assert_eq!(
        lock_path.len(),
        2 * N,
        "two round trips per lock + unlock: {sent:?}"
    );
    assert!(
        lock_path.iter().all(|c| *c == "evalsha"),
        "only the scripts: {sent:?}"
    );
}

#[test]
fn bad_input_is_a_typed_error() {
    let server = RedisServer::start();
    let client = LockClient::new(&server.url()).unwrap();
    let e = client.lock("").unwrap_err();
    assert!(e.is_invalid_argument(), "{e:?}");
    let e = client
        .lock_with("x", LockOptions::new().lease(Duration::ZERO))
        .unwrap_err();
    assert!(e.is_invalid_argument(), "{e:?}");

    let mut con = server.connection();
    let _: () = con.set("plain-string", "v").unwrap();
    let e = client.lock("plain-string").unwrap_err();
    assert!(e.is_wrong_type(), "{e:?}");
    assert!(e.to_string().contains("plain-string"), "{e}");
    let v: String = con.get("plain-string").unwrap();
    assert_eq!(v, "v", "a failed acquire leaves the value alone");
}

#[test]
fn authentication_failure_is_typed() {
    let server = RedisServer::start_with_password("s3cret");
    let wrong = format!("redis://:wrong@127.0.0.1:{}/", server.port());
    let client = LockClient::builder(&wrong)
        .connect_timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    let e = client.lock("a").unwrap_err();
    assert!(e.is_auth(), "{e:?}");

    let good = LockClient::new(&server.url()).unwrap();
    good.lock("a").unwrap().unlock().unwrap();
}

#[test]
fn unreachable_redis_is_a_typed_error_within_the_connect_timeout() {
    let server = RedisServer::start();
    let url = server.url();
    drop(server); // the port is now closed
    let client = LockClient::builder(&url)
        .connect_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let started = Instant::now();
    let e = client.lock("a").unwrap_err();
    assert!(e.is_connection(), "{e:?}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "gave up in {:?}",
        started.elapsed()
    );
}

#[test]
fn drop_is_bounded_and_quiet_when_redis_stops_answering() {
    let server = RedisServer::start();
    let client = LockClient::builder(&server.url())
        .socket_timeout(Duration::from_millis(400))
        .build()
        .unwrap();
    let guard = client.lock("frozen").unwrap();
    server.signal("STOP"); // connections stay open, nothing answers
    let started = Instant::now();
    drop(guard);
    let took = started.elapsed();
    server.signal("CONT");
    assert!(took < Duration::from_secs(3), "drop took {took:?}");

    // An explicit unlock in the same state returns a typed timeout.
    let guard = client.lock("frozen2").unwrap();
    server.signal("STOP");
    let e = guard.unlock().unwrap_err();
    server.signal("CONT");
    assert!(e.is_timeout() || e.is_connection(), "{e:?}");
}

#[test]
fn drop_returns_promptly_when_redis_is_gone() {
    let mut server = RedisServer::start();
    let client = LockClient::builder(&server.url())
        .socket_timeout(Duration::from_millis(400))
        .connect_timeout(Duration::from_millis(400))
        .build()
        .unwrap();
    let guard = client.lock("gone").unwrap();
    server.kill();
    let started = Instant::now();
    drop(guard);
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn panic_in_critical_section_releases_the_lock() {
    let server = RedisServer::start();
    let client = LockClient::new(&server.url()).unwrap();
    let c = client.clone();
    let result = thread::spawn(move || {
        let _g = c.lock("panicky").unwrap();
        panic!("boom inside the critical section");
    })
    .join();
    assert!(result.is_err(), "the thread panicked");
    let exists: bool = server.connection().exists("panicky").unwrap();
    assert!(
        !exists,
        "unwinding dropped the guard, which released the lock"
    );
    assert!(client.try_lock("panicky").unwrap().is_some());
}

#[test]
fn an_owned_guard_moved_to_another_thread_releases_there() {
    let server = RedisServer::start();
    let client = LockClient::new(&server.url()).unwrap();
    let guard = client.lock_owned("moved").unwrap();
    thread::spawn(move || guard.unlock().unwrap())
        .join()
        .unwrap();
    let exists: bool = server.connection().exists("moved").unwrap();
    assert!(!exists);
}
