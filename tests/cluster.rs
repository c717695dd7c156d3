//! Redis Cluster: 3 primaries made with `redis-cli --cluster create` (with
//! replicas for the failover test): locks over every primary (and listed
//! from all of them by a client given one seed), mutual
//! exclusion across processes, sharded waiters not taken for other
//! libraries', 1,000 watchdog leases, a reshard of a slot
//! that holds a lock, and a primary failover (through which a parked
//! sharded waiter follows its slot and is woken by a Redisson unlock).

#[path = "child/holder.rs"]
mod child;
mod support;

use std::collections::HashSet;
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use leasehold::{Error, LockClient, LockOptions};
use redis::Commands;
use support::redisson::{prefix_name, Redisson};
use support::{check_history, eventually, sharded_pubsub, RedisCluster, RedisServer};

fn client(cluster: &RedisCluster, lease: Duration) -> LockClient {
    LockClient::cluster_builder(&cluster.urls())
        .watchdog_lease(lease)
        .build()
        .unwrap()
}

#[test]
fn locks_spread_over_every_primary_and_exclude_each_other_across_processes() {
    let cluster = RedisCluster::start(3, 0);
    let c = client(&cluster, Duration::from_secs(30));
    // Names over all three primaries; each lock's keys on its own node.
    let mut on = HashSet::new();
    let names: Vec<String> = (0..30).map(|i| format!("cl:spread:{i}")).collect();
    let guards: Vec<_> = names.iter().map(|n| c.lock(n).unwrap()).collect();
    for n in &names {
        let node = cluster.primary_of_slot(cluster.keyslot(n), 0);
        let exists: bool = cluster.nodes[node].connection().exists(n).unwrap();
        assert!(exists, "{n} on node {node}");
        on.insert(node);
    }
    assert_eq!(on.len(), 3, "names landed on every primary");
    // An operator's client given one seed lists the locks of all three
    // primaries, each once.
    let one_seed = LockClient::cluster_builder(&cluster.urls()[..1])
        .build()
        .unwrap();
    let listed: Vec<String> = one_seed
        .list("cl:spread:*", 10_000)
        .unwrap()
        .into_iter()
        .map(|info| info.name)
        .collect();
    let mut expected = names.clone();
    expected.sort();
    assert_eq!(listed, expected);
    drop(guards);
    // Fenced, fair and read/write locks run there too (their scripts touch
    // several keys of one slot).
    let f = c
        .lock_with("cl:fenced", LockOptions::new().fenced())
        .unwrap();
    assert!(f.fence().is_some());
    drop(f);
    c.fair_lock("cl:fair").unwrap().unlock().unwrap();
    let r = c.read_lock("cl:rw").unwrap();
    drop(r);
    c.write_lock("cl:rw").unwrap().unlock().unwrap();

    // Two processes × 2 threads over 4 names, records on a plain server.
    let records = RedisServer::start();
    let seeds = cluster.urls().join(",");
    let lock_names = "cl:x:a,cl:x:b,cl:x:c,cl:x:d";
    let children: Vec<_> = (0..2)
        .map(|p| {
            support::child_command(&[
                "check",
                &seeds,
                lock_names,
                "2",
                "250",
                &format!("p{p}"),
                "5000",
            ])
            .env("LEASEHOLD_RECORDS_URL", records.url())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start a checker process")
        })
        .collect();
    for child in children {
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "a checker process failed");
    }
    let names: Vec<&str> = lock_names.split(',').collect();
    let (finished, unfinished) = check_history(&mut records.connection(), &names, None);
    assert_eq!((finished, unfinished), (1_000, 0));
}

#[test]
fn the_watchdog_keeps_a_thousand_locks_over_every_primary_alive() {
    let cluster = RedisCluster::start(3, 0);
    // 3 s leases, renewed every second: two to spare on a loaded machine.
    let c = client(&cluster, Duration::from_secs(3));
    let guards: Vec<_> = (0..1_000)
        .map(|i| c.lock(&format!("cl:many:{i}")).unwrap())
        .collect();
    let before = c.stats();
    thread::sleep(Duration::from_millis(6_200)); // two leases and more
    let after = c.stats();
    assert!(guards.iter().all(|g| g.is_held()));
    assert_eq!(after.leases_lost, 0);
    for &p in &cluster.primaries() {
        let keys: usize = redis::cmd("DBSIZE")
            .query(&mut cluster.nodes[p].connection())
            .unwrap();
        assert!(keys > 200, "node {p} holds {keys} locks");
    }
    for g in guards.iter().step_by(97) {
        let node = cluster.primary_of_slot(cluster.keyslot(g.key()), 0);
        let ttl: i64 = cluster.nodes[node].connection().pttl(g.key()).unwrap();
        assert!(ttl > 0, "{} renewed: {ttl}", g.key());
    }
    // Batches per node: a round trip renews many leases (one per lease
    // would be 1,000 round trips a period). About 100 per round trip on an
    // idle machine, about 50 with both CPUs busy; 10 is the bound.
    let trips = after.renewal_round_trips - before.renewal_round_trips;
    let renewals = after.renewals_sent - before.renewals_sent;
    eprintln!("cluster: {renewals} renewals in {trips} round trips");
    // About six per lock in 6.2 s (one a second); half of that at least.
    assert!(renewals >= 3_000, "{renewals} renewals");
    assert!(
        trips * 10 <= renewals,
        "{trips} round trips for {renewals} renewals"
    );
    drop(guards);
    assert_eq!(c.stats().live_leases, 0);
}

#[test]
fn a_reshard_of_the_slot_of_a_held_lock_keeps_the_holder_and_the_waiter() {
    let cluster = RedisCluster::start(3, 0);
    let primaries = cluster.primaries();
    let (from, to) = (primaries[0], primaries[1]);
    // The slot redis-cli moves first is the lowest of the source node.
    let slot = cluster.first_slot_of(from);
    let name = support::name_in_slot(&cluster, slot, "cl:reshard:");
    let holder = client(&cluster, Duration::from_millis(1_500));
    let waiter_client = client(&cluster, Duration::from_secs(30));
    let g = holder.lock(&name).unwrap();
    let lost = g.lost().receiver();
    let waiter = {
        let (c, name) = (waiter_client.clone(), name.clone());
        thread::spawn(move || {
            c.lock(&name).map(|g| {
                drop(g);
                Instant::now()
            })
        })
    };
    assert!(eventually(Duration::from_secs(5), || waiter_client
        .stats()
        .waiters_parked
        == 1));

    let out = Command::new("redis-cli")
        .args([
            "--cluster",
            "reshard",
            &format!("127.0.0.1:{}", cluster.nodes[from].port()),
        ])
        .args(["--cluster-from", &cluster.node_id(from)])
        .args(["--cluster-to", &cluster.node_id(to)])
        .args(["--cluster-slots", "1", "--cluster-yes"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "reshard failed:\n{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(eventually(Duration::from_secs(10), || cluster
        .primary_of_slot(slot, from)
        == to
        && cluster.primary_of_slot(slot, to) == to));
    // The lock moved with its slot; renewals follow it there: one lands on
    // the new node (every 500 ms; without them the key would be gone there
    // within its 1.5 s lease and never renewed).
    assert!(
        support::renewed_in(
            &mut cluster.nodes[to].connection(),
            &name,
            Duration::from_secs(10)
        ),
        "renewed on the new node: {:?}",
        lost.try_recv()
    );
    assert!(g.is_held(), "{:?}", lost.try_recv());
    let released = Instant::now();
    g.unlock().unwrap();
    let got_in = waiter
        .join()
        .unwrap()
        .expect("the waiter after the reshard");
    assert!(
        got_in.duration_since(released) < Duration::from_secs(3),
        "the waiter took {:?}",
        got_in.duration_since(released)
    );
}

/// Sharded pub/sub (Redis 7, the default there): leasehold's waiters of a
/// leasehold holder hear only their grant channels, so `SHARDNUMSUB` of the
/// unlock channel — which a release reads to let other libraries' waiters
/// in — stays 0, and a contended name runs on grants with no yield to
/// waiters that are not there (before: 2 grants, then 20 ms for nobody,
/// ~10× fewer sections). Waiters of a Redisson holder do hear its unlock.
/// (On Redis 6.2, without sharded pub/sub, the same with classic.)
#[test]
fn sharded_waiters_of_leasehold_are_not_taken_for_other_libraries() {
    let cluster = RedisCluster::start(3, 0);
    let name = "cl:busy";
    let node = &cluster.nodes[cluster.primary_of_slot(cluster.keyslot(name), 0)];
    let channel = prefix_name("redisson_lock__channel", name);
    let listeners = || cluster.listeners(&channel, sharded_pubsub());
    let clients: Vec<LockClient> = (0..4)
        .map(|_| {
            LockClient::cluster_builder(&cluster.urls())
                .build()
                .unwrap()
        })
        .collect();
    let held = clients[0].lock(name).unwrap();
    for n in &cluster.nodes {
        n.reset_stats();
    }
    let rounds = 40;
    let workers: Vec<_> = clients[1..]
        .iter()
        .map(|c| {
            let c = c.clone();
            thread::spawn(move || {
                for _ in 0..rounds {
                    let g = c.lock(name).unwrap();
                    thread::sleep(Duration::from_micros(200));
                    g.unlock().unwrap();
                }
            })
        })
        .collect();
    assert!(eventually(Duration::from_secs(5), || {
        clients[1..].iter().all(|c| c.stats().waiters_parked == 1)
    }));
    assert_eq!(listeners(), 0, "leasehold waiters of a leasehold holder");
    drop(held);
    for w in workers {
        w.join().unwrap();
    }
    // Classic subscribers may be on any node.
    let subscribe = if sharded_pubsub() {
        "ssubscribe"
    } else {
        "subscribe"
    };
    let subscribes: u64 = cluster
        .nodes
        .iter()
        .map(|n| n.command_calls().get(subscribe).copied().unwrap_or(0))
        .sum();
    assert!(
        subscribes <= 3 * 2,
        "subscriptions are kept while a client keeps waiting: {subscribes} {subscribe}"
    );
    let calls = node.command_calls();
    assert_eq!(
        calls.get("psetex").copied().unwrap_or(0),
        0,
        "no yield marker: nobody else waited ({calls:?})"
    );

    // A Redisson holder: leasehold's waiters hear its unlock channel, and
    // get in when it lets go.
    let mut java = Redisson::new(&node.url(), sharded_pubsub());
    assert_eq!(java.try_lock(name, Duration::from_secs(30), 1), None);
    let waiters: Vec<_> = clients[1..]
        .iter()
        .map(|c| {
            let c = c.clone();
            thread::spawn(move || c.lock(name).map(drop))
        })
        .collect();
    assert!(
        eventually(Duration::from_secs(5), || listeners() == 3),
        "waiters of a Redisson holder hear its unlock"
    );
    assert_eq!(java.unlock(name, 1), Some(true));
    for w in waiters {
        w.join().unwrap().unwrap();
    }
}

#[test]
fn a_primary_failover_reports_lost_leases_and_new_locks_work() {
    let cluster = RedisCluster::start(3, 1);
    let victim = cluster.primaries()[0];
    let slot = cluster.first_slot_of(victim);
    let kept_name = support::name_in_slot(&cluster, slot, "cl:kept:");
    let doomed_name = support::name_in_slot(&cluster, slot, "cl:doomed:");
    // Acknowledged by the replica: survives. Deleted on the replica (as a
    // lost asynchronous write would be): lost.
    let safe = LockClient::cluster_builder(&cluster.urls())
        .watchdog_lease(Duration::from_secs(15))
        .replicas(1, Duration::from_millis(500))
        .socket_timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    let plain = LockClient::cluster_builder(&cluster.urls())
        .watchdog_lease(Duration::from_secs(3))
        .socket_timeout(Duration::from_secs(1))
        .connect_timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let replica = (0..cluster.nodes.len())
        .find(|&i| {
            let info: String = redis::cmd("INFO")
                .arg("replication")
                .query(&mut cluster.nodes[i].connection())
                .unwrap();
            info.contains("role:slave")
                && info.contains(&format!("master_port:{}", cluster.nodes[victim].port()))
        })
        .expect("the victim's replica");
    let kept = safe.lock(&kept_name).unwrap();
    // A Redisson client holds a name of the victim's slot (replicated), and
    // a leasehold waiter is parked on it, SSUBSCRIBEd on the victim
    // (Redis 6.2: SUBSCRIBEd on some node).
    // Its own hash tag puts it in the slot (no search).
    let java_name = format!("{{{kept_name}}}:java");
    let mut java = Redisson::new(&cluster.nodes[victim].url(), sharded_pubsub());
    // A lease that outlasts the failover by far (which may take half a
    // minute on a loaded machine).
    assert_eq!(java.try_lock(&java_name, Duration::from_secs(120), 1), None);
    let _: () = redis::cmd("WAIT")
        .arg(1)
        .arg(2_000)
        .query(&mut cluster.nodes[victim].connection())
        .unwrap();
    let java_waiter = {
        let (c, name) = (plain.clone(), java_name.clone());
        thread::spawn(move || drop(c.lock(&name).unwrap()))
    };
    assert!(eventually(Duration::from_secs(5), || plain
        .stats()
        .waiters_parked
        == 1));
    // The replica is paused while the doomed hold is taken, so it never
    // gets it (an asynchronous write lost in the failover).
    cluster.nodes[replica].signal("STOP");
    let doomed = plain.lock(&doomed_name).unwrap();
    let doomed_lost = doomed.lost().receiver();
    cluster.nodes[victim].signal("KILL");
    cluster.nodes[replica].signal("CONT");
    // The replica takes over the slots (node timeout 1 s + election).
    assert!(
        eventually(Duration::from_secs(30), || {
            cluster
                .slot_ranges(replica)
                .iter()
                .any(|(a, b, n)| *n == replica && (*a..=*b).contains(&slot))
        }),
        "the replica was not promoted"
    );
    let why = doomed_lost
        .recv_timeout(Duration::from_secs(15))
        .expect("the lost signal for the hold the new primary never had");
    assert!(!doomed.is_held(), "{why:?}");
    assert!(matches!(doomed.unlock(), Err(Error::NotHeld { .. })));
    // New locks in the failed-over slots work (waiting out the switch).
    let fresh = plain
        .try_lock_for(&doomed_name, Duration::from_secs(10))
        .unwrap()
        .expect("a new lock on the promoted replica");
    let exists: bool = cluster.nodes[replica]
        .connection()
        .exists(&doomed_name)
        .unwrap();
    assert!(exists);
    drop(fresh);
    // The acknowledged hold lives on, renewed on the new primary.
    assert!(kept.is_held());
    let ttl: i64 = cluster.nodes[replica]
        .connection()
        .pttl(&kept_name)
        .unwrap();
    assert!(ttl > 0, "{ttl}");
    kept.unlock().unwrap();
    // The parked waiter subscribed again on the promoted replica (sharded
    // pub/sub: its old subscriber's node is gone) and Redisson's SPUBLISH
    // there wakes it at once — not a retry, not the lease. (Classic,
    // on 6.2: subscribed on a live node, woken by the broadcast PUBLISH.)
    let channel = prefix_name("redisson_lock__channel", &java_name);
    assert!(
        eventually(Duration::from_secs(10), || if sharded_pubsub() {
            cluster.nodes[replica].listeners(&channel, true) == Some(1)
        } else {
            cluster.listeners(&channel, false) == 1
        }),
        "the waiter subscribed again on the promoted replica"
    );
    let mut java = Redisson::new(&cluster.nodes[replica].url(), sharded_pubsub());
    // Unlocked once the waiter parks again: it must get in woken by the
    // message (`Stats::woken_acquisitions`). One that did not hear the
    // unlock would get in at a retry of its own, when it next confirms its
    // place.
    assert!(eventually(Duration::from_secs(10), || plain
        .stats()
        .waiters_parked
        == 1));
    let woken = plain.stats().woken_acquisitions;
    assert_eq!(
        java.unlock(&java_name, 1),
        Some(true),
        "the hold was replicated"
    );
    java_waiter.join().unwrap();
    assert_eq!(
        plain.stats().woken_acquisitions - woken,
        1,
        "after the failover: woken by Redisson's unlock, not at a retry: {:?}",
        plain.stats()
    );
}

/// `ShardedPubSub::On` as an ACL user that may not run `PUBSUB
/// SHARDNUMSUB` (the probe): still sharded on a Redis 7 cluster — a refusal
/// is not a server without sharded pub/sub — so Redisson's `SPUBLISH` wakes
/// the waiter at once. On Redis 6.2, which does not know sharded pub/sub
/// (its refusal names no `shardnumsub`), classic, and Redisson's `PUBLISH`
/// wakes it. (And `acl_rules()` without a key prefix is a list Redis takes:
/// `~*` alone, no pattern after it.)
#[test]
fn sharded_pubsub_on_stays_sharded_when_the_probe_is_refused() {
    let cluster = RedisCluster::start(3, 0);
    let sharded = sharded_pubsub();
    let rules: Vec<String> = LockClient::cluster_builder(&cluster.urls())
        .build()
        .unwrap()
        .acl_rules()
        .into_iter()
        // (6.2 refuses the sharded commands' rules: it has no such commands.)
        .filter(|r| {
            r != "+pubsub|shardnumsub"
                && (sharded || !["+spublish", "+ssubscribe", "+sunsubscribe"].contains(&r.as_str()))
        })
        .collect();
    let mut urls = Vec::new();
    for node in &cluster.nodes {
        let mut acl = redis::cmd("ACL");
        acl.arg("SETUSER")
            .arg("noprobe")
            .arg("reset")
            .arg("on")
            .arg(">pw");
        acl.arg(&rules);
        let _: () = acl.query(&mut node.connection()).unwrap();
        urls.push(format!("redis://noprobe:pw@127.0.0.1:{}/", node.port()));
    }
    let client = LockClient::cluster_builder(&urls)
        .sharded_pubsub(leasehold::ShardedPubSub::On)
        .build()
        .unwrap();
    let name = "cl:noprobe";
    let node = &cluster.nodes[cluster.primary_of_slot(cluster.keyslot(name), 0)];
    let mut java = Redisson::new(&node.url(), sharded);
    assert_eq!(java.try_lock(name, Duration::from_secs(30), 1), None);
    let waiter = {
        let client = client.clone();
        thread::spawn(move || drop(client.lock(name).unwrap()))
    };
    let channel = prefix_name("redisson_lock__channel", name);
    assert!(
        eventually(Duration::from_secs(5), || cluster
            .listeners(&channel, sharded)
            == 1),
        "the waiter listens the way the server can (sharded: {sharded})"
    );
    // Unlocked once it parks: it must get in woken by the message
    // (`Stats::woken_acquisitions`); a waiter that did not hear the unlock
    // would get in at a retry of its own, when it next confirms its place.
    assert!(eventually(Duration::from_secs(5), || client
        .stats()
        .waiters_parked
        == 1));
    assert_eq!(java.unlock(name, 1), Some(true));
    waiter.join().unwrap();
    assert_eq!(
        client.stats().woken_acquisitions,
        1,
        "woken by the unlock, not at a retry: {:?}",
        client.stats()
    );
}

/// A renewal whose slot moved on (`MOVED` from the node the client knew)
/// and is moving again (`ASK` from the node it moved to) is renewed once
/// the client has followed, not taken for a lease that is not ours. Slot
/// `S` of a held lock moves from A to B, then starts moving on to C, the
/// key with it, between two renewals (every 2 s).
#[test]
fn a_renewal_redirected_twice_keeps_the_lease() {
    let cluster = RedisCluster::start(3, 0);
    let primaries = cluster.primaries();
    let (a, b, c) = (primaries[0], primaries[1], primaries[2]);
    let slot = cluster.first_slot_of(a);
    let name = support::name_in_slot(&cluster, slot, "cl:twice:");
    let holder = client(&cluster, Duration::from_secs(6));
    let g = holder.lock(&name).unwrap();
    let lost = g.lost().receiver();
    let setslot = |node: usize, how: &str, id: &str| {
        let _: () = redis::cmd("CLUSTER")
            .arg("SETSLOT")
            .arg(slot)
            .arg(how)
            .arg(id)
            .query(&mut cluster.nodes[node].connection())
            .unwrap();
    };
    let migrate = |from: usize, to: usize| {
        let _: () = redis::cmd("MIGRATE")
            .arg("127.0.0.1")
            .arg(cluster.nodes[to].port())
            .arg("")
            .arg(0)
            .arg(5_000)
            .arg("KEYS")
            .arg(&name)
            .query(&mut cluster.nodes[from].connection())
            .unwrap();
    };
    let (id_a, id_b, id_c) = (cluster.node_id(a), cluster.node_id(b), cluster.node_id(c));
    // A → B, done.
    setslot(b, "IMPORTING", &id_a);
    setslot(a, "MIGRATING", &id_b);
    migrate(a, b);
    for node in [b, a, c] {
        setslot(node, "NODE", &id_b);
    }
    // B → C, under way: the key is on C already.
    setslot(c, "IMPORTING", &id_b);
    setslot(b, "MIGRATING", &id_c);
    migrate(b, c);
    // Renewed on C (read there with ASKING, as the slot is importing).
    let mut on_c = cluster.nodes[c].connection();
    let mut pttl = || -> i64 {
        let (pttl,): (i64,) = redis::pipe()
            .cmd("ASKING")
            .ignore()
            .cmd("PTTL")
            .arg(&name)
            .query(&mut on_c)
            .unwrap();
        pttl
    };
    let mut lowest = i64::MAX;
    let renewed = eventually(Duration::from_secs(10), || {
        let now = pttl();
        let up = now > 0 && now > lowest;
        lowest = lowest.min(now);
        up
    });
    assert!(renewed, "not renewed on C: {:?}", lost.try_recv());
    assert!(g.is_held(), "{:?}", lost.try_recv());
    assert!(lost.try_recv().is_err());
}

/// A client whose socket timeout (15 s) is ten times the 1.5 s a bounded
/// wait below may take (a 40 s watchdog lease, as the builder requires).
fn slow_socket_client(cluster: &RedisCluster) -> LockClient {
    LockClient::cluster_builder(&cluster.urls())
        .watchdog_lease(Duration::from_secs(40))
        .socket_timeout(Duration::from_secs(15))
        .build()
        .unwrap()
}

/// A 300 ms wait for `name` while primary `paused` is stopped, past the
/// 100 ms in which the client reads the slot table at most once; asserts it
/// ended by its deadline, its last round trip, and a second for a loaded
/// machine (a read of the table from the paused node would take the 15 s
/// socket timeout more). Whether it got the lock.
fn bounded_wait_while_paused(
    cluster: &RedisCluster,
    paused: usize,
    client: &LockClient,
    name: &str,
) -> bool {
    cluster.nodes[paused].signal("STOP");
    thread::sleep(Duration::from_millis(200));
    let wait = Duration::from_millis(300);
    let started = Instant::now();
    let got = client.try_lock_for(name, wait);
    let took = started.elapsed();
    cluster.nodes[paused].signal("CONT");
    assert!(
        took < wait + Duration::from_millis(1_200),
        "returned {took:?} into a {wait:?} wait: {got:?}"
    );
    matches!(got, Ok(Some(_)))
}

/// A bounded wait on a key whose primary stopped answering (paused) ends by
/// its deadline: the read of the slot table the failure sets off is
/// bounded by what is left of the wait, not by the socket timeout (15 s
/// here, ten times the 1.5 s bound). The paused primary serves slot 0, so
/// it is the first node that read asks.
#[test]
fn a_bounded_wait_on_a_paused_primary_ends_by_its_deadline() {
    let cluster = RedisCluster::start(3, 0);
    let paused = cluster.primary_of_slot(0, 0);
    let name = support::name_in_slot(&cluster, 0, "cl:paused:");
    let client = slow_socket_client(&cluster);
    client.lock(&name).unwrap().unlock().unwrap(); // connected
    let got = bounded_wait_while_paused(&cluster, paused, &client, &name);
    assert!(!got, "the lock of a paused primary");
}

/// A bounded wait whose slot moved (`MOVED` from the node the client knew)
/// ends by its deadline while another primary is paused: the read of the
/// slot table the redirect sets off is bounded by what is left of the
/// wait, not by the socket timeout (15 s here, ten times the 1.5 s bound).
/// The paused primary serves slot 0, so it is the first node that read
/// asks.
#[test]
fn a_bounded_wait_whose_slot_moved_ends_by_its_deadline() {
    let cluster = RedisCluster::start(3, 0);
    let paused = cluster.primary_of_slot(0, 0);
    let others: Vec<usize> = (cluster.primaries().into_iter())
        .filter(|&p| p != paused)
        .collect();
    let (from, to) = (others[0], others[1]);
    let slot = cluster.first_slot_of(from);
    let name = support::name_in_slot(&cluster, slot, "cl:moved:");
    let client = slow_socket_client(&cluster);
    client.lock(&name).unwrap().unlock().unwrap(); // the table read
                                                   // The slot (empty now) moves to another primary; every node knows.
    let id = cluster.node_id(to);
    for node in [to, from, paused] {
        let _: () = redis::cmd("CLUSTER")
            .arg("SETSLOT")
            .arg(slot)
            .arg("NODE")
            .arg(&id)
            .query(&mut cluster.nodes[node].connection())
            .unwrap();
    }
    bounded_wait_while_paused(&cluster, paused, &client, &name);
}

/// A script whose connection closed after it went out (it may have run:
/// the server ran it, then closed) is not sent again to the slot's new
/// primary, even when the table read after the error names another one (a
/// reshard, a failover meanwhile): a reentrant hold's release run on both
/// frees the lock its outer guard still holds. Primary P is announced at a
/// fault proxy, which holds the release's reply while the slot, the lock's
/// key with it, moves to Q, then cuts it.
#[test]
fn a_release_that_may_have_run_is_not_sent_again_to_the_slots_new_primary() {
    use support::proxy::{Fault, FaultProxy};
    let cluster = RedisCluster::start(3, 0);
    let primaries = cluster.primaries();
    let (p, q) = (primaries[0], primaries[1]);
    let slot = cluster.first_slot_of(p);
    let name = support::name_in_slot(&cluster, slot, "cl:sent:");
    let proxy = FaultProxy::start(cluster.nodes[p].port());
    let _: () = redis::cmd("CONFIG")
        .arg(&["SET", "cluster-announce-port"])
        .arg(proxy.port())
        .query(&mut cluster.nodes[p].connection())
        .unwrap();
    let announced = |node: usize| {
        let slots: redis::Value = redis::cmd("CLUSTER")
            .arg("SLOTS")
            .query(&mut cluster.nodes[node].connection())
            .unwrap();
        format!("{slots:?}").contains(&format!("int({})", proxy.port()))
    };
    // The other nodes learn it by gossip (P itself lists its own port on
    // Redis 6.2, where the setting is read at start-up: the client is not
    // given P to ask).
    let others: Vec<usize> = (0..cluster.nodes.len()).filter(|&n| n != p).collect();
    assert!(
        eventually(Duration::from_secs(20), || others
            .iter()
            .all(|&n| announced(n))),
        "the nodes did not learn P's announced port"
    );
    let seeds: Vec<String> = others.iter().map(|&n| cluster.nodes[n].url()).collect();
    let client = LockClient::cluster_builder(&seeds)
        .watchdog_lease(Duration::from_secs(30))
        .build()
        .unwrap();
    let other = client_of(&cluster);
    // The scripts loaded (a cut `NOSCRIPT` would be no run at all).
    let warm = client.lock(&name).unwrap();
    client.lock(&name).unwrap().unlock().unwrap();
    warm.unlock().unwrap();
    let outer = client.lock(&name).unwrap();
    let inner = client.lock(&name).unwrap(); // reentrant: 2 in Redis
    assert!(
        proxy.connections() > 0,
        "the client does not go through the proxy"
    );
    proxy.set(Fault::CutReplyTo(leak(&name), Duration::from_millis(1_500)));
    let mover = {
        let (name, ids) = (name.clone(), (cluster.node_id(p), cluster.node_id(q)));
        let ports: Vec<u16> = cluster.nodes.iter().map(|n| n.port()).collect();
        thread::spawn(move || {
            // The release has run on P (its reply held at the proxy).
            thread::sleep(Duration::from_millis(500));
            let con = |node: usize| {
                redis::Client::open(format!("redis://127.0.0.1:{}/", ports[node]))
                    .unwrap()
                    .get_connection()
                    .unwrap()
            };
            let setslot = |node: usize, how: &str, id: &str| {
                let _: () = redis::cmd("CLUSTER")
                    .arg("SETSLOT")
                    .arg(slot)
                    .arg(how)
                    .arg(id)
                    .query(&mut con(node))
                    .unwrap();
            };
            setslot(q, "IMPORTING", &ids.0);
            setslot(p, "MIGRATING", &ids.1);
            let _: () = redis::cmd("MIGRATE")
                .arg("127.0.0.1")
                .arg(ports[q])
                .arg("")
                .arg(0)
                .arg(5_000)
                .arg("KEYS")
                .arg(&name)
                .query(&mut con(p))
                .unwrap();
            for node in 0..ports.len() {
                setslot(node, "NODE", &ids.1);
            }
        })
    };
    let released = inner.unlock();
    mover.join().unwrap();
    // It ran once, on P, and moved to Q with the key: the outer guard's
    // hold is there, and nobody else gets in.
    let count: Vec<String> = cluster.nodes[q].connection().hvals(&name).unwrap();
    assert_eq!(
        count,
        ["1"],
        "the reentrant release ran twice ({released:?})"
    );
    assert!(other.try_lock(&name).unwrap().is_none());
    assert!(
        released.is_err(),
        "the release's reply was cut: {released:?}"
    );
    outer.unlock().unwrap();
}

fn client_of(cluster: &RedisCluster) -> LockClient {
    client(cluster, Duration::from_secs(30))
}

/// A name for the proxy's fault, which keeps it for the test's life.
fn leak(name: &str) -> &'static str {
    Box::leak(name.to_owned().into_boxed_str())
}

/// One stopped primary holds up no other node's renewals: the renewal
/// thread sends every node's batch before it reads any reply, reads the
/// slot table from the others first after the stopped one failed, and
/// writes the client's registration within a round. A lease on each of
/// three primaries (6 s, renewed every 2 s; 2 s socket timeout), the
/// primary that keeps the registration stopped: the two leases on running
/// primaries never run out in Redis. (A round once waited the stopped
/// node's socket timeout and then a read of the table from it, in turn
/// with the others; then the registration's write waited as long: a
/// running node's lease went 5.7 s without renewal: with 5 s leases the
/// test failed there, 2 of 2. At 5 s it also failed once in four loaded
/// runs with the fix, on Redis 6.2: the thread still reads the nodes'
/// replies in turn, a socket timeout for the stopped one each round. At
/// 6 s, the margin is 2 s.)
#[test]
fn a_stopped_primary_holds_up_no_other_nodes_renewals() {
    let cluster = RedisCluster::start(3, 0);
    let client = LockClient::cluster_builder(&cluster.urls())
        .watchdog_lease(Duration::from_secs(6))
        .socket_timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    let names: Vec<(usize, String)> = cluster
        .primaries()
        .into_iter()
        .map(|p| {
            let slot = cluster.first_slot_of(p);
            (p, support::name_in_slot(&cluster, slot, "cl:stall:"))
        })
        .collect();
    // The running nodes go on serving their slots once the stopped one is
    // found failed (after the 1 s node timeout).
    for node in &cluster.nodes {
        let _: () = redis::cmd("CONFIG")
            .arg(&["SET", "cluster-require-full-coverage", "no"])
            .query(&mut node.connection())
            .unwrap();
    }
    // The node stopped is the one that keeps the client's registration,
    // which the thread writes too (the first lock has it written).
    let warm = client.lock("cl:stall:warm").unwrap();
    let registered = |node: usize| {
        let keys: Vec<String> = cluster.nodes[node]
            .connection()
            .keys("leasehold_client:*")
            .unwrap();
        !keys.is_empty()
    };
    let mut stopped = None;
    assert!(
        eventually(Duration::from_secs(10), || {
            stopped = cluster.primaries().into_iter().find(|&p| registered(p));
            stopped.is_some()
        }),
        "the client's registration was not written"
    );
    let stopped = stopped.unwrap();
    warm.unlock().unwrap();
    // Its lease first, the others' a moment later: not in its round.
    let first = names.iter().position(|(p, _)| *p == stopped).unwrap();
    let mut guards: Vec<_> = vec![client.lock(&names[first].1).unwrap()];
    thread::sleep(Duration::from_millis(400));
    for (i, (_, name)) in names.iter().enumerate() {
        if i != first {
            guards.push(client.lock(name).unwrap());
        }
    }
    cluster.nodes[stopped].signal("STOP");
    let running: Vec<(usize, &String)> = (names.iter())
        .filter(|(p, _)| *p != stopped)
        .map(|(p, n)| (*p, n))
        .collect();
    let mut cons: Vec<_> = running
        .iter()
        .map(|(p, _)| cluster.nodes[*p].connection())
        .collect();
    let started = Instant::now();
    let mut lowest = i64::MAX;
    while started.elapsed() < Duration::from_secs(12) {
        for ((_, name), con) in running.iter().zip(cons.iter_mut()) {
            let pttl: i64 = con.pttl(name.as_str()).unwrap();
            lowest = lowest.min(pttl);
        }
        thread::sleep(Duration::from_millis(100));
    }
    cluster.nodes[stopped].signal("CONT");
    assert!(
        lowest > 0,
        "a lease on a running primary ran out in Redis (lowest PTTL {lowest} ms)"
    );
    for g in &guards[1..] {
        assert!(g.is_held(), "{g:?}");
    }
}
