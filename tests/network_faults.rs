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
use support::{eventually, listening_clients, RedisServer};

#[test]
fn blackholed_renewal_reports_the_lease_lost_before_redis_expires_it() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port());
    // The client gives up once less than two socket timeouts of the lease
    // are left: with 1.5 s, Redis still has the key for 1.5 to 3 s after
    // the loss is reported (it had 800 ms with a 400 ms socket timeout).
    let lease = Duration::from_millis(4_500);
    let client = LockClient::builder(&proxy.url())
        .watchdog_lease(lease)
        .socket_timeout(Duration::from_millis(1_500))
        .build()
        .unwrap();
    let guard = client.lock("net:renew").unwrap();
    let lost = guard.lost().receiver();
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
    // Socket and connect timeouts of 12 s: a wait they decided, not its
    // deadline, would take that long.
    let timeout = Duration::from_secs(12);
    let client = LockClient::builder(&proxy.url())
        .socket_timeout(timeout)
        .connect_timeout(timeout)
        .build()
        .unwrap();
    drop(client.lock("net:warm").unwrap()); // a pooled connection exists
    proxy.set(Fault::Blackhole);
    let wait = Duration::from_millis(500);
    let started = Instant::now();
    let result = client.try_lock_for("net:bounded", wait);
    let took = started.elapsed();
    assert!(
        took < wait + Duration::from_millis(1_500),
        "returned after {took:?}"
    );
    match result {
        Err(e) => assert!(e.is_timeout() || e.is_connection(), "{e:?}"),
        Ok(g) => assert!(g.is_none(), "no lock through a blackhole"),
    }
}

/// A server, a fault proxy in front of it, and a client through the proxy
/// whose socket timeout (2 s) outlasts the delays the tests set.
fn behind_a_slow_proxy() -> (RedisServer, FaultProxy, LockClient) {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port());
    let client = LockClient::builder(&proxy.url())
        .socket_timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    (server, proxy, client)
}

#[test]
fn an_acquire_reply_that_arrives_after_the_lease_is_no_lock() {
    let (server, proxy, client) = behind_a_slow_proxy();
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

#[test]
fn fair_and_read_write_acquires_whose_reply_arrives_after_the_lease_are_no_lock() {
    let (server, proxy, client) = behind_a_slow_proxy();
    drop(client.fair_lock("net:warm").unwrap());
    drop(client.write_lock("net:warm-rw").unwrap());
    proxy.set(Fault::Delay(Duration::from_millis(150)));
    let lease = Duration::from_millis(200);
    for (name, opts) in [
        ("net:late-fair", LockOptions::new().fair().lease(lease)),
        ("net:late-write", LockOptions::new().write().lease(lease)),
        ("net:late-read", LockOptions::new().read().lease(lease)),
    ] {
        match client.lock_with(name, opts) {
            Err(e) => assert!(
                matches!(e, leasehold::Error::LeaseExpiredOnArrival { .. }),
                "{name}: {e:?}"
            ),
            Ok(g) => panic!("{name}: a guard whose lease had run out on arrival: {g:?}"),
        }
    }
    proxy.set(Fault::Forward);
    let mut con = server.connection();
    let keys: Vec<String> = redis::cmd("KEYS").arg("*late*").query(&mut con).unwrap();
    assert!(keys.is_empty(), "left behind: {keys:?}");
}

#[test]
fn a_waiter_rides_out_a_server_that_is_loading_its_dataset() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port());
    let holder = LockClient::new(&server.url()).unwrap();
    let waiter = LockClient::new(&proxy.url()).unwrap();
    let held = holder
        .lock_with(
            "net:loading",
            LockOptions::new().lease(Duration::from_millis(600)),
        )
        .unwrap();
    let started = Instant::now();
    let parked = thread::spawn(move || waiter.lock("net:loading").map(|g| g.is_held()));
    assert!(eventually(Duration::from_secs(5), || listening_clients(
        &server,
        "net:loading"
    ) == 1));
    // The holder's lease runs out while every command of the waiter is
    // answered `LOADING` (as by a Redis loading its dataset after a
    // restart); the waiter wakes at the lease's end, meets LOADING, and must
    // keep waiting until Redis is ready.
    proxy.set(Fault::Refuse(
        "LOADING Redis is loading the dataset in memory",
    ));
    std::mem::forget(held); // its lease just runs out
    thread::sleep(Duration::from_millis(1_200));
    proxy.set(Fault::Forward);
    let got = parked.join().unwrap();
    assert!(
        matches!(got, Ok(true)),
        "the waiter gave up on LOADING: {got:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(5));
}

/// A command that ran in Redis, whose connection then closed before its
/// reply left (a `CLIENT KILL`, a crash after the write), is not sent again:
/// the client cannot tell it from a connection that had closed before the
/// command went out, and a second run of a reentrant hold's release frees
/// the lock its outer guard still holds — another client would take it.
#[test]
fn a_release_that_ran_before_its_connection_closed_is_not_run_twice() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port());
    let client = LockClient::new(&proxy.url()).unwrap();
    let other = LockClient::new(&server.url()).unwrap();
    // The scripts loaded (a cut `NOSCRIPT` would be no run at all).
    let warm = client.lock("net:cut").unwrap();
    client.lock("net:cut").unwrap().unlock().unwrap();
    warm.unlock().unwrap();
    let outer = client.lock("net:cut").unwrap();
    let inner = client.lock("net:cut").unwrap(); // reentrant: 2 in Redis
    let count = || -> Vec<String> { server.connection().hvals("net:cut").unwrap() };
    assert_eq!(count(), ["2"]);
    proxy.set(Fault::CutReplyTo("net:cut", Duration::ZERO));
    let released = inner.unlock();
    // It ran once: the outer guard's hold is there, and nobody else gets in.
    assert_eq!(count(), ["1"], "the reentrant release ran twice");
    assert!(other.try_lock("net:cut").unwrap().is_none());
    assert!(
        released.is_err(),
        "the release's reply was cut: {released:?}"
    );
    assert!(outer.is_held());
    outer.unlock().unwrap();
    assert!(other.try_lock("net:cut").unwrap().is_some());
}

/// The same for an async call on the I/O threads (a semaphore's): permits
/// added twice let more holders in than the application meant.
#[cfg(feature = "tokio")]
#[test]
fn permits_added_before_their_connection_closed_are_not_added_twice() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port());
    let client = LockClient::new(&proxy.url()).unwrap().to_async();
    let sem = client.semaphore("cut:permits");
    let rt = support::current_thread();
    // The script loaded (a cut `NOSCRIPT` would be no run at all).
    rt.block_on(async {
        sem.set_permits(1).await.unwrap();
        sem.add_permits(1).await.unwrap();
    });
    proxy.set(Fault::CutReplyTo("cut:permits", Duration::ZERO));
    let added = rt.block_on(sem.add_permits(1));
    let available = rt.block_on(sem.available_permits()).unwrap();
    assert_eq!(available, 3, "permits added twice ({added:?})");
    assert!(added.is_err(), "the reply was cut: {added:?}");
}

/// The other side of `a_release_that_ran_before_its_connection_closed_is_not_run_twice`:
/// a connection the server closed while
/// it sat idle (`CLIENT KILL`, its `timeout`, a restart) is found so before
/// anything is sent on it, and the call goes on a new one — no error for
/// the caller, and the release ran once.
#[test]
fn a_connection_closed_while_idle_is_replaced_before_anything_is_sent() {
    let server = RedisServer::start();
    let client = LockClient::new(&server.url()).unwrap();
    let outer = client.lock("net:idle").unwrap();
    let inner = client.lock("net:idle").unwrap();
    server.kill_clients();
    let mut admin = server.connection();
    inner.unlock().unwrap();
    let count: Vec<String> = admin.hvals("net:idle").unwrap();
    assert_eq!(count, ["1"]);
    assert!(outer.is_held());
    outer.unlock().unwrap();
}
