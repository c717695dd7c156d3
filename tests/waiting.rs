//! Waiting without polling: pub/sub wake-ups, the subscribe/unlock race, one
//! shared subscriber per client, crashed holders, deadlines; an operator's
//! `force_unlock` waking the waiters of every kind.

mod support;

use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use leasehold::{Cancel, LockClient, LockOptions};
use redis::Commands;
use support::{eventually, listening_clients, RedisServer};

fn numsub(server: &RedisServer, channel: &str) -> i64 {
    let v: Vec<(String, i64)> = redis::cmd("PUBSUB")
        .arg("NUMSUB")
        .arg(channel)
        .query(&mut server.connection())
        .unwrap();
    v[0].1
}

/// Lock channels and grant channels subscribed, and `*` when any pattern is.
fn lock_channels(server: &RedisServer) -> Vec<String> {
    let mut con = server.connection();
    let mut channels: Vec<String> = Vec::new();
    for pattern in ["redisson_lock__channel:*", "leasehold_grant:*"] {
        let found: Vec<String> = redis::cmd("PUBSUB")
            .arg("CHANNELS")
            .arg(pattern)
            .query(&mut con)
            .unwrap();
        channels.extend(found);
    }
    let patterns: i64 = redis::cmd("PUBSUB").arg("NUMPAT").query(&mut con).unwrap();
    if patterns > 0 {
        channels.push(format!("{patterns} patterns"));
    }
    channels
}

/// Connections named by a leasehold subscriber (`leasehold-notify-<id>`).
fn subscriber_connections(server: &RedisServer) -> usize {
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query(&mut server.connection())
        .unwrap();
    list.lines()
        .filter(|l| l.contains("name=leasehold-notify-"))
        .count()
}

#[test]
fn waiter_wakes_on_the_unlock_message_not_the_lease() {
    let server = RedisServer::start();
    let client = LockClient::new(&server.url()).unwrap();
    let other = LockClient::new(&server.url()).unwrap();
    let guard = client.lock("msg").unwrap(); // 30 s lease
    let waiter = thread::spawn(move || {
        let started = Instant::now();
        let g = other.try_lock_for("msg", Duration::from_secs(20)).unwrap();
        (g.is_some(), started.elapsed())
    });
    thread::sleep(Duration::from_millis(300));
    guard.unlock().unwrap();
    let (got, waited) = waiter.join().unwrap();
    assert!(got, "the waiter got the lock");
    assert!(
        waited < Duration::from_secs(10),
        "woken by the unlock message, not the 30 s lease: waited {waited:?}"
    );
}

#[test]
fn subscribe_unlock_race_never_loses_a_wakeup() {
    // The holder unlocks at varying moments around the waiter's subscribe. A
    // lost message would leave the waiter parked for the 30 s lease, past its
    // 10 s deadline.
    let server = RedisServer::start();
    let holder = LockClient::new(&server.url()).unwrap();
    let waiter_client = LockClient::new(&server.url()).unwrap();
    for i in 0..150u32 {
        let guard = holder.lock("race").unwrap();
        let c = waiter_client.clone();
        let (ready_tx, ready_rx) = mpsc::sync_channel(0);
        let waiter = thread::spawn(move || {
            ready_tx.send(()).unwrap();
            c.try_lock_for("race", Duration::from_secs(10))
                .unwrap()
                .map(|g| g.unlock().unwrap())
                .is_some()
        });
        ready_rx.recv().unwrap();
        let spin = Duration::from_micros(u64::from(i % 30) * 40);
        let until = Instant::now() + spin;
        while Instant::now() < until {
            std::hint::spin_loop();
        }
        guard.unlock().unwrap();
        assert!(
            waiter.join().unwrap(),
            "round {i}: the waiter missed the unlock"
        );
    }
}

#[test]
fn waiting_does_not_poll_redis() {
    let server = RedisServer::start();
    let holder = LockClient::new(&server.url()).unwrap();
    let a = LockClient::new(&server.url()).unwrap();
    let b = LockClient::new(&server.url()).unwrap();
    let guard = holder.lock("quiet").unwrap(); // 30 s lease
    let (tx, rx) = mpsc::channel();
    let mut waiters = Vec::new();
    for client in [a.clone(), a.clone(), b.clone()] {
        let tx = tx.clone();
        waiters.push(thread::spawn(move || {
            let g = client.lock("quiet").unwrap();
            tx.send(()).unwrap();
            drop(g);
        }));
    }
    // Each waiter: one attempt, subscribe, one retry — then it parks (`a`'s
    // second thread queued behind its first, in the client).
    assert!(
        eventually(Duration::from_secs(10), || a.stats().waiters_parked == 2
            && b.stats().waiters_parked == 1),
        "the waiters park: {:?} {:?}",
        a.stats(),
        b.stats()
    );
    server.reset_stats();
    thread::sleep(Duration::from_secs(2));
    let calls = server.command_calls();
    assert!(
        rx.try_recv().is_err(),
        "nobody got the lock while it was held"
    );
    let attempts = calls.get("evalsha").copied().unwrap_or(0);
    eprintln!("parked waiters made {attempts} acquire attempts in 2 s: {calls:?}");
    // Parked, the two waiters talking to Redis only confirm their places in
    // line, each every second: about 4 attempts in 2 s (6 at most, and the
    // holder's renewal). Waiters polling every 100 ms would make 40.
    assert!(
        attempts <= 10,
        "3 parked waiters over 2 s made {attempts} acquire attempts: {calls:?}"
    );
    guard.unlock().unwrap();
    for _ in 0..3 {
        rx.recv_timeout(Duration::from_secs(10))
            .expect("every waiter gets the lock in turn");
    }
    for w in waiters {
        w.join().unwrap();
    }
}

#[test]
fn one_subscriber_connection_per_client_and_refcounted_subscriptions() {
    let server = RedisServer::start();
    let holder = LockClient::new(&server.url()).unwrap();
    let waiters = LockClient::new(&server.url()).unwrap();
    let names: Vec<String> = (0..5).map(|i| format!("shared:{i}")).collect();
    let guards: Vec<_> = names.iter().map(|n| holder.lock(n).unwrap()).collect();

    let mut handles = Vec::new();
    for name in &names {
        for _ in 0..2 {
            let c = waiters.clone();
            let name = name.clone();
            handles.push(thread::spawn(move || {
                c.lock(&name).unwrap().unlock().unwrap();
            }));
        }
    }
    assert!(
        eventually(Duration::from_secs(10), || {
            names.iter().all(|n| listening_clients(&server, n) == 1)
        }),
        "each name is subscribed exactly once, whatever its number of waiters"
    );
    for n in &names {
        assert_eq!(
            numsub(&server, &format!("redisson_lock__channel:{{{n}}}")),
            0,
            "leasehold's waiters of a leasehold holder do not hear the unlock channel: NUMSUB counts other libraries' waiters only"
        );
    }
    let patterns: i64 = redis::cmd("PUBSUB")
        .arg("NUMPAT")
        .query(&mut server.connection())
        .unwrap();
    assert_eq!(
        patterns, 0,
        "no pattern: Redis matches every PUBLISH against every pattern"
    );
    assert_eq!(
        subscriber_connections(&server),
        1,
        "one subscriber connection for 10 waiters"
    );

    drop(guards);
    for h in handles {
        h.join().unwrap();
    }
    assert!(
        eventually(Duration::from_secs(5), || lock_channels(&server).is_empty()),
        "subscriptions are dropped when no one waits: {:?}",
        lock_channels(&server)
    );
    assert_eq!(
        subscriber_connections(&server),
        1,
        "the connection is kept for the next waiter"
    );
}

#[test]
fn crashed_holder_is_handed_over_within_its_lease() {
    let server = RedisServer::start();
    let crashed = LockClient::new(&server.url()).unwrap();
    let waiter = LockClient::new(&server.url()).unwrap();
    let lease = Duration::from_millis(1500);
    // Read before the lease began in Redis (read after, a thread descheduled
    // on the way back would measure from later than it began).
    let taken = Instant::now();
    let guard = crashed
        .lock_with("crash", LockOptions::new().lease(lease))
        .unwrap();
    std::mem::forget(guard); // the holder dies: no unlock, no message
    let g = waiter.lock("crash").unwrap();
    let waited = taken.elapsed();
    assert!(
        waited >= lease - Duration::from_millis(20),
        "not before the lease ran out: {waited:?}"
    );
    assert!(
        waited < lease + Duration::from_secs(2),
        "within lease + slack: {waited:?}"
    );
    g.unlock().unwrap();
    // Nothing woke it (no release): it got in at a retry of its own.
    let stats = waiter.stats();
    assert_eq!(
        (stats.woken_acquisitions, stats.retried_acquisitions),
        (0, 1),
        "{stats:?}"
    );
}

#[test]
fn bounded_waits_give_up_on_time() {
    let server = RedisServer::start();
    let holder = LockClient::new(&server.url()).unwrap();
    let other = LockClient::new(&server.url()).unwrap();
    let _g = holder.lock("busy").unwrap();

    assert!(other.try_lock("busy").unwrap().is_none());

    let started = Instant::now();
    assert!(other
        .try_lock_for("busy", Duration::from_millis(300))
        .unwrap()
        .is_none());
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(300) && waited < Duration::from_secs(3),
        "{waited:?}"
    );

    let deadline = Instant::now() + Duration::from_millis(200);
    assert!(other.try_lock_until("busy", deadline).unwrap().is_none());
    assert!(Instant::now() >= deadline);

    let e = other
        .lock_with("busy", LockOptions::new().wait(Duration::from_millis(200)))
        .unwrap_err();
    assert!(e.is_wait_timeout(), "{e:?}");

    // No waiter is left subscribed after giving up.
    assert!(eventually(Duration::from_secs(5), || lock_channels(
        &server
    )
    .is_empty()));
}

#[test]
fn waiters_survive_a_killed_subscriber_connection() {
    let server = RedisServer::start();
    let holder = LockClient::new(&server.url()).unwrap();
    let other = LockClient::new(&server.url()).unwrap();
    let guard = holder.lock("resub").unwrap(); // 30 s lease
    let waiter = thread::spawn(move || {
        let started = Instant::now();
        let got = other
            .try_lock_for("resub", Duration::from_secs(20))
            .unwrap()
            .is_some();
        (got, started.elapsed())
    });
    assert!(eventually(Duration::from_secs(5), || listening_clients(
        &server, "resub"
    ) == 1));
    let killed: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("pubsub")
        .query(&mut server.connection())
        .unwrap();
    assert_eq!(killed, 1);
    assert!(
        eventually(Duration::from_secs(5), || listening_clients(
            &server, "resub"
        ) == 1),
        "the subscriber reconnected and subscribed again"
    );
    guard.unlock().unwrap();
    let (got, waited) = waiter.join().unwrap();
    assert!(got);
    assert!(
        waited < Duration::from_secs(10),
        "woken by the message, not the lease: {waited:?}"
    );
    let exists: bool = server.connection().exists("resub").unwrap();
    assert!(!exists);
}

/// An operator's `force_unlock` of a stuck lock of each kind: `is_locked`
/// says so before and not after, a waiter of that kind (another client)
/// parked on it is woken at once, and the old holder's guard learns the
/// loss at its next renewal and cannot unlock.
///
/// The waiter must get in woken by the force_unlock's message
/// (`Stats::woken_acquisitions`): one it did not wake would get in at a
/// retry of its own instead — when it next confirms its place, or (a
/// reader, which has no place) when the holder's lease runs out.
#[test]
fn force_unlock_frees_every_kind_wakes_its_waiter_and_the_holder_learns_it() {
    let server = RedisServer::start();
    let holder = LockClient::builder(&server.url())
        .watchdog_lease(Duration::from_secs(3))
        .build()
        .unwrap();
    let waiter = LockClient::new(&server.url()).unwrap();
    let operator = LockClient::new(&server.url()).unwrap();
    let mut forced = Vec::new();
    for (name, options, waiting) in [
        ("stuck:plain", LockOptions::new(), LockOptions::new()),
        (
            "stuck:fenced",
            LockOptions::new().fenced(),
            LockOptions::new().fenced(),
        ),
        (
            "stuck:fair",
            LockOptions::new().fair(),
            LockOptions::new().fair(),
        ),
        (
            "stuck:write",
            LockOptions::new().write(),
            LockOptions::new().read(),
        ),
        (
            "stuck:read",
            LockOptions::new().read(),
            LockOptions::new().write(),
        ),
    ] {
        assert!(!operator.is_locked(name).unwrap(), "{name}");
        assert!(
            !operator.force_unlock(name).unwrap(),
            "{name}: nothing to free"
        );
        let guard = holder.lock_with(name, options).unwrap();
        let lost = guard.lost().receiver();
        assert!(operator.is_locked(name).unwrap(), "{name}");
        let parked = waiter.stats().waiters_parked;
        let woken = waiter.stats().woken_acquisitions;
        let got = {
            let (c, name) = (waiter.clone(), name.to_owned());
            thread::spawn(move || c.lock_with(&name, waiting).unwrap().unlock().unwrap())
        };
        assert!(
            eventually(Duration::from_secs(5), || waiter.stats().waiters_parked
                > parked),
            "{name}: the waiter parks"
        );
        assert!(operator.force_unlock(name).unwrap(), "{name}");
        got.join().unwrap();
        assert_eq!(
            waiter.stats().woken_acquisitions - woken,
            1,
            "{name}: the waiter got in woken by the force_unlock, not at a retry: {:?}",
            waiter.stats()
        );
        assert!(!operator.is_locked(name).unwrap(), "{name}");
        forced.push((name, guard, lost));
    }
    // Each holder learns it at its next renewal (within a second of its
    // force_unlock); the bound only catches a loss never reported.
    for (name, guard, lost) in forced {
        let why = lost
            .recv_timeout(Duration::from_secs(10))
            .unwrap_or_else(|_| panic!("{name}: the holder learns the loss"));
        assert_eq!(why, leasehold::LeaseLost::NotOurs, "{name}");
        assert!(!guard.is_held(), "{name}");
        assert!(
            guard.unlock().is_err(),
            "{name}: not ours to unlock any more"
        );
    }
}

/// The guard's own view of its lease, without a round trip. (Leases long
/// enough that the checks allow seconds for the calls before them.)
#[test]
fn a_guard_says_until_when_it_holds() {
    let server = RedisServer::start();
    let client = LockClient::new(&server.url()).unwrap();
    let g = client
        .lock_with("view", LockOptions::new().lease(Duration::from_secs(60)))
        .unwrap();
    let left = g.remaining();
    assert!(
        left > Duration::from_secs(50) && left <= Duration::from_secs(60),
        "{left:?}"
    );
    let until = g.valid_until().expect("held");
    assert!(until > Instant::now() + Duration::from_secs(50));
    let short = LockClient::builder(&server.url())
        .watchdog_lease(Duration::from_millis(1_500))
        .build()
        .unwrap();
    let w = short.lock("view:watchdog").unwrap();
    assert!(
        w.remaining() > Duration::from_millis(500),
        "{:?}",
        w.remaining()
    );
    // Renewed past its first lease: half a second past it, the first lease
    // is over for sure; renewed every 500 ms, the guard has a second to
    // spare.
    thread::sleep(Duration::from_millis(2_000));
    assert!(w.remaining() > Duration::ZERO);
    assert!(client.force_unlock("view:watchdog").unwrap());
    assert!(eventually(Duration::from_secs(3), || w
        .valid_until()
        .is_none()));
    assert_eq!(w.remaining(), Duration::ZERO);
    drop(g);
}

/// Another thread cancels blocking waits (Redisson's `lockInterruptibly`):
/// a plain waiter talking to Redis and one queued behind it in the same
/// client, a fair waiter and a waiting writer each return `Cancelled`
/// at once, and nothing of them is left in Redis: no place in the
/// line, the fair queue or the waiting writers, and (once subscriptions
/// stop lingering) no subscription. "At once" is within half a second of
/// the cancel, which comes right after they parked: a wait that noticed
/// the cancel only when it next woke would return when it next confirms
/// its place, a second (fair, writer: 1.7 s) after it parked, or never.
#[test]
fn cancelled_waits_return_at_once_and_leave_nothing_behind() {
    let server = RedisServer::start();
    let holder = LockClient::new(&server.url()).unwrap();
    let waiter = LockClient::new(&server.url()).unwrap();
    let mut con = server.connection();
    let cases: [(&str, LockOptions, LockOptions, usize); 3] = [
        ("cancel:plain", LockOptions::new(), LockOptions::new(), 2),
        (
            "cancel:fair",
            LockOptions::new().fair(),
            LockOptions::new().fair(),
            1,
        ),
        (
            "cancel:rw",
            LockOptions::new().read(),
            LockOptions::new().write(),
            1,
        ),
    ];
    for (name, held_as, waiting, threads) in cases {
        let guard = holder.lock_with(name, held_as).unwrap();
        let cancel = Cancel::new();
        let parked = waiter.stats().waiters_parked;
        let queued = waiter.stats().waiters_queued;
        // Each wait reports how it ended on `ended`: one that never returns
        // fails the test instead of hanging it.
        let (ended_tx, ended) = mpsc::channel();
        for _ in 0..threads {
            let (c, options) = (waiter.clone(), waiting.clone().cancel_on(&cancel));
            let ended_tx = ended_tx.clone();
            thread::spawn(move || {
                let r = c.lock_with(name, options).map(drop);
                let _ = ended_tx.send((r, Instant::now()));
            });
        }
        assert!(
            eventually(Duration::from_secs(5), || {
                let s = waiter.stats();
                s.waiters_parked > parked && s.waiters_queued + 1 >= queued + threads as u64
            }),
            "{name}: waiting"
        );
        thread::sleep(Duration::from_millis(50));
        let cancelled = Instant::now();
        cancel.cancel();
        for _ in 0..threads {
            let (r, at) = ended
                .recv_timeout(Duration::from_secs(10))
                .unwrap_or_else(|_| panic!("{name}: a wait did not return 10 s after the cancel"));
            assert!(r.as_ref().unwrap_err().is_cancelled(), "{name}: {r:?}");
            assert!(
                at - cancelled < Duration::from_millis(500),
                "{name}: returned {:?} after the cancel",
                at - cancelled
            );
        }
        let line: usize = con.llen(format!("leasehold_line:{{{name}}}")).unwrap();
        let queue: usize = con.llen(format!("redisson_lock_queue:{{{name}}}")).unwrap();
        let timeouts: usize = con
            .zcard(format!("redisson_lock_timeout:{{{name}}}"))
            .unwrap();
        let writers: usize = con
            .zcard(format!("{{{name}}}:rwlock_write_waiters"))
            .unwrap();
        assert_eq!(
            (line, queue, timeouts, writers),
            (0, 0, 0, 0),
            "{name}: places left"
        );
        assert!(guard.is_held(), "{name}: the holder kept it");
        guard.unlock().unwrap();
        // A cancelled handle cancels at once, without an attempt.
        let again = waiter.lock_with(name, waiting.cancel_on(&cancel));
        assert!(again.unwrap_err().is_cancelled());
    }
    assert!(
        eventually(Duration::from_secs(3), || lock_channels(&server).is_empty()),
        "subscriptions left: {:?}",
        lock_channels(&server)
    );
    // Four waits cancelled while waiting, three at once.
    assert_eq!(waiter.stats().waits_cancelled, 7);
    assert_eq!(waiter.stats().acquisitions, 0);
}

/// A wait cancelled while its first try is out to a Redis that does not
/// answer ends as cancelled (`Error::Cancelled`) when that round trip
/// ends, not with the try's timeout: the round trip of a blocking call
/// cannot be cut short, but its outcome is the cancel's.
#[test]
fn a_wait_cancelled_while_its_try_is_out_ends_cancelled() {
    let server = RedisServer::start();
    let client = LockClient::builder(&server.url())
        .socket_timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    client.lock("cancel:out").unwrap().unlock().unwrap(); // connected
    let other = LockClient::new(&server.url()).unwrap();
    let _held = other.lock("cancel:out").unwrap();
    server.signal("STOP");
    let cancel = Cancel::new();
    let waiting = {
        let (c, options) = (client.clone(), LockOptions::new().cancel_on(&cancel));
        thread::spawn(move || c.lock_with("cancel:out", options).map(drop))
    };
    thread::sleep(Duration::from_millis(100));
    cancel.cancel();
    let ended = waiting.join().unwrap();
    server.signal("CONT");
    assert!(
        ended.as_ref().is_err_and(leasehold::Error::is_cancelled),
        "{ended:?}"
    );
    assert_eq!(client.stats().waits_cancelled, 1, "{:?}", client.stats());
}

/// What an operator graphs: acquisitions with their wait times in buckets,
/// bounded waits that ran out.
#[test]
fn stats_count_acquisitions_wait_times_and_timeouts() {
    let server = RedisServer::start();
    let client = LockClient::new(&server.url()).unwrap();
    let other = LockClient::new(&server.url()).unwrap();
    for _ in 0..3 {
        client.lock("stats:a").unwrap().unlock().unwrap();
    }
    let held = other.lock("stats:b").unwrap();
    assert!(client.try_lock("stats:b").unwrap().is_none());
    assert!(client
        .try_lock_for("stats:b", Duration::from_millis(50))
        .unwrap()
        .is_none());
    let waiter = {
        let c = client.clone();
        thread::spawn(move || c.lock("stats:b").map(drop))
    };
    // Released more than a second after the waiter parked: its wait lasts
    // that long at least, the three free acquisitions milliseconds.
    assert!(eventually(Duration::from_secs(5), || client
        .stats()
        .waiters_parked
        == 1));
    thread::sleep(Duration::from_millis(1_100));
    held.unlock().unwrap();
    waiter.join().unwrap().unwrap();
    let s = client.stats();
    assert_eq!(s.acquisitions, 4, "{s:?}");
    assert_eq!(s.wait_timeouts, 2, "{s:?}");
    assert_eq!(s.wait_time.iter().sum::<u64>(), 4, "{s:?}");
    // The wait of over a second lands above 1,000 ms, the others below.
    let slow: u64 = s.wait_time[4..].iter().sum();
    assert_eq!(
        slow,
        1,
        "{s:?} ({:?} ms buckets)",
        leasehold::WAIT_BUCKETS_MS
    );
}

/// A waiter that heard the unlock channel while another library held the
/// lock stops hearing it once it holds the lock itself: its own client's
/// release would otherwise count it as another library's waiter (`PUBSUB
/// NUMSUB`) and give the lock up publicly, with a yield, where it hands it
/// on to a thread of its own.
#[test]
fn a_waiter_that_took_the_lock_from_another_library_stops_hearing_its_channel() {
    let server = RedisServer::start();
    let client = LockClient::new(&server.url()).unwrap();
    let mut con = server.connection();
    // Another library's holder (a Redisson owner field), for 30 s.
    let _: () = con
        .hset("foreign", "6f1c9a1e-0000-4000-8000-000000000000:1", 1)
        .unwrap();
    let _: () = con.pexpire("foreign", 30_000).unwrap();
    let channel = "redisson_lock__channel:{foreign}";
    let (held_tx, held_rx) = mpsc::channel();
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let waiter = {
        let client = client.clone();
        thread::spawn(move || {
            let g = client.lock("foreign").unwrap();
            held_tx.send(()).unwrap();
            done_rx.recv().unwrap();
            g.unlock().unwrap();
        })
    };
    assert!(
        eventually(Duration::from_secs(10), || numsub(&server, channel) == 1),
        "the waiter hears the unlock channel while another library holds"
    );
    // The other library lets go, as Redisson does.
    let _: () = con.del("foreign").unwrap();
    let _: () = con.publish(channel, 0).unwrap();
    held_rx
        .recv_timeout(Duration::from_secs(10))
        .expect("the waiter got the lock");
    // (Its unsubscribe is on its way on the subscriber's connection.)
    assert!(
        eventually(Duration::from_secs(5), || numsub(&server, channel) == 0),
        "the holder still hears the unlock channel"
    );
    done_tx.send(()).unwrap();
    waiter.join().unwrap();
}
