//! For people on call: `inspect` shows every kind's holders and waiters with
//! the clients they belong to (host, pid, name from each client's
//! registration), counts, the lease left and the fencing counter; a killed
//! process's registration expires by itself.

#[path = "child/holder.rs"]
mod child;
mod support;

use std::thread;
use std::time::Duration;

use leasehold::{HoldMode, LockClient, LockInfo, LockKind, LockOptions, WaitQueue};
use redis::Commands;
use support::{eventually, ChildProcess, RedisServer};

fn named(server: &RedisServer, name: &str) -> LockClient {
    LockClient::builder(&server.url())
        .key_prefix("ops:")
        .client_name(name)
        .build()
        .unwrap()
}

/// Client names of the holders, then of the waiters (`?` when unknown).
fn who(info: &LockInfo) -> (Vec<String>, Vec<(String, WaitQueue)>) {
    let name = |c: &Option<leasehold::ClientInfo>| {
        c.as_ref()
            .and_then(|c| c.name.clone())
            .unwrap_or_else(|| "?".into())
    };
    let mut holders: Vec<String> = info.holders.iter().map(|h| name(&h.client)).collect();
    holders.sort();
    let waiters = info
        .waiters
        .iter()
        .map(|w| (name(&w.client), w.queue))
        .collect();
    (holders, waiters)
}

/// `inspect` of `name` once every holder and waiter it lists is named: a
/// client's registration is written by its renewal thread, a moment after
/// the attempt that made it a waiter (never on the lock path), so it is
/// waited for here (at most 5 s).
fn inspect_named(client: &LockClient, name: &str) -> LockInfo {
    let mut info = client.inspect(name).unwrap();
    eventually(Duration::from_secs(5), || {
        info = client.inspect(name).unwrap();
        let (holders, waiters) = who(&info);
        !holders
            .iter()
            .chain(waiters.iter().map(|w| &w.0))
            .any(|n| n == "?")
    });
    info
}

/// Starts `n` threads of `client` waiting for `name` with `options`, once
/// each is parked; they take it, and give it back, when it is freed.
fn wait_for(
    client: &LockClient,
    name: &'static str,
    options: LockOptions,
) -> thread::JoinHandle<()> {
    let parked = client.stats().waiters_parked;
    let c = client.clone();
    let t = thread::spawn(move || c.lock_with(name, options).unwrap().unlock().unwrap());
    assert!(eventually(Duration::from_secs(5), || client
        .stats()
        .waiters_parked
        > parked));
    t
}

#[test]
fn inspect_names_the_holders_and_waiters_of_every_kind_and_their_clients() {
    let server = RedisServer::start();
    let (a, b, c) = (
        named(&server, "worker-a"),
        named(&server, "worker-b"),
        named(&server, "worker-c"),
    );
    assert_eq!(a.inspect("insp:plain").unwrap().kind, LockKind::Free);

    // Plain, reentrant (2 holds), one client waiting in line.
    let g1 = a.lock("insp:plain").unwrap();
    let g2 = a.lock("insp:plain").unwrap();
    let waiter = wait_for(&b, "insp:plain", LockOptions::new());
    let info = inspect_named(&a, "insp:plain");
    assert_eq!(info.kind, LockKind::Exclusive);
    assert_eq!(info.key, "ops:insp:plain");
    assert_eq!(info.holders.len(), 1, "{info:?}");
    let h = &info.holders[0];
    assert_eq!((h.holds, h.mode), (2, HoldMode::Exclusive));
    assert!(h.thread.is_some());
    let client = h.client.as_ref().expect("the holder's client is known");
    assert_eq!(client.name.as_deref(), Some("worker-a"));
    assert_eq!(client.pid, Some(std::process::id()));
    assert!(!client.host.is_empty());
    assert!(client.to_string().starts_with("worker-a on "), "{client}");
    assert!(
        info.ttl.is_some_and(|t| t > Duration::from_secs(20)),
        "{info:?}"
    );
    assert_eq!(who(&info).1, [("worker-b".to_owned(), WaitQueue::Line)]);
    drop((g2, g1));
    waiter.join().unwrap();

    // Fair, two queued in order.
    let g = a.fair_lock("insp:fair").unwrap();
    let w1 = wait_for(&b, "insp:fair", LockOptions::new().fair());
    let w2 = wait_for(&c, "insp:fair", LockOptions::new().fair());
    let info = inspect_named(&a, "insp:fair");
    assert_eq!(who(&info).0, ["worker-a"]);
    assert_eq!(
        who(&info).1,
        [
            ("worker-b".to_owned(), WaitQueue::Fair),
            ("worker-c".to_owned(), WaitQueue::Fair)
        ]
    );
    drop(g);
    w1.join().unwrap();
    w2.join().unwrap();

    // Two readers of two clients, a writer waiting.
    let r1 = a.read_lock("insp:rw").unwrap();
    let r2 = b.read_lock("insp:rw").unwrap();
    let writer = wait_for(&c, "insp:rw", LockOptions::new().write());
    let info = inspect_named(&a, "insp:rw");
    assert_eq!(info.kind, LockKind::ReadWrite);
    assert_eq!(who(&info).0, ["worker-a", "worker-b"]);
    assert!(info
        .holders
        .iter()
        .all(|h| h.mode == HoldMode::Read && h.holds == 1));
    assert_eq!(who(&info).1, [("worker-c".to_owned(), WaitQueue::Writers)]);
    drop((r1, r2));
    writer.join().unwrap();

    // A writer.
    let w = b.write_lock("insp:rw").unwrap();
    let info = inspect_named(&a, "insp:rw");
    assert_eq!(who(&info).0, ["worker-b"]);
    assert_eq!(info.holders[0].mode, HoldMode::Write);
    drop(w);

    // Fenced: the token counter.
    let f = c
        .lock_with("insp:fenced", LockOptions::new().fenced())
        .unwrap();
    let info = inspect_named(&a, "insp:fenced");
    assert_eq!(info.fence, f.fence());
    assert_eq!(who(&info).0, ["worker-c"]);
    drop(f);
    assert!(!a.is_locked("insp:fenced").unwrap());
}

/// A process holding a lock is named by its registration (its own pid);
/// killed, its lock and its registration expire by themselves.
#[test]
fn a_killed_processes_registration_expires() {
    let server = RedisServer::start();
    let mut holder = ChildProcess::start(&[&server.url(), "insp:child", "1500"]);
    assert!(holder.line().starts_with("held"));
    let ops = LockClient::new(&server.url()).unwrap();
    let mut known = None;
    assert!(eventually(Duration::from_secs(5), || {
        known = ops.inspect("insp:child").unwrap().holders[0].client.clone();
        known.is_some()
    }));
    let client = known.unwrap();
    assert_eq!(client.name.as_deref(), Some("child-insp:child"));
    assert_ne!(client.pid, Some(std::process::id()));
    let key = format!("leasehold_client:{}", client.id);
    let mut con = server.connection();
    assert!(con.exists::<_, bool>(&key).unwrap());
    holder.kill();
    assert!(
        eventually(Duration::from_secs(10), || !con
            .exists::<_, bool>(&key)
            .unwrap()),
        "the registration of a killed process expires"
    );
    assert!(!ops.is_locked("insp:child").unwrap(), "and so did its lock");
}

/// `list`: every kind of lock under the client's prefix, a Redisson-written
/// lock too, with its holders' clients named; not the application's own
/// hashes under the prefix, not leasehold's registrations, not locks under
/// another prefix; `pattern` narrows it; a free lock is gone from it.
#[test]
fn list_shows_every_kind_of_lock_under_the_prefix_and_nothing_else() {
    let server = RedisServer::start();
    let ops = named(&server, "lister");
    let other_prefix = LockClient::builder(&server.url())
        .key_prefix("elsewhere:")
        .build()
        .unwrap();
    let plain = ops.lock("order:pay").unwrap();
    // Its client's registration is written a moment later (see
    // `inspect_named`).
    inspect_named(&ops, "order:pay");
    let _fair = ops.fair_lock("order:ship").unwrap();
    let _read = ops.read_lock("catalog").unwrap();
    let _elsewhere = other_prefix.lock("order:pay").unwrap();
    let mut con = server.connection();
    // A lock as Redisson writes it, and a hash of the application's.
    let _: () = con
        .hset(
            "ops:java:nightly",
            "5f0c8a52-0000-4000-8000-000000000001:1",
            1,
        )
        .unwrap();
    let _: () = con.hset("ops:user:1", "name", "bob").unwrap();

    let names = |pattern: &str| -> Vec<(String, LockKind)> {
        ops.list(pattern, 10_000)
            .unwrap()
            .into_iter()
            .map(|info| (info.name, info.kind))
            .collect()
    };
    assert_eq!(
        names("*"),
        [
            ("catalog".to_owned(), LockKind::ReadWrite),
            ("java:nightly".to_owned(), LockKind::Exclusive),
            ("order:pay".to_owned(), LockKind::Exclusive),
            ("order:ship".to_owned(), LockKind::Exclusive),
        ]
    );
    assert_eq!(names("order:*").len(), 2);
    let listed = ops.list("order:pay", 10).unwrap();
    assert_eq!(who(&listed[0]).0, ["lister"], "holders named: {listed:?}");
    drop(plain);
    assert_eq!(names("order:*").len(), 1, "a released lock is not listed");
}

/// `list` reads each client's registration once, however many of the
/// listed locks its threads hold or wait for (it read it again for every
/// lock: a round trip per lock more than needed).
#[test]
fn list_reads_each_clients_registration_once() {
    let server = RedisServer::start();
    let ops = named(&server, "many");
    let guards: Vec<_> = (0..20)
        .map(|i| ops.lock(&format!("batch:{i}")).unwrap())
        .collect();
    // Its registration is written a moment later (see `inspect_named`).
    inspect_named(&ops, "batch:0");
    server.reset_stats();
    let listed = ops.list("batch:*", 10_000).unwrap();
    assert_eq!(listed.len(), guards.len());
    assert!(
        listed.iter().all(|info| who(info).0 == ["many"]),
        "every holder named: {listed:?}"
    );
    // Two HGETALLs per lock (its shape checked, then read), one for the
    // one client (it was one per lock: 3 per lock in all).
    let calls = server.command_calls();
    let locks = guards.len() as u64;
    assert_eq!(calls.get("hgetall"), Some(&(2 * locks + 1)), "{calls:?}");
}

/// `list` reads each lock in one script: what the key is and everything an
/// operator sees of it, in one round trip and at one moment. (It checked
/// the key's shape, then read the lock in a pipeline: two round trips a
/// lock, and three for a job's.) For 20 locks and a running job: one
/// `EVALSHA` each, beside the `SCAN`s and the one read of the client's
/// registration — and one for that registration's own key, a hash that
/// `*` matches too (read, and left out: no lock).
#[test]
fn list_reads_each_lock_in_one_round_trip() {
    let server = RedisServer::start();
    let ops = named(&server, "one-trip");
    // Explicit leases: no renewal is sent while the commands are counted.
    let lease = LockOptions::new().lease(Duration::from_secs(60));
    let guards: Vec<_> = (0..20)
        .map(|i| ops.lock_with(&format!("batch:{i}"), lease.clone()).unwrap())
        .collect();
    inspect_named(&ops, "batch:0");
    let run = ops.job("nightly").run(|| {
        let monitor = support::Monitor::start(&server);
        let listed = ops.list("*", 10_000).unwrap();
        // The renewal thread's writes of the registration (every 2 s while
        // the client is active) are off the list's path.
        let sent = monitor.client_commands();
        (listed, sent)
    });
    let Ok(leasehold::JobRun::Ran((listed, sent))) = run else {
        panic!("the job ran: {run:?}");
    };
    assert_eq!(listed.len(), guards.len() + 1, "{listed:?}");
    assert_eq!(
        listed.iter().filter(|l| l.kind == LockKind::Job).count(),
        1,
        "{listed:?}"
    );
    let mut sent: Vec<_> = sent
        .into_iter()
        .filter(|c| !["scan", "hset", "pexpire"].contains(&c.as_str()))
        .collect();
    sent.sort();
    let mut expected = vec!["evalsha"; listed.len() + 1];
    expected.push("hgetall");
    assert_eq!(sent, expected, "a script per lock, a read per client");
}
