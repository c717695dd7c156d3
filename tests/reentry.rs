//! Reentrant holds with leases that differ, for every reentrant kind (plain,
//! fenced, fair, read, write): a re-entry never shortens the lease another
//! guard of the owner counts on, and whatever Redis holds, every guard's
//! view of its lease (`remaining()`, `is_held()`) is no longer than it —
//! through the re-entry, the watchdog's renewals, and the release of either
//! guard first.
//!
//! The check compares what Redis says with what each guard says at the
//! same moment (Redis read first, the guard after: a guard whose view
//! outlives Redis's key fails it by seconds, not by scheduling noise).

mod support;

use std::thread;
use std::time::{Duration, Instant};

use leasehold::{LockClient, LockGuard, LockOptions};
use redis::Commands;
use support::RedisServer;

/// The client's watchdog lease: renewed every second.
const WATCHDOG: Duration = Duration::from_secs(3);
/// An explicit lease shorter than the watchdog's.
const SHORT: Duration = Duration::from_millis(1_500);
/// An explicit lease longer than the watchdog's.
const LONG: Duration = Duration::from_secs(10);

#[derive(Debug, Clone, Copy, PartialEq)]
enum Lease {
    Watchdog,
    Short,
    Long,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    Plain,
    Fenced,
    Fair,
    Read,
    Write,
}

fn options(kind: Kind, lease: Lease) -> LockOptions {
    let opts = match kind {
        Kind::Plain => LockOptions::new(),
        Kind::Fenced => LockOptions::new().fenced(),
        Kind::Fair => LockOptions::new().fair(),
        Kind::Read => LockOptions::new().read(),
        Kind::Write => LockOptions::new().write(),
    };
    match lease {
        Lease::Watchdog => opts,
        Lease::Short => opts.lease(SHORT),
        Lease::Long => opts.lease(LONG),
    }
}

/// How long Redis keeps `guard`'s hold from now (ms), read before the
/// guard's own view: the lock hash's PTTL while the owner's field is in it
/// (0 when it is not); for a read hold, also at most its owner's longest
/// timeout key (another reader's release sets the hash's expiry to the
/// longest of those).
fn redis_keeps(con: &mut redis::Connection, kind: Kind, guard: &LockGuard, owner: &str) -> i64 {
    let key = guard.key();
    let field = match kind {
        Kind::Write => format!("{owner}:write"),
        _ => owner.to_owned(),
    };
    let present: bool = con.hexists(key, &field).unwrap();
    if !present {
        return 0;
    }
    let mut keeps: i64 = con.pttl(key).unwrap();
    if keeps == -1 {
        keeps = i64::MAX;
    }
    if kind == Kind::Read {
        // Gone since HEXISTS (the lease ran out between the two reads):
        // no holds, Redis keeps nothing.
        let holds: i64 = con
            .hget::<_, _, Option<i64>>(key, &field)
            .unwrap()
            .unwrap_or(0);
        let longest = (1..=holds)
            .map(|i| {
                con.pttl::<_, i64>(format!("{{{key}}}:{owner}:rwlock_timeout:{i}"))
                    .unwrap()
            })
            .max()
            .unwrap_or(0);
        keeps = keeps.min(longest);
    }
    keeps.max(0)
}

/// The owner field of `guard`'s hold, as Redis shows it.
fn owner_of(con: &mut redis::Connection, kind: Kind, key: &str) -> String {
    let fields: Vec<String> = con.hkeys(key).unwrap();
    let field = fields
        .into_iter()
        .find(|f| f != "mode")
        .unwrap_or_else(|| panic!("{kind:?}: no owner field in {key}"));
    field.trim_end_matches(":write").to_owned()
}

/// Every live guard's view is no longer than what Redis keeps for it.
fn check(
    con: &mut redis::Connection,
    kind: Kind,
    owner: &str,
    guards: &[(&str, &LockGuard)],
    when: &str,
    case: &str,
) {
    for (label, guard) in guards {
        // A renewal that lands between reading Redis and reading the guard
        // lengthens the guard's view past what was read (Redis had it
        // first): read both again then.
        let (keeps, view, held) = loop {
            let before = guard.valid_until();
            let keeps = redis_keeps(con, kind, guard, owner);
            let view = guard.remaining().as_millis() as i64;
            let held = guard.is_held();
            if guard.valid_until() == before {
                break (keeps, view, held);
            }
        };
        assert!(
            view <= keeps,
            "{case}, {when}: the {label} guard counts on {view} ms, Redis keeps {keeps} ms"
        );
        assert!(
            !held || keeps > 0,
            "{case}, {when}: the {label} guard says held, Redis holds nothing for it"
        );
    }
}

/// Checks `guards` every 50 ms for `period`.
fn watch(
    con: &mut redis::Connection,
    kind: Kind,
    owner: &str,
    guards: &[(&str, &LockGuard)],
    period: Duration,
    when: &str,
    case: &str,
) {
    let end = Instant::now() + period;
    while Instant::now() < end {
        check(con, kind, owner, guards, when, case);
        thread::sleep(Duration::from_millis(50));
    }
}

/// One case: an outer hold with `outer`, a re-entry with `inner`, each
/// checked while both live (across a renewal), then one of them released
/// (`inner_first`) and the other checked across the next renewal.
fn case(
    server: &RedisServer,
    client: &LockClient,
    kind: Kind,
    outer: Lease,
    inner: Lease,
    inner_first: bool,
) {
    let case =
        format!("{kind:?}: outer {outer:?}, inner {inner:?}, inner released first: {inner_first}");
    let name = format!("reentry:{kind:?}:{outer:?}:{inner:?}:{inner_first}");
    let mut con = server.connection();
    let a = client.lock_with(&name, options(kind, outer)).unwrap();
    let owner = owner_of(&mut con, kind, a.key());
    check(
        &mut con,
        kind,
        &owner,
        &[("outer", &a)],
        "outer alone",
        &case,
    );
    let b = client.lock_with(&name, options(kind, inner)).unwrap();
    check(
        &mut con,
        kind,
        &owner,
        &[("outer", &a), ("inner", &b)],
        "after the re-entry",
        &case,
    );
    watch(
        &mut con,
        kind,
        &owner,
        &[("outer", &a), ("inner", &b)],
        Duration::from_millis(1_300),
        "both held, across a renewal",
        &case,
    );
    let (label, kept) = if inner_first {
        drop(b);
        ("outer", a)
    } else {
        drop(a);
        ("inner", b)
    };
    watch(
        &mut con,
        kind,
        &owner,
        &[(label, &kept)],
        Duration::from_millis(1_300),
        "after the other's release, across a renewal",
        &case,
    );
    if kept.is_held() {
        kept.unlock().unwrap();
    }
    let left: bool = con.exists(&name).unwrap();
    assert!(!left, "{case}: the lock is left after every guard went");
}

/// Every combination of leases and release orders for `kind`, each on its
/// own thread (a reentrant hold is its thread's) and its own name.
fn every_combination(kind: Kind) {
    let server = RedisServer::start();
    let client = LockClient::builder(&server.url())
        .watchdog_lease(WATCHDOG)
        .build()
        .unwrap();
    let leases = [Lease::Watchdog, Lease::Short, Lease::Long];
    thread::scope(|s| {
        let mut cases = Vec::new();
        for outer in leases {
            for inner in leases {
                for inner_first in [true, false] {
                    let (server, client) = (&server, &client);
                    cases.push(
                        s.spawn(move || case(server, client, kind, outer, inner, inner_first)),
                    );
                }
            }
        }
        let failed: Vec<String> = cases
            .into_iter()
            .filter_map(|c| c.join().err())
            .map(|e| {
                e.downcast_ref::<String>()
                    .cloned()
                    .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default()
            })
            .collect();
        assert!(
            failed.is_empty(),
            "{} cases failed:\n{}",
            failed.len(),
            failed.join("\n")
        );
    });
}

#[test]
fn a_plain_reentry_never_cuts_a_lease_a_guard_counts_on() {
    every_combination(Kind::Plain);
}

#[test]
fn a_fenced_reentry_never_cuts_a_lease_a_guard_counts_on() {
    every_combination(Kind::Fenced);
}

#[test]
fn a_fair_reentry_never_cuts_a_lease_a_guard_counts_on() {
    every_combination(Kind::Fair);
}

#[test]
fn a_read_reentry_never_cuts_a_lease_a_guard_counts_on() {
    every_combination(Kind::Read);
}

#[test]
fn a_write_reentry_never_cuts_a_lease_a_guard_counts_on() {
    every_combination(Kind::Write);
}

/// A re-entry made after the first guard's lease ran out in Redis finds the
/// lock free and takes it — its own lease from then on. Releasing the first
/// guard first must not free it under the re-entered one (it counted one
/// hold in Redis for two guards and deleted the lock: found by the protocol
/// simulator, `tests/simulation.rs`). Plain, fenced, fair (the fair lock's
/// found by its own simulation after the plain lock's fix).
#[test]
fn a_reentry_after_the_first_lease_ran_out_survives_the_first_guards_release() {
    let server = RedisServer::start();
    let client = LockClient::new(&server.url()).unwrap();
    let mut con = server.connection();
    for (name, fair, fenced) in [
        ("late:plain", false, false),
        ("late:fenced", false, true),
        ("late:fair", true, false),
        ("late:fair:fenced", true, true),
    ] {
        let with = |lease: Duration| {
            let o = LockOptions::new().lease(lease);
            let o = if fair { o.fair() } else { o };
            if fenced {
                o.fenced()
            } else {
                o
            }
        };
        let first = client
            .lock_with(name, with(Duration::from_millis(300)))
            .unwrap();
        // The first guard's explicit lease runs out in Redis (3x over).
        assert!(support::eventually(Duration::from_secs(5), || {
            !con.exists::<_, bool>(name).unwrap()
        }));
        thread::sleep(Duration::from_millis(600));
        assert!(!first.is_held());
        let second = client.lock_with(name, with(LONG)).unwrap();
        assert!(second.is_held());
        drop(first);
        let ttl: i64 = con.pttl(name).unwrap();
        assert!(
            ttl > 5_000,
            "{name}: the re-entered guard counts on {:?} more, Redis keeps {ttl} ms",
            second.remaining()
        );
        assert!(second.is_held());
        second.unlock().unwrap();
        assert!(!con.exists::<_, bool>(name).unwrap(), "{name}: left behind");
    }
}

/// A re-entry that has to wait (the first guard's explicit lease ran out
/// in Redis and another client took the lock) and is then granted the lock
/// directly by that client's release counts the owner's guards alive too:
/// the first guard's release must not free it under the re-entered one. A
/// grant sets one hold; it is taken by an attempt that counts the guards
/// (found by a review of the simulator's fix for the late re-entry).
/// Plain and fair.
#[test]
fn a_reentry_granted_after_a_wait_survives_the_first_guards_release() {
    let server = RedisServer::start();
    let client = LockClient::new(&server.url()).unwrap();
    let other = LockClient::new(&server.url()).unwrap();
    let mut con = server.connection();
    for (name, fair) in [("granted:plain", false), ("granted:fair", true)] {
        let with = |lease: Option<Duration>| {
            let o = LockOptions::new();
            let o = if fair { o.fair() } else { o };
            match lease {
                Some(lease) => o.lease(lease),
                None => o,
            }
        };
        let first = client
            .lock_with(name, with(Some(Duration::from_millis(300))))
            .unwrap();
        assert!(support::eventually(Duration::from_secs(5), || {
            !con.exists::<_, bool>(name).unwrap()
        }));
        let (held, taken) = std::sync::mpsc::channel();
        let (other, opts) = (other.clone(), with(Some(LONG)));
        let releaser = thread::spawn(move || {
            let theirs = other.lock_with(name, opts).unwrap();
            held.send(()).unwrap();
            thread::sleep(Duration::from_millis(500));
            theirs.unlock().unwrap();
        });
        taken.recv().unwrap();
        // Waits for the other client's release, which grants it to us.
        let second = client.lock_with(name, with(None)).unwrap();
        releaser.join().unwrap();
        drop(first);
        let ttl: i64 = con.pttl(name).unwrap();
        assert!(
            ttl > 1_000 && second.is_held(),
            "{name}: the re-entered guard counts on {:?}, Redis keeps {ttl} ms",
            second.remaining()
        );
        second.unlock().unwrap();
        assert!(!con.exists::<_, bool>(name).unwrap(), "{name}: left behind");
    }
}

/// A guard whose explicit lease ran out — taken over meanwhile by another
/// thread of the client, which then handed the lock back to the guard's
/// thread — counts for nothing when it goes: its owner's new hold, which a
/// new ledger entry of the same owner records, is not the old guard's to
/// release. (Its going once ended the new hold in Redis: the ledger began
/// the new entry's count where the old one's had begun.)
#[test]
fn an_expired_guard_going_after_its_owner_took_the_lock_again_releases_nothing() {
    let server = RedisServer::start();
    let client = LockClient::new(&server.url()).unwrap();
    let other = LockClient::new(&server.url()).unwrap();
    let lease = Duration::from_millis(500);
    let old = client
        .lock_with("re:expired", LockOptions::new().lease(lease))
        .unwrap();
    // Another thread of the client queues behind it, takes the lock once
    // the lease ran out, and holds it a moment.
    let taker = {
        let client = client.clone();
        thread::spawn(move || {
            let g = client.lock("re:expired").unwrap();
            thread::sleep(Duration::from_millis(300));
            g.unlock().unwrap();
        })
    };
    thread::sleep(lease + Duration::from_millis(200));
    assert!(!old.is_held());
    // This thread takes it again (handed over by the taker), then the
    // expired guard goes.
    let new = client.lock("re:expired").unwrap();
    taker.join().unwrap();
    drop(old);
    let exists: bool = server.connection().exists("re:expired").unwrap();
    assert!(
        exists,
        "the expired guard's going released its owner's new hold"
    );
    assert!(other.try_lock("re:expired").unwrap().is_none());
    assert!(new.is_held());
    new.unlock().unwrap();
}

/// Guards of a hold another thread of the client took over in-process (its
/// owner's shorter explicit re-entry ran out while its watchdog guard kept
/// the lock in Redis) still release it, owner-checked, when they go: the
/// thread waiting behind gets it at once, not after the 30 s watchdog
/// lease (3 s bound: a tenth of it).
#[test]
fn guards_counted_out_by_a_take_over_still_release_the_lock() {
    let server = RedisServer::start();
    let client = LockClient::new(&server.url()).unwrap();
    let outer = client.lock("re:over").unwrap(); // the watchdog's 30 s
    let inner = client
        .lock_with(
            "re:over",
            LockOptions::new().lease(Duration::from_millis(300)),
        )
        .unwrap();
    let waiter = {
        let client = client.clone();
        thread::spawn(move || {
            let g = client.lock("re:over").unwrap();
            let at = Instant::now();
            g.unlock().unwrap();
            at
        })
    };
    // The re-entry's lease ran out: the waiting thread took the lock over
    // in-process, and waits in Redis, where the outer guard holds it.
    thread::sleep(Duration::from_secs(1));
    let released = Instant::now();
    drop(inner);
    drop(outer);
    let got = waiter.join().unwrap();
    let after = got.saturating_duration_since(released);
    assert!(
        after < Duration::from_secs(3),
        "the waiter got the lock {after:?} after both guards went"
    );
}

/// A guard counted out by a take-over in-process (its owner's shorter
/// explicit re-entry ran out; a queued thread took over and waits in
/// Redis) does not stop the renewal of the watchdog lease its owner's other
/// guards share as it goes: while one of them lives, the lock stays its
/// owner's, and the queued thread does not get it (once the shared lease
/// was cancelled with it, the key ran out a lease later and both held).
#[test]
fn a_counted_out_guard_going_keeps_its_owners_shared_lease_renewed() {
    let server = RedisServer::start();
    let client = LockClient::builder(&server.url())
        .watchdog_lease(Duration::from_secs(3))
        .socket_timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    let w1 = client.lock("re:shared").unwrap();
    let w2 = client.lock("re:shared").unwrap();
    let e3 = client
        .lock_with(
            "re:shared",
            LockOptions::new().lease(Duration::from_millis(500)),
        )
        .unwrap();
    let (got_tx, got_rx) = std::sync::mpsc::channel();
    let waiter = {
        let client = client.clone();
        thread::spawn(move || {
            let g = client.lock("re:shared").unwrap();
            got_tx.send(()).unwrap();
            g.unlock().unwrap();
        })
    };
    // e3's lease ran out: the waiting thread took over in-process.
    thread::sleep(Duration::from_secs(1));
    drop(e3);
    drop(w2);
    // Two watchdog leases (3 s) later, w1 still holds it.
    let got = got_rx.recv_timeout(Duration::from_secs(6));
    assert!(
        got.is_err(),
        "the waiting thread got the lock while w1 lived"
    );
    assert!(w1.is_held());
    drop(w1);
    got_rx
        .recv_timeout(Duration::from_secs(5))
        .expect("the waiting thread gets it once w1 went");
    waiter.join().unwrap();
}
