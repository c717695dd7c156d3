//! A bad network between client and Redis, through the fault proxy in
//! `tests/support/proxy.rs`: renewal blackholed, connections reset under
//! waiters, Redis blackholed during a bounded wait, acquire replies delayed
//! past the lease.

mod support;

use std::thread;
use std::time::{Duration, Instant};

use leasehold::{LeaseLost, LockClient, LockOptions};
use redis::Commands;
use support::proxy::{Fault, FaultProxy};
use support::{eventually, RedisServer};

#[test]
fn blackholed_renewal_reports_the_lease_lost_before_redis_expires_it() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port());
    let lease = Duration::from_millis(2_000);
    let client = LockClient::builder(&proxy.url())
        .watchdog_lease(lease)
        .socket_timeout(Duration::from_millis(400))
        .build()
        .unwrap();
    let guard = client.lock("net:renew").unwrap();
    let lost = guard.lost();
    // Let one renewal through, then cut the client off.
    assert!(eventually(Duration::from_secs(5), || client
        .stats()
        .renewals_sent
        >= 1));
    proxy.set(Fault::Blackhole);
    let why = lost
        .recv_timeout(lease + Duration::from_secs(3))
        .expect("the lost signal");
    assert_eq!(why, LeaseLost::Unreachable);
    assert!(!guard.is_held());
    // Seen directly, Redis still has the key: the client gave up first.
    let pttl: i64 = server.connection().pttl("net:renew").unwrap();
    assert!(
        pttl > 0,
        "the guard reported the loss before the server-side expiry (PTTL {pttl})"
    );
}

#[test]
fn waiters_acquire_after_every_connection_was_reset() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port());
    let holder = LockClient::new(&server.url()).unwrap();
    let waiters = LockClient::builder(&proxy.url())
        .connect_timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    let guard = holder.lock("net:reset").unwrap();
    let handles: Vec<_> = (0..3)
        .map(|_| {
            let c = waiters.clone();
            thread::spawn(move || c.lock("net:reset").map(|g| g.unlock()))
        })
        .collect();
    assert!(eventually(Duration::from_secs(10), || waiters
        .stats()
        .waiters_parked
        == 3));
    proxy.reset_all(); // the subscriber and the pooled connections
    thread::sleep(Duration::from_millis(100));
    guard.unlock().unwrap();
    for h in handles {
        let done = h.join().unwrap();
        assert!(matches!(done, Ok(Ok(()))), "{done:?}");
    }
}

#[test]
fn a_bounded_wait_returns_on_time_when_redis_is_blackholed() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port());
    let socket_timeout = Duration::from_millis(300);
    let client = LockClient::builder(&proxy.url())
        .socket_timeout(socket_timeout)
        .connect_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    drop(client.lock("net:warm").unwrap()); // a pooled connection exists
    proxy.set(Fault::Blackhole);
    let wait = Duration::from_millis(500);
    let started = Instant::now();
    let result = client.try_lock_for("net:bounded", wait);
    let took = started.elapsed();
    assert!(
        took < wait + socket_timeout + Duration::from_millis(700),
        "returned after {took:?}"
    );
    match result {
        Err(e) => assert!(e.is_timeout() || e.is_connection(), "{e:?}"),
        Ok(g) => assert!(g.is_none(), "no lock through a blackhole"),
    }
}

#[test]
fn an_acquire_reply_that_arrives_after_the_lease_is_no_lock() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port());
    let client = LockClient::builder(&proxy.url())
        .socket_timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    drop(client.lock("net:warm").unwrap());
    proxy.set(Fault::Delay(Duration::from_millis(150)));
    let lease = LockOptions::new().lease(Duration::from_millis(200));
    let e = client.lock_with("net:late", lease).unwrap_err();
    assert!(
        matches!(e, leasehold::Error::LeaseExpiredOnArrival { .. }),
        "{e:?}"
    );
    assert!(e.is_timeout());
    proxy.set(Fault::Forward);
    let exists: bool = server.connection().exists("net:late").unwrap();
    assert!(!exists, "nothing left behind");
    // With a lease longer than the round trip the same lock is fine.
    proxy.set(Fault::Delay(Duration::from_millis(150)));
    let g = client
        .lock_with("net:late", LockOptions::new().lease(Duration::from_secs(5)))
        .unwrap();
    assert!(g.is_held());
}
