//! Deadlines kept under faults (issue 25, items 1 and 2): a bounded wait
//! returns by its deadline plus a round trip while Redis hangs (SIGSTOP),
//! for every lock kind, owned guards, Redlock and a semaphore; within its deadline it
//! rides out an outage — also one that began before it, and also a second
//! wait right after a first one failed — and gets the lock once Redis is
//! back; a last try cut short by the deadline ends the wait as its deadline
//! does, and its waiting place is left once Redis answers.

mod support;

use std::thread;
use std::time::{Duration, Instant};

use leasehold::{LockClient, LockOptions, Redlock};
use support::{free_port, RedisServer};

/// The slack a deadline may be passed by: a round trip and the scheduling
/// of a loaded 2-core machine, with room to spare. A wait that passed its
/// deadline instead takes what the tests below make at least ten times as
/// long — a socket timeout of [`LONG_TIMEOUT`], a 30 s connect timeout.
const SLACK: Duration = Duration::from_secs(1);

/// A socket timeout (or a Redlock node timeout) far beyond every wait
/// below: a wait bounded by it rather than by its deadline would take that
/// long.
const LONG_TIMEOUT: Duration = Duration::from_secs(12);

/// A client of `server` whose socket timeout is [`LONG_TIMEOUT`].
fn long_timeout_client(server: &RedisServer) -> LockClient {
    LockClient::builder(&server.url())
        .socket_timeout(LONG_TIMEOUT)
        .build()
        .unwrap()
}

fn kinds() -> Vec<(&'static str, LockOptions, bool)> {
    vec![
        ("plain", LockOptions::new(), false),
        ("fair", LockOptions::new().fair(), false),
        ("read", LockOptions::new().read(), false),
        ("write", LockOptions::new().write(), false),
        ("owned", LockOptions::new(), true),
        ("fenced", LockOptions::new().fenced(), false),
    ]
}

/// One bounded wait of `wait` for `name` as `opts` say; how long it took,
/// and whether it got the lock (an error is not the lock).
fn bounded(
    client: &LockClient,
    name: &str,
    opts: LockOptions,
    owned: bool,
    wait: Duration,
) -> (Duration, Result<bool, leasehold::Error>) {
    let started = Instant::now();
    let got = if owned {
        client
            .try_lock_owned_with(name, opts.wait(wait))
            .map(|g| g.is_some())
    } else {
        client
            .try_lock_with(name, opts.wait(wait))
            .map(|g| g.is_some())
    };
    (started.elapsed(), got)
}

#[test]
fn a_bounded_wait_returns_by_its_deadline_while_redis_is_paused() {
    let server = RedisServer::start();
    // The socket timeout (12 s) must not decide how long a 1 s wait takes,
    // nor the Redlock's node timeout (12 s, for a lease ten times that).
    let client = long_timeout_client(&server);
    let redlock = Redlock::builder(&[server.url()])
        .watchdog_lease(LONG_TIMEOUT * 10)
        .node_timeout(LONG_TIMEOUT)
        .build()
        .unwrap();
    // Warm: connections open, scripts loaded — the waits below send their
    // attempts and wait for replies that do not come.
    for (kind, opts, _) in kinds() {
        drop(
            client
                .lock_with(&format!("deadline:{kind}:warm"), opts)
                .unwrap(),
        );
    }
    drop(redlock.lock("deadline:redlock:warm").unwrap());
    let semaphore = client.semaphore("deadline:semaphore");
    semaphore.set_permits(1).unwrap();
    drop(semaphore.acquire().unwrap());
    server.signal("STOP");
    let wait = Duration::from_secs(1);
    let mut waits: Vec<_> = kinds()
        .into_iter()
        .map(|(kind, opts, owned)| {
            let client = client.clone();
            thread::spawn(move || {
                let (took, got) = bounded(&client, &format!("deadline:{kind}"), opts, owned, wait);
                (kind, took, got.map_err(|e| format!("{e:?}")))
            })
        })
        .collect();
    waits.push({
        let redlock = redlock.clone();
        thread::spawn(move || {
            let started = Instant::now();
            let got = redlock.try_lock_for("deadline:redlock", wait);
            (
                "redlock",
                started.elapsed(),
                got.map(|g| g.is_some()).map_err(|e| format!("{e:?}")),
            )
        })
    });
    // A semaphore's permit: its attempt unanswered, what it may have taken
    // is given back once Redis answers, not waited for past the deadline.
    waits.push(thread::spawn(move || {
        let started = Instant::now();
        let got = semaphore.try_acquire_for(wait);
        (
            "semaphore",
            started.elapsed(),
            got.map(|g| g.is_some()).map_err(|e| format!("{e:?}")),
        )
    }));
    let results: Vec<_> = waits.into_iter().map(|h| h.join().unwrap()).collect();
    server.signal("CONT");
    for (kind, took, got) in &results {
        eprintln!("{kind}: {took:?} {got:?}");
    }
    for (kind, took, got) in results {
        assert!(
            took <= wait + SLACK,
            "{kind}: a 1 s wait took {took:?} while redis was paused ({got:?})"
        );
        assert!(!matches!(got, Ok(true)), "{kind}: held while paused?");
        if let Err(e) = &got {
            assert!(
                !e.contains("raise LockClientBuilder::socket_timeout"),
                "{kind}: the advice would make it worse: {e}"
            );
        }
    }
}

#[test]
fn a_long_wait_rides_out_a_pause_and_gets_the_lock_after_the_resume() {
    // A wait of a minute across a 3 s pause gets the lock within a few
    // seconds of the resume, not at the end of its wait.
    let server = RedisServer::start();
    let client = LockClient::new(&server.url()).unwrap();
    for (kind, opts, _) in kinds() {
        drop(
            client
                .lock_with(&format!("ride:{kind}:warm"), opts)
                .unwrap(),
        );
    }
    server.signal("STOP");
    let waits: Vec<_> = kinds()
        .into_iter()
        .map(|(kind, opts, owned)| {
            let client = client.clone();
            thread::spawn(move || {
                let got = bounded(
                    &client,
                    &format!("ride:{kind}"),
                    opts,
                    owned,
                    Duration::from_secs(60),
                );
                (kind, got)
            })
        })
        .collect();
    thread::sleep(Duration::from_secs(3));
    server.signal("CONT");
    for h in waits {
        let (kind, (took, got)) = h.join().unwrap();
        assert!(
            matches!(got, Ok(true)),
            "{kind}: a 60 s wait across a 3 s pause did not get the lock: {got:?} after {took:?}"
        );
        assert!(took < Duration::from_secs(8), "{kind}: {took:?}");
    }
}

/// A port nothing listens on (bound once, then let go).
fn closed_port() -> u16 {
    free_port()
}

#[test]
fn with_nothing_listening_each_bounded_wait_lasts_until_its_deadline() {
    let port = closed_port();
    // The outage limit (the connect timeout, 30 s) must not decide.
    let client = LockClient::builder(&format!("redis://127.0.0.1:{port}/"))
        .connect_timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let wait = Duration::from_secs(2);
    for round in 0..2 {
        let started = Instant::now();
        let e = client.try_lock_for("nowhere", wait).unwrap_err();
        let took = started.elapsed();
        eprintln!("round {round}: {took:?}: {e:?}");
        assert!(
            took >= wait - Duration::from_millis(200),
            "round {round}: gave up after {took:?} of a {wait:?} wait: {e:?}"
        );
        assert!(took <= wait + SLACK, "round {round}: {took:?}");
        assert!(e.is_connection(), "{e:?}");
    }
}

#[test]
fn a_wait_begun_with_nothing_listening_gets_the_lock_once_a_server_comes_up() {
    let port = closed_port();
    let client = LockClient::new(&format!("redis://127.0.0.1:{port}/")).unwrap();
    let started = Instant::now();
    let waiting = {
        let client = client.clone();
        thread::spawn(move || {
            client
                .try_lock_for("later", Duration::from_secs(4))
                .map(|g| g.map(|g| g.unlock()))
        })
    };
    thread::sleep(Duration::from_secs(1));
    let _server = RedisServer::start_on_port(port);
    let got = waiting.join().unwrap();
    assert!(
        matches!(got, Ok(Some(Ok(())))),
        "no lock {:?} after the start: {got:?}",
        started.elapsed()
    );
}

#[test]
fn a_refused_connect_leaves_nothing_to_undo_and_the_next_wait_rides_it_out() {
    // The same thread and name, first with nothing listening, then a wait
    // that starts before the server does.
    let port = closed_port();
    let client = LockClient::builder(&format!("redis://127.0.0.1:{port}/"))
        .connect_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let e = client.try_lock("refused").unwrap_err();
    assert!(e.is_connection(), "{e:?}");
    let started = Instant::now();
    let server = thread::spawn(move || {
        thread::sleep(Duration::from_millis(800));
        RedisServer::start_on_port(port)
    });
    let got = client.try_lock_for("refused", Duration::from_secs(3));
    let server = server.join().unwrap();
    assert!(
        matches!(got, Ok(Some(_))),
        "after {:?}: {got:?}",
        started.elapsed()
    );
    // Nothing was undone on the new server: no release script ran there (a
    // release deletes the owner's field).
    let calls = server.command_calls();
    assert_eq!(calls.get("hdel"), None, "an undo ran: {calls:?}");
}

#[test]
fn a_retried_bounded_wait_keeps_its_deadline_while_an_earlier_lost_reply_is_being_undone() {
    let server = RedisServer::start();
    let client = long_timeout_client(&server);
    drop(client.lock("retry:warm").unwrap());
    server.signal("STOP");
    // The same thread and name, again and again: the first wait's attempt
    // went out and was not answered (a lost reply to undo); every later
    // wait must still end by its deadline.
    let wait = Duration::from_millis(500);
    let mut took = Vec::new();
    for _ in 0..4 {
        let started = Instant::now();
        let got = client.try_lock_for("retry", wait);
        took.push(started.elapsed());
        assert!(got.is_err(), "{got:?}");
        thread::sleep(Duration::from_millis(150)); // the background undo starts
    }
    server.signal("CONT");
    for t in &took {
        assert!(*t <= wait + SLACK, "a 500 ms wait took {t:?}: {took:?}");
    }
    assert!(client
        .try_lock_for("retry", Duration::from_secs(5))
        .unwrap()
        .is_some());
}

#[test]
fn a_wait_queued_behind_a_thread_of_its_own_client_keeps_its_deadline() {
    let server = RedisServer::start();
    let client = long_timeout_client(&server);
    let held = client.lock_owned("queued").unwrap();
    let waiter = {
        let client = client.clone();
        thread::spawn(move || {
            let started = Instant::now();
            let got = client.try_lock_for("queued", Duration::from_millis(600));
            (
                started.elapsed(),
                got.map(|g| g.is_some()).map_err(|e| format!("{e:?}")),
            )
        })
    };
    // Queued in-process behind `held`.
    assert!(support::eventually(Duration::from_secs(5), || client
        .stats()
        .waiters_queued
        == 1));
    server.signal("STOP");
    // The release pops the queued thread as its successor and waits for a
    // reply that does not come (the socket timeout, 12 s).
    let release = thread::spawn(move || held.unlock());
    let (took, got) = waiter.join().unwrap();
    server.signal("CONT");
    let _ = release.join().unwrap();
    assert!(
        took <= Duration::from_millis(600) + SLACK,
        "{took:?}: {got:?}"
    );
    assert!(!matches!(got, Ok(true)), "{got:?}");
    // Whatever the release did is settled: the lock can be had again.
    assert!(client
        .try_lock_for("queued", Duration::from_secs(5))
        .unwrap()
        .is_some());
}

#[test]
fn a_request_that_never_reached_a_restarted_redis_leaves_nothing_to_undo() {
    // Pooled connections that died with the server are found closed (their
    // request never arrived), then the reconnect is refused: nothing went
    // out, so nothing is undone once a server answers again. (Found by a
    // look before the request on a connection idle for a millisecond or
    // more, `QUIET_UNCHECKED`: one answered within the last millisecond is
    // not looked at, and its request, which may have run, is undone.)
    let mut server = RedisServer::start();
    let client = LockClient::builder(&server.url())
        .connect_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    drop(client.lock("gone:warm").unwrap());
    server.kill();
    thread::sleep(Duration::from_millis(50));
    let e = client.try_lock("gone").unwrap_err();
    assert!(e.is_connection(), "{e:?}");
    server.restart();
    let held = client.try_lock_for("gone", Duration::from_secs(3)).unwrap();
    assert!(held.is_some());
    let calls = server.command_calls();
    assert_eq!(calls.get("hdel"), None, "an undo ran: {calls:?}");
}

#[test]
fn a_last_try_unanswered_within_what_was_left_of_the_wait_ends_it_as_its_deadline() {
    // Redis answered that the lock is held (someone else's, expiring in
    // 1 s), then hung (SIGSTOP once the waiter stands in line: milliseconds,
    // not the second the lock has left). The waiter wakes at the expiry and
    // sends its last try with 1 s of its 2 s wait left, far below its
    // socket timeout (12 s): unanswered by the deadline, that is the wait
    // running out — `Ok(None)`, as if Redis had answered "held" — not
    // `Unavailable`, which a silence shorter than the client's own measure
    // of lateness does not show (a loaded run once reported it for 12 ms).
    // And by its deadline: leaving its place in the line is not waited for
    // on a silent Redis (it was: 14 s, the socket timeout after the wait).
    let server = RedisServer::start();
    let client = long_timeout_client(&server);
    drop(client.lock("tail:warm").unwrap());
    let mut con = server.connection();
    redis::pipe()
        .hset("tail", "6f1c2a3e-5b7d-4c8e-9a0b-1c2d3e4f5a6b:1", 1)
        .pexpire("tail", 1_000)
        .exec(&mut con)
        .unwrap();
    let started = Instant::now();
    let wait = Duration::from_secs(2);
    let waiting = {
        let client = client.clone();
        thread::spawn(move || client.try_lock_for("tail", wait).map(|g| g.is_some()))
    };
    // In line: its first attempt ran, and its reply left Redis before this
    // read's did.
    let line = "leasehold_line:{tail}";
    while redis::cmd("LLEN").arg(line).query::<i64>(&mut con).unwrap() == 0 {
        thread::sleep(Duration::from_millis(1));
    }
    // Held on past the wake-up, with no unlock message.
    redis::cmd("PEXPIRE")
        .arg("tail")
        .arg(60_000)
        .exec(&mut con)
        .unwrap();
    server.signal("STOP");
    let got = waiting.join().unwrap();
    let took = started.elapsed();
    server.signal("CONT");
    assert!(
        matches!(got, Ok(false)),
        "after {took:?}: {got:?} (Redis answered every try but the last)"
    );
    assert!(took <= wait + SLACK, "{took:?}");
    // Redis is back: the lock is still the other owner's, nothing of the
    // waiter's is left in it.
    let fields: Vec<String> = redis::cmd("HKEYS").arg("tail").query(&mut con).unwrap();
    assert_eq!(fields, ["6f1c2a3e-5b7d-4c8e-9a0b-1c2d3e4f5a6b:1"]);
    // Its place in the line was not left by the wait (the leave's reply
    // would have been waited for up to 12 s, past the deadline): the undo
    // thread leaves it now that Redis answers, long before it would expire.
    let expires_in: i64 = redis::cmd("PTTL").arg(line).query(&mut con).unwrap();
    assert!(
        expires_in == -2 || expires_in > 3_000,
        "{expires_in} ms: gone already, or it would stay seconds more"
    );
    let left_by = Instant::now() + Duration::from_millis(1_500);
    while redis::cmd("EXISTS")
        .arg(line)
        .query::<bool>(&mut con)
        .unwrap()
    {
        assert!(Instant::now() < left_by, "the waiting place was not left");
        thread::sleep(Duration::from_millis(20));
    }
}
