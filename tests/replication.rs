//! Replica acknowledgement (`LockClientBuilder::replicas`): every acquire is
//! followed by `WAIT` on the same connection; too few acknowledgements undo
//! the hold and fail with `Error::NotReplicated`.

mod support;

use std::thread;
use std::time::{Duration, Instant};

use leasehold::{Error, LockClient};
use redis::Commands;
use support::RedisServer;

fn replicated_client(server: &RedisServer) -> LockClient {
    LockClient::builder(&server.url())
        .replicas(1, Duration::from_millis(400))
        .socket_timeout(Duration::from_secs(2))
        .build()
        .unwrap()
}

#[test]
fn acknowledged_acquires_hold_and_a_silent_replica_leaves_no_lock() {
    let primary = RedisServer::start();
    let replica = RedisServer::start_replica_of(&primary);
    let client = replicated_client(&primary);
    let mut on_primary = primary.connection();
    let mut on_replica = replica.connection();

    primary.reset_stats();
    let g = client.lock("repl:a").unwrap();
    assert_eq!(primary.command_calls().get("wait"), Some(&1));
    // WAIT returned only once the replica had the hold.
    let fields: Vec<String> = on_replica.hkeys("repl:a").unwrap();
    assert_eq!(fields.len(), 1, "the replica has the hold");
    g.unlock().unwrap();
    for lock in [
        client.fair_lock("repl:fair"),
        client.read_lock("repl:rw"),
        client.write_lock("repl:rw:w"),
    ] {
        lock.unwrap().unlock().unwrap();
    }

    // The replica stops answering: every kind of acquire is undone and
    // reported, after about the WAIT timeout, and nothing stays in Redis.
    replica.signal("STOP");
    for name in ["repl:b", "repl:fair2", "repl:rw2", "repl:rw2:w"] {
        let asked = Instant::now();
        let got = match name {
            "repl:fair2" => client.fair_lock(name),
            "repl:rw2" => client.read_lock(name),
            "repl:rw2:w" => client.write_lock(name),
            _ => client.lock(name),
        };
        let err = got.unwrap_err();
        assert!(
            matches!(
                err,
                Error::NotReplicated {
                    acked: 0,
                    wanted: 1,
                    ..
                }
            ),
            "{name}: {err}"
        );
        assert!(err.to_string().contains("INFO replication"), "{err}");
        let took = asked.elapsed();
        assert!(
            took >= Duration::from_millis(350) && took < Duration::from_secs(2),
            "{name}: {took:?}"
        );
        let exists: bool = on_primary.exists(name).unwrap();
        assert!(!exists, "{name} was left behind");
    }
    let keys: Vec<String> = on_primary.keys("*").unwrap();
    assert!(
        keys.iter().all(|k| !k.contains("repl:")),
        "left behind: {keys:?}"
    );
    replica.signal("CONT");
    assert!(client.lock("repl:c").is_ok(), "works again once it is back");
}

/// A renewal the replica did not acknowledge does not lengthen the guard's
/// lease: the replica (the next primary, after a failover) still has the
/// expiry of the last acknowledged write, and the guard must not count on
/// more. Found by the protocol simulator (`tests/simulation.rs`, failovers
/// with replica acknowledgement): a renewal right before a failover left
/// its holder counting on a lease the new primary did not keep. Before the
/// fix the guard counted on a full lease from the last renewal (about 2.5
/// s here, the replica stopped for 2.5 s); now each renewal batch ends with
/// `WAIT`, and without the acknowledgement its renewals count for nothing.
#[test]
fn a_renewal_the_replica_did_not_acknowledge_does_not_lengthen_the_lease() {
    let primary = RedisServer::start();
    let replica = RedisServer::start_replica_of(&primary);
    let client = LockClient::builder(&primary.url())
        .replicas(1, Duration::from_millis(300))
        .socket_timeout(Duration::from_millis(600))
        .watchdog_lease(Duration::from_secs(3))
        .build()
        .unwrap();
    let g = client.lock("repl:renew").unwrap();
    let taken = Instant::now();
    replica.signal("STOP");
    // Renewals at about 1 s and 2 s reach the primary, not the replica.
    thread::sleep(Duration::from_millis(2500));
    let counted = g.valid_until().map(|u| u.saturating_duration_since(taken));
    replica.signal("CONT");
    assert!(
        counted.is_none_or(|c| c <= Duration::from_millis(3100)),
        "the guard counts on {counted:?} from the acquire; the replica keeps 3 s"
    );
    // Acknowledged again, renewals lengthen it again (or it was lost, and
    // says so).
    drop(g);
    let g = client.lock("repl:renew").unwrap();
    thread::sleep(Duration::from_millis(1500));
    assert!(g.is_held());
    let left = g.remaining();
    assert!(left > Duration::from_millis(1600), "renewed: {left:?} left");
}

/// A renewal that finds the lease gone is reported at once as not ours,
/// even when the replicas do not acknowledge the batch: it wrote nothing
/// that needed them (before, the failed `WAIT` turned it into a retry and
/// the loss showed only as "unreachable" near the lease's end).
#[test]
fn a_lease_found_gone_is_reported_at_once_while_the_replica_is_silent() {
    let primary = RedisServer::start();
    let replica = RedisServer::start_replica_of(&primary);
    let client = LockClient::builder(&primary.url())
        .replicas(1, Duration::from_millis(300))
        .socket_timeout(Duration::from_millis(600))
        .watchdog_lease(Duration::from_secs(6))
        .build()
        .unwrap();
    let g = client.lock("repl:gone").unwrap();
    let lost = g.lost().receiver();
    replica.signal("STOP");
    let _: () = primary.connection().del("repl:gone").unwrap();
    // The next renewal (within a third of the lease) finds it gone.
    let why = lost.recv_timeout(Duration::from_secs(4));
    replica.signal("CONT");
    assert_eq!(why.ok(), Some(leasehold::LeaseLost::NotOurs));
}

#[test]
fn threads_of_one_client_do_not_hand_over_without_acknowledgement() {
    let primary = RedisServer::start();
    let _replica = RedisServer::start_replica_of(&primary);
    let client = replicated_client(&primary);
    let first = client.lock("repl:handoff").unwrap();
    let second = {
        let client = client.clone();
        thread::spawn(move || client.lock("repl:handoff").map(drop))
    };
    // It queues in the client.
    assert!(support::eventually(Duration::from_secs(5), || client
        .stats()
        .waiters_queued
        == 1));
    primary.reset_stats();
    first.unlock().unwrap();
    second.join().unwrap().unwrap();
    // The second thread took the lock with its own acquire and WAIT, not
    // inside the first one's release script.
    let calls = primary.command_calls();
    assert_eq!(calls.get("wait"), Some(&1), "{calls:?}");
    assert_eq!(client.stats().handoffs, 0);
}

#[test]
fn bad_replica_settings_are_refused() {
    for (n, timeout) in [(0, 100), (1, 0), (1, 3_000), (1, 5_000)] {
        let err = LockClient::builder("redis://127.0.0.1:1/")
            .replicas(n, Duration::from_millis(timeout))
            .build()
            .unwrap_err();
        assert!(matches!(err, Error::InvalidArgument { .. }), "{err}");
    }
}
