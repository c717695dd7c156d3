//! The watchdog against a real redis-server: leases renewed while guards
//! live, explicit leases left alone, lost leases reported, batched renewal.

mod support;

use std::time::{Duration, Instant};

use leasehold::{LeaseLost, LockClient, LockOptions};
use redis::Commands;
use support::{eventually, RedisServer};

fn client_with_lease(server: &RedisServer, lease_ms: u64) -> LockClient {
    LockClient::builder(&server.url())
        .watchdog_lease(Duration::from_millis(lease_ms))
        .connect_timeout(Duration::from_millis(500))
        .build()
        .unwrap()
}

fn pttls(server: &RedisServer, keys: &[String]) -> Vec<i64> {
    let mut pipe = redis::pipe();
    for k in keys {
        pipe.pttl(k);
    }
    pipe.query(&mut server.connection()).unwrap()
}

/// Leases of 1.5 s renewed every 500 ms: a renewal may be a second late
/// (a loaded machine) before the lease runs out.
#[test]
fn watchdog_keeps_the_lock_for_many_leases() {
    let server = RedisServer::start();
    let client = client_with_lease(&server, 1_500);
    let mut con = server.connection();
    let guard = client.lock("long-job").unwrap();
    let until = Instant::now() + Duration::from_millis(4_500); // 3 leases
    while Instant::now() < until {
        let pttl: i64 = con.pttl("long-job").unwrap();
        assert!(
            pttl > 0,
            "the lease ran out while the guard lived (pttl {pttl})"
        );
        assert!(guard.is_held());
        std::thread::sleep(Duration::from_millis(50));
    }
    let stats = client.stats();
    assert_eq!(stats.live_leases, 1);
    // About 9 (every 500 ms).
    assert!(stats.renewals_sent >= 5, "{stats:?}");
    assert_eq!(stats.leases_lost, 0);
    guard.unlock().unwrap();
    let exists: bool = con.exists("long-job").unwrap();
    assert!(!exists);
    assert_eq!(client.stats().live_leases, 0);
}

#[test]
fn explicit_lease_expires_and_is_never_renewed() {
    let server = RedisServer::start();
    let client = client_with_lease(&server, 300);
    let mut con = server.connection();
    let guard = client
        .lock_with(
            "short",
            LockOptions::new().lease(Duration::from_millis(400)),
        )
        .unwrap();
    assert!(guard.is_held());
    assert!(eventually(Duration::from_secs(3), || {
        !con.exists::<_, bool>("short").unwrap()
    }));
    assert!(
        !guard.is_held(),
        "is_held turns false once an explicit lease ran out"
    );
    assert_eq!(
        client.stats().renewals_sent,
        0,
        "explicit leases are not renewed"
    );
    assert!(guard.unlock().unwrap_err().is_not_held());
}

#[test]
fn deleted_key_is_reported_lost_within_one_period() {
    let server = RedisServer::start();
    let client = client_with_lease(&server, 900);
    let other = LockClient::new(&server.url()).unwrap();
    let mut con = server.connection();
    let guard = client.lock("stolen").unwrap();
    let lost = guard.lost().receiver();
    let _: () = con.del("stolen").unwrap();
    let deleted = Instant::now();
    let why = lost
        .recv_timeout(Duration::from_secs(5))
        .expect("the lost signal arrives");
    assert_eq!(why, LeaseLost::NotOurs);
    assert!(
        deleted.elapsed() < Duration::from_millis(300 + 700),
        "within one renewal period (300 ms) + slack: {:?}",
        deleted.elapsed()
    );
    assert!(!guard.is_held());
    assert_eq!(client.stats().leases_lost, 1);

    let fresh = other.lock("stolen").unwrap();
    let before: Vec<(String, i64)> = con.hgetall("stolen").unwrap();
    let monitor = support::Monitor::start(&server);
    let e = guard.unlock().unwrap_err();
    assert!(e.is_not_held(), "{e:?}");
    // The clients' registrations (renewal thread, every 2 s) may be written
    // meanwhile; nothing else may be.
    let sent = monitor.client_commands_except("leasehold_client:");
    assert!(sent.is_empty(), "a lost guard sends nothing: {sent:?}");
    let after: Vec<(String, i64)> = con.hgetall("stolen").unwrap();
    assert_eq!(before, after, "the new holder's lock is untouched");
    fresh.unlock().unwrap();
}

#[test]
fn unlock_stops_renewal_at_once() {
    let server = RedisServer::start();
    let client = client_with_lease(&server, 1_500);
    let guard = client.lock("stop").unwrap();
    // A few renewals (every 500 ms).
    assert!(eventually(Duration::from_secs(10), || client
        .stats()
        .renewals_sent
        >= 2));
    guard.unlock().unwrap();
    let monitor = support::Monitor::start(&server);
    let sent_before = client.stats().renewals_sent;
    std::thread::sleep(Duration::from_millis(1_500)); // three periods
    assert_eq!(client.stats().renewals_sent, sent_before);
    // The client's registration may still be written (renewal thread,
    // every 2 s after activity); no lock command may.
    let sent = monitor.client_commands_except("leasehold_client:");
    assert!(sent.is_empty(), "no renewal after unlock: {sent:?}");
}

#[test]
fn reentrant_guards_share_one_renewal_entry() {
    let server = RedisServer::start();
    let client = client_with_lease(&server, 1_500);
    let mut con = server.connection();
    let a = client.lock("re").unwrap();
    let b = client.lock("re").unwrap();
    assert_eq!(client.stats().live_leases, 1);
    drop(a);
    // Half a second past a lease; renewed every 500 ms, a second to spare.
    std::thread::sleep(Duration::from_millis(2_000));
    let pttl: i64 = con.pttl("re").unwrap();
    assert!(pttl > 0, "the remaining hold is still renewed");
    assert!(b.is_held());
    b.unlock().unwrap();
    assert_eq!(client.stats().live_leases, 0);
}

/// A 3 s lease: its socket timeout (1 s) is well above the 400 ms pause,
/// so the renewal the pause holds up is answered, not timed out.
#[test]
fn short_pause_keeps_the_lease_and_a_dead_server_loses_it() {
    let mut server = RedisServer::start_with_debug_command();
    let client = client_with_lease(&server, 3_000);
    let mut con = server.connection();
    let guard = client.lock("paused").unwrap();
    let lost = guard.lost().receiver();
    let _: () = redis::cmd("DEBUG")
        .arg("SLEEP")
        .arg("0.4")
        .query(&mut con)
        .unwrap();
    std::thread::sleep(Duration::from_millis(1_200));
    assert!(
        guard.is_held(),
        "a pause shorter than the lease loses nothing"
    );
    let pttl: i64 = con.pttl("paused").unwrap();
    assert!(pttl > 0);
    assert!(lost.try_recv().is_err());

    server.kill();
    let killed = Instant::now();
    let why = lost
        .recv_timeout(Duration::from_secs(10))
        .expect("the lease is reported lost once it ran out");
    assert_eq!(why, LeaseLost::Unreachable);
    assert!(
        killed.elapsed() < Duration::from_millis(3_000 + 2_000),
        "{:?}",
        killed.elapsed()
    );
    assert!(!guard.is_held());
    let e = guard.unlock().unwrap_err();
    assert!(e.is_not_held(), "{e:?}");
    // New attempts fail with typed connection errors, not panics.
    let e = client.try_lock("paused").unwrap_err();
    assert!(e.is_connection(), "{e:?}");
}

#[test]
fn script_flush_does_not_stop_renewal_of_1000_guards() {
    let server = RedisServer::start();
    let client = client_with_lease(&server, 1_500);
    let keys: Vec<String> = (0..1_000).map(|i| format!("flush:{i}")).collect();
    let guards: Vec<_> = keys.iter().map(|k| client.lock(k).unwrap()).collect();
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query(&mut server.connection())
        .unwrap();
    // Past two leases (renewed every 500 ms: a second to spare).
    std::thread::sleep(Duration::from_millis(3_500));
    let ttls = pttls(&server, &keys);
    let dead = ttls.iter().filter(|t| **t <= 0).count();
    assert_eq!(dead, 0, "{dead} of 1000 leases ran out after SCRIPT FLUSH");
    assert_eq!(client.stats().leases_lost, 0);
    assert!(guards.iter().all(|g| g.is_held()));
}

#[test]
fn ten_thousand_guards_survive_with_batched_renewals() {
    let server = RedisServer::start();
    // 3 s leases, renewed every second: two to spare (a debug build's
    // renewal thread sharing a loaded machine's two cores).
    let client = client_with_lease(&server, 3_000);
    let keys: Vec<String> = (0..10_000).map(|i| format!("many:{i}")).collect();
    let guards: Vec<_> = keys.iter().map(|k| client.lock(k).unwrap()).collect();
    let start = client.stats();
    std::thread::sleep(Duration::from_secs(6));
    let end = client.stats();
    let ttls = pttls(&server, &keys);
    assert_eq!(
        ttls.iter().filter(|t| **t <= 0).count(),
        0,
        "every lease survived"
    );
    assert_eq!(end.leases_lost, 0);
    assert_eq!(end.live_leases, 10_000);
    let sent = end.renewals_sent - start.renewals_sent;
    let trips = end.renewal_round_trips - start.renewal_round_trips;
    println!("10,000 guards, 3 s lease, 6 s: {sent} renewals in {trips} round trips");
    // Every lease/3: six times each in 6 s; half of that at least.
    assert!(
        sent >= 10_000 * 6 / 2,
        "renewed about every lease/3: {sent} renewals"
    );
    assert!(
        trips * 100 <= sent,
        "renewals are batched: {sent} renewals took {trips} round trips"
    );
    drop(guards);
    assert_eq!(client.stats().live_leases, 0);
}
