//! Lost replies (issue 14, items 3 and 5): an acquire that ran in Redis but
//! whose reply never came back (Redis paused past the socket timeout) must
//! not leave a hold nobody owns, nor a stale count that the same owner's
//! next lock + unlock leaves behind.

mod support;

use std::thread;
use std::time::{Duration, Instant};

use leasehold::{LockClient, LockOptions};
use redis::Commands;
use support::{eventually, RedisServer};

const SOCKET_TIMEOUT: Duration = Duration::from_millis(400);

fn client(server: &RedisServer) -> LockClient {
    LockClient::builder(&server.url())
        .socket_timeout(SOCKET_TIMEOUT)
        .connect_timeout(Duration::from_millis(400))
        .build()
        .unwrap()
}

/// Pauses Redis across one `try_lock_with(name, opts)` (which times out),
/// then resumes it; returns when Redis answers again.
fn lose_an_acquire_reply(server: &RedisServer, client: &LockClient, name: &str, opts: LockOptions) {
    // Connections and scripts are warm, so the attempt is one EVALSHA.
    drop(
        client
            .try_lock_with(&format!("{name}:warm"), opts.clone())
            .unwrap(),
    );
    server.signal("STOP");
    let started = Instant::now();
    let e = client.try_lock_with(name, opts).unwrap_err();
    assert!(e.is_timeout(), "{e:?}");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    server.signal("CONT");
}

/// Whether `other` gets lock `name` of `kind` within a second (a writer
/// asks for a read lock: a reader would share a stale read hold).
fn gets_in(other: &LockClient, name: &str, kind: &str, opts: LockOptions) -> bool {
    let probe = if kind == "read" {
        LockOptions::new().write()
    } else {
        opts
    };
    let got = other.try_lock_with(name, probe.wait(Duration::from_secs(1)));
    got.unwrap().is_some()
}

fn kinds() -> [(&'static str, LockOptions); 4] {
    [
        ("plain", LockOptions::new()),
        ("fair", LockOptions::new().fair()),
        ("read", LockOptions::new().read()),
        ("write", LockOptions::new().write()),
    ]
}

#[test]
fn a_timed_out_acquire_leaves_no_hold_behind_once_redis_answers() {
    let server = RedisServer::start();
    let client = client(&server);
    let mut con = server.connection();
    for (kind, opts) in kinds() {
        let name = format!("orphan:{kind}");
        lose_an_acquire_reply(&server, &client, &name, opts);
        let resumed = Instant::now();
        // Undone about 100 ms after the resume (the undo's next try);
        // otherwise the hold would stay for its 30 s lease.
        assert!(
            eventually(Duration::from_secs(5), || !con
                .exists::<_, bool>(&name)
                .unwrap()),
            "{kind}: the hold of the lost reply is still there (PTTL {:?} ms)",
            con.pttl::<_, i64>(&name)
        );
        let took = resumed.elapsed();
        eprintln!("{kind}: the lost hold was undone {took:?} after the resume");
        assert!(
            took < Duration::from_secs(3),
            "{kind}: undone after {took:?}"
        );
        // The waiting places of fair and write acquires are gone too.
        let other: Vec<String> = con.keys(format!("*{name}*")).unwrap();
        assert!(other.is_empty(), "{kind}: left behind: {other:?}");
    }
}

#[test]
fn after_a_lost_reply_the_same_threads_lock_and_unlock_leave_the_lock_free() {
    let server = RedisServer::start();
    let client = client(&server);
    let other = LockClient::new(&server.url()).unwrap();
    for (kind, opts) in kinds() {
        let name = format!("stale:{kind}");
        lose_an_acquire_reply(&server, &client, &name, opts.clone());
        // At once, before anything else could tidy up: the same thread
        // locks and unlocks.
        let g = client
            .lock_with(&name, opts.clone().wait(Duration::from_secs(5)))
            .unwrap();
        g.unlock().unwrap();
        assert!(
            gets_in(&other, &name, kind, opts),
            "{kind}: another client is shut out"
        );
    }
}

/// A thread's lost reply must never be undone after that thread holds the
/// lock again — here handed over in-process by another holder of the
/// client, which sends no attempt of its own: the undo runs before the
/// thread even queues (or in the background before that).
#[test]
fn an_undo_never_releases_a_later_hold_of_the_same_thread() {
    let server = RedisServer::start();
    let client = client(&server);
    let mut con = server.connection();
    let name = "orphan:handoff";
    lose_an_acquire_reply(&server, &client, name, LockOptions::new());
    let holder = {
        let client = client.clone();
        thread::spawn(move || client.lock_owned(name).unwrap())
    }
    .join()
    .unwrap();
    let release = thread::spawn(move || {
        thread::sleep(Duration::from_millis(100));
        drop(holder); // hands over to this test's thread, queued meanwhile
    });
    let g = client.lock(name).unwrap();
    release.join().unwrap();
    thread::sleep(Duration::from_millis(1_500));
    assert!(g.is_held());
    assert!(
        con.exists::<_, bool>(name).unwrap(),
        "the later hold was undone"
    );
    g.unlock().expect("still ours");
}

/// A reentrant acquire whose reply was lost may have counted one hold more
/// in Redis; the owner's last release still frees the lock (fair, read and
/// write locks count holds in Redis, as the plain lock does).
#[test]
fn the_last_release_frees_the_lock_after_a_lost_reentrant_reply() {
    let server = RedisServer::start();
    let client = client(&server);
    let other = LockClient::new(&server.url()).unwrap();
    for (kind, opts) in kinds() {
        let name = format!("reentrant:{kind}");
        let outer = client.lock_with(&name, opts.clone()).unwrap();
        lose_an_acquire_reply(&server, &client, &name, opts.clone());
        thread::sleep(Duration::from_millis(200)); // Redis ran it meanwhile
        outer.unlock().unwrap();
        assert!(
            gets_in(&other, &name, kind, opts),
            "{kind}: a stale count shuts others out"
        );
    }
}

/// A release whose reply was lost — Redis paused past the socket timeout
/// while the holder unlocked — is sent again once Redis answers, also when
/// the server had never run the release script (a fresh server's script
/// cache is empty: the lost `EVALSHA` is refused `NOSCRIPT` after the
/// resume, and the retry loads the script): the waiter gets the lock soon
/// after the resume (within 100 ms or so; 3 s allowed), not when the lease
/// (about 27 s left) runs out, and `unlock()` says the release is pending.
#[test]
fn a_release_sent_during_a_pause_is_sent_again_and_the_waiter_gets_in() {
    for cached in [false, true] {
        let server = RedisServer::start(); // fresh: no script loaded yet
        let holder = LockClient::new(&server.url()).unwrap();
        let waiter = LockClient::new(&server.url()).unwrap();
        if cached {
            holder.lock("warm").unwrap().unlock().unwrap();
        }
        let guard = holder.lock("x").unwrap();
        let waiting = thread::spawn(move || {
            let got = waiter.try_lock_for("x", Duration::from_secs(12));
            (Instant::now(), got.map(|g| g.is_some()))
        });
        assert!(eventually(Duration::from_secs(5), || holder
            .inspect("x")
            .unwrap()
            .waiters
            .len()
            == 1));
        server.signal("STOP");
        let stopped = Instant::now();
        let e = guard.unlock().unwrap_err();
        let resume_at = stopped + Duration::from_millis(3_200);
        thread::sleep(resume_at.saturating_duration_since(Instant::now()));
        server.signal("CONT");
        let resumed = Instant::now();
        assert!(e.is_release_pending(), "cached {cached}: {e:?}");
        assert!(e.to_string().contains("sent again"), "{e}");
        let (got_at, got) = waiting.join().unwrap();
        assert!(matches!(got, Ok(true)), "cached {cached}: {got:?}");
        let after = got_at.saturating_duration_since(resumed);
        eprintln!("cached {cached}: the waiter got in {after:?} after the resume");
        assert!(
            after < Duration::from_secs(3),
            "cached {cached}: the waiter got in {after:?} after the resume"
        );
    }
}

/// A thread that writes and reads one read/write lock loses both releases
/// on the way (a partition: they never reach Redis): both are sent again,
/// and the lock is free afterwards (a read hold left behind would shut
/// writers out for a whole lease, and make the same thread's next write lock
/// an upgrade).
#[test]
fn lost_releases_of_a_write_and_a_read_hold_are_both_sent_again() {
    use support::proxy::{Fault, FaultProxy};
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port());
    let client = LockClient::builder(&proxy.url())
        .socket_timeout(SOCKET_TIMEOUT)
        .connect_timeout(Duration::from_millis(400))
        .build()
        .unwrap();
    let other = LockClient::new(&server.url()).unwrap();
    let write = client.write_lock("rw:both").unwrap();
    let read = client.read_lock("rw:both").unwrap();
    proxy.set(Fault::Blackhole);
    let r = read.unlock().unwrap_err();
    let w = write.unlock().unwrap_err();
    proxy.set(Fault::Forward);
    assert!(
        r.is_release_pending() && w.is_release_pending(),
        "{r:?} / {w:?}"
    );
    let got = other.try_lock_with(
        "rw:both",
        LockOptions::new().write().wait(Duration::from_secs(3)),
    );
    assert!(
        matches!(got, Ok(Some(_))),
        "another writer is shut out: {got:?}"
    );
    drop(got);
    let again = client.write_lock("rw:both");
    assert!(again.is_ok(), "{again:?}");
}
