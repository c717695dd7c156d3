//! A Sentinel-managed primary: 1 primary, 1 replica, 3 Sentinels, all
//! started here, every one of them requiring a password (the primary and
//! replica one, the Sentinels another), as managed deployments do. `SENTINEL FAILOVER` moves the primary; the client follows,
//! errors during the switch are typed, a hold the replica had survives, a
//! hold it did not have is reported lost, and a parked waiter gets it.

mod support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use leasehold::{Error, LockClient};
use redis::Commands;
use support::{eventually, RedisServer};

const MASTER: &str = "leasehold-master";
const PRIMARY_PASSWORD: &str = "pr1mary";
/// The locks live in this database (`sentinel_primary_db`).
const DB: i64 = 2;

fn in_db(server: &RedisServer) -> redis::Connection {
    let mut con = server.connection();
    let _: () = redis::cmd("SELECT").arg(DB).query(&mut con).unwrap();
    con
}

fn master_port(sentinel: &RedisServer) -> u16 {
    let addr: Vec<String> = redis::cmd("SENTINEL")
        .arg("GET-MASTER-ADDR-BY-NAME")
        .arg(MASTER)
        .query(&mut sentinel.connection())
        .unwrap();
    addr[1].parse().unwrap()
}

#[test]
fn the_client_follows_a_failover_and_reports_what_it_lost() {
    // Both passwords, as a managed primary has them: demoted, it
    // authenticates to the new primary and replicates again, so the
    // acknowledged hold's renewals are acknowledged again there.
    let pw = PRIMARY_PASSWORD;
    let primary = RedisServer::start_with(&["--requirepass", pw, "--masterauth", pw], Some(pw));
    let replica = RedisServer::start_replica_of(&primary);
    let sentinels: Vec<RedisServer> = (0..3)
        .map(|_| RedisServer::start_sentinel_with_password(&primary, MASTER, Some("s3ntinel")))
        .collect();
    // The Sentinels' URLs carry their password; without the primary's, the
    // client cannot lock, and says why.
    assert!(sentinels.iter().all(|s| s.url().contains(":s3ntinel@")));
    let urls: Vec<String> = sentinels.iter().map(|s| s.url()).collect();
    // The Sentinels must know the replica (and reach it) before they can
    // fail over to it.
    assert!(eventually(Duration::from_secs(20), || {
        let replicas: Vec<Vec<String>> = redis::cmd("SENTINEL")
            .arg("REPLICAS")
            .arg(MASTER)
            .query(&mut sentinels[0].connection())
            .unwrap();
        replicas.iter().any(|fields| {
            fields
                .chunks(2)
                .any(|kv| kv[0] == "flags" && kv.get(1).map(String::as_str) == Some("slave"))
        })
    }));
    // The doomed hold's client renews every second (its loss shows soon);
    // the acknowledged hold's lease (the default 30 s) outlasts the switch:
    // its renewals count only once acknowledged, and the new primary has
    // no replica until the Sentinels demote the old one (about 10 s here)
    // and it has synced.
    let build = |replicated: bool| {
        let mut b = LockClient::sentinel_builder(&urls, MASTER)
            .sentinel_primary_auth(None, PRIMARY_PASSWORD)
            .sentinel_primary_db(DB)
            .watchdog_lease(Duration::from_secs(3))
            .connect_timeout(Duration::from_secs(10))
            .socket_timeout(Duration::from_secs(1));
        if replicated {
            b = b
                .replicas(1, Duration::from_millis(500))
                .watchdog_lease(Duration::from_secs(30));
        }
        b.build().unwrap()
    };
    let no_primary_password = LockClient::sentinel_builder(&urls, MASTER)
        .connect_timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    let e = no_primary_password.lock("s:nopass").unwrap_err();
    assert!(e.is_auth(), "{e:?}");
    assert!(e.to_string().contains("sentinel_primary_auth"), "{e}");
    let safe = build(true);
    let plain = build(false);
    let waiter_client = build(false);

    // Acknowledged by the replica: survives the failover. (A replica
    // starved of CPU — a loaded machine — may miss the 500 ms for its
    // acknowledgement once: the lock is given back then, and taken again.)
    let kept = (0..5)
        .find_map(|_| match safe.lock("s:kept") {
            Ok(kept) => Some(kept),
            Err(e @ leasehold::Error::NotReplicated { .. }) => {
                eprintln!("not acknowledged in time, taken again: {e}");
                None
            }
            Err(e) => panic!("{e:?}"),
        })
        .expect("acknowledged by the replica within five tries");
    // Not on the replica (we delete it there, as an asynchronous
    // replication that lost the write would): lost in the failover.
    let doomed = plain.lock("s:lost").unwrap();
    let doomed_lost = doomed.lost().receiver();
    let mut on_replica = in_db(&replica);
    assert!(eventually(Duration::from_secs(5), || on_replica
        .exists::<_, bool>("s:lost")
        .unwrap()));
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("replica-read-only")
        .arg("no")
        .query(&mut on_replica)
        .unwrap();
    let _: () = on_replica.del("s:lost").unwrap();
    // A waiter parked on the doomed lock.
    let waiter = {
        let c = waiter_client.clone();
        thread::spawn(move || c.lock("s:lost").map(drop))
    };
    assert!(eventually(Duration::from_secs(5), || waiter_client
        .stats()
        .waiters_parked
        == 1));

    // Locks keep being taken through the switch; every error is typed.
    let stop = Arc::new(AtomicBool::new(false));
    let errors = Arc::new(Mutex::new(Vec::new()));
    let prober = {
        let (c, stop, errors) = (plain.clone(), stop.clone(), errors.clone());
        thread::spawn(move || {
            let mut ok = 0;
            while !stop.load(Ordering::SeqCst) {
                match c.try_lock("s:probe") {
                    Ok(g) => {
                        ok += usize::from(g.is_some());
                    }
                    Err(e) => errors.lock().unwrap().push(e),
                }
                thread::sleep(Duration::from_millis(20));
            }
            ok
        })
    };

    // A Sentinel may still call the replica unsuitable for a moment (it
    // wants a recent INFO and PING from it): ask again until it starts.
    let mut refused = String::new();
    assert!(
        eventually(Duration::from_secs(20), || {
            match redis::cmd("SENTINEL")
                .arg("FAILOVER")
                .arg(MASTER)
                .query::<String>(&mut sentinels[0].connection())
            {
                Ok(_) => true,
                Err(e) => {
                    refused = e.to_string();
                    false
                }
            }
        }),
        "SENTINEL FAILOVER kept failing: {refused}"
    );
    assert!(
        eventually(Duration::from_secs(30), || master_port(&sentinels[0])
            == replica.port()),
        "the Sentinels did not promote the replica"
    );

    // The waiter gets the lost lock on the new primary …
    waiter
        .join()
        .unwrap()
        .expect("the waiter after the failover");
    // … its old holder is told …
    let why = doomed_lost
        .recv_timeout(Duration::from_secs(10))
        .expect("the lost signal for the hold the new primary never had");
    assert!(!doomed.is_held(), "{why:?}");
    assert!(matches!(doomed.unlock(), Err(Error::NotHeld { .. })));
    // … and the acknowledged hold lives on, renewed on the new primary
    // (each renewal acknowledged by the old primary, its replica now).
    thread::sleep(Duration::from_secs(2));
    assert!(kept.is_held());
    let mut on_new_primary = in_db(&replica);
    let ttl: i64 = on_new_primary.pttl("s:kept").unwrap();
    assert!(ttl > 0, "renewed on the new primary: {ttl}");
    let after = plain.lock("s:after").unwrap();
    assert!(on_new_primary.exists::<_, bool>("s:after").unwrap());
    drop(after);
    kept.unlock().unwrap();

    stop.store(true, Ordering::SeqCst);
    let ok = prober.join().unwrap();
    assert!(ok > 0);
    for e in errors.lock().unwrap().iter() {
        assert!(
            e.is_connection() || matches!(e, Error::ReadOnlyReplica { .. }),
            "an untyped error during the switch: {e:?}"
        );
    }
}

/// A Sentinel that stopped answering (paused, hung) holds up no lookup of
/// the primary: each question to a Sentinel is bounded by the connect and
/// socket timeouts, and the next Sentinel is asked. (The `redis` crate's
/// Sentinel client asks with no timeout at all: a lock that needed a new
/// connection waited for the paused Sentinel forever, and so did the
/// renewal thread, whose leases were then neither renewed nor reported
/// lost.)
#[test]
fn a_paused_sentinel_holds_up_no_lookup_of_the_primary() {
    let primary = RedisServer::start();
    let sentinels: Vec<RedisServer> = (0..2)
        .map(|_| RedisServer::start_sentinel(&primary, MASTER))
        .collect();
    let urls: Vec<String> = sentinels.iter().map(|s| s.url()).collect();
    let client = LockClient::sentinel_builder(&urls, MASTER)
        .connect_timeout(Duration::from_secs(2))
        .socket_timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    client.lock("s:before").unwrap().unlock().unwrap();
    sentinels[0].signal("STOP");
    // Every connection of the client to the primary goes: the next lock
    // needs a new one, found through the Sentinels.
    let _: () = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("normal")
        .query(&mut primary.connection())
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let locking = {
        let client = client.clone();
        thread::spawn(move || {
            let _ = tx.send(client.lock("s:after").map(|g| g.unlock()));
        })
    };
    let got = rx.recv_timeout(Duration::from_secs(15));
    sentinels[0].signal("CONT");
    let got = got.expect("a lock waited more than 15 s for a paused Sentinel");
    assert!(matches!(got, Ok(Ok(()))), "{got:?}");
    locking.join().unwrap();
}

/// The Sentinels' URLs give the Sentinels' address and credentials only: a
/// database number in them (`/2`) is not sent to a Sentinel, which has
/// none (the primary's comes from `sentinel_primary_db`). A Sentinel that
/// refuses the credentials (its password changed first, in a rolling
/// change) is passed over for the next one: only the primary's refusal
/// ends a lookup.
#[test]
fn the_sentinel_urls_give_address_and_credentials_and_a_refusing_sentinel_is_passed_over() {
    let primary = RedisServer::start();
    let sentinels: Vec<RedisServer> = ["n3w", "s3ntinel", "s3ntinel"]
        .into_iter()
        .map(|pw| RedisServer::start_sentinel_with_password(&primary, MASTER, Some(pw)))
        .collect();
    let urls: Vec<String> = sentinels
        .iter()
        .map(|s| format!("redis://:s3ntinel@127.0.0.1:{}/2", s.port()))
        .collect();
    let client = LockClient::sentinel_builder(&urls, MASTER)
        .connect_timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    let got = client.lock("s:urls").map(|g| g.unlock());
    assert!(matches!(got, Ok(Ok(()))), "{got:?}");
}
