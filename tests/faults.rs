//! Faults with real processes and a real Redis: a holder SIGKILLed or
//! SIGSTOPped past its lease, a panic inside the critical section, and
//! `redis-server` killed and restarted empty while guards are held and
//! waiters park. Every child process is killed by pid at the end.

#[path = "child/holder.rs"]
mod child;
mod support;

use std::process::{Child, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use leasehold::{FencedStore, LeaseLost, LockClient, LockOptions};
use redis::Commands;
use support::{check_history, eventually, ChildProcess, RedisServer};

/// A lock holder in its own process (`tests/child/holder.rs`).
struct Holder {
    process: ChildProcess,
    token: u64,
}

impl Holder {
    fn start(url: &str, name: &str, lease: Duration) -> Holder {
        let lease = lease.as_millis().to_string();
        let mut process = ChildProcess::start(&[url, name, &lease]);
        let line = process.line();
        let token = line
            .strip_prefix("held ")
            .and_then(|t| t.trim().parse().ok())
            .unwrap_or_else(|| panic!("child did not take the lock: {line:?}"));
        Holder { process, token }
    }

    fn ask(&mut self, command: &str) -> String {
        self.process.ask(command)
    }

    fn signal(&self, sig: &str) {
        self.process.signal(sig);
    }
}

#[test]
fn a_sigkilled_holder_is_replaced_within_its_lease() {
    let server = RedisServer::start();
    let lease = Duration::from_millis(1_000);
    let holder = Holder::start(&server.url(), "job:killed", lease);
    let client = LockClient::new(&server.url()).unwrap();
    holder.signal("KILL");
    let killed = Instant::now();
    let guard = client.lock("job:killed").unwrap();
    let waited = killed.elapsed();
    assert!(
        waited < lease + Duration::from_secs(2),
        "taken over {waited:?} after the kill (lease {lease:?})"
    );
    assert!(guard.is_held());
}

#[test]
fn a_paused_holder_is_fenced_off_and_cannot_release_the_new_lock() {
    let server = RedisServer::start();
    let lease = Duration::from_millis(900);
    let mut stale = Holder::start(&server.url(), "job:paused", lease);
    let store = FencedStore::new("resource:paused");
    let mut con = server.connection();
    assert_eq!(stale.ask("write resource:paused from-stale"), "wrote true");

    // The holder (and its renewal thread) stops; its lease runs out.
    stale.signal("STOP");
    let client = LockClient::new(&server.url()).unwrap();
    let fresh = client
        .lock_with("job:paused", LockOptions::new().fenced())
        .unwrap();
    let token = fresh.fence().unwrap();
    assert!(token > stale.token, "{token} after {}", stale.token);
    assert!(store.write(&mut con, token, "from-new").unwrap());

    // It wakes up believing it holds the lock.
    stale.signal("CONT");
    let mut status = String::new();
    assert!(
        eventually(Duration::from_secs(5), || {
            status = stale.ask("status");
            status.contains("held=false") && !status.contains("lost=none")
        }),
        "the stale guard reports the lease lost (is_held and the lost signal): {status}"
    );
    assert_eq!(
        stale.ask("write resource:paused from-stale-again"),
        "wrote false",
        "the fence refuses the stale holder"
    );
    assert_eq!(stale.ask("unlock"), "unlock not-held");
    assert!(fresh.is_held());
    let owners: Vec<String> = con.hkeys("job:paused").unwrap();
    assert_eq!(
        owners.len(),
        1,
        "the new holder's lock is intact: {owners:?}"
    );
    assert_eq!(
        store.read(&mut con).unwrap(),
        Some((token, "from-new".to_owned()))
    );
    fresh.unlock().unwrap();
}

#[test]
fn a_panic_inside_the_critical_section_releases_the_lock() {
    let server = RedisServer::start();
    let client = LockClient::new(&server.url()).unwrap();
    let c = client.clone();
    let result = thread::spawn(move || {
        let _guard = c.lock("job:panics").unwrap();
        panic!("the job failed halfway");
    })
    .join();
    assert!(result.is_err(), "the thread panicked");
    let exists: bool = server.connection().exists("job:panics").unwrap();
    assert!(!exists, "Drop released the lock while unwinding");
    assert!(client.try_lock("job:panics").unwrap().is_some());
}

#[test]
fn redis_restarted_empty_while_locks_are_held_and_waiters_park() {
    let mut server = RedisServer::start();
    let client = LockClient::builder(&server.url())
        .watchdog_lease(Duration::from_millis(1_500))
        .socket_timeout(Duration::from_millis(500))
        .connect_timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    let held = client
        .lock_with("job:restart", LockOptions::new().fenced())
        .unwrap();
    let first_token = held.fence().unwrap();
    let lost = held.lost().receiver();
    // The waiter rides the outage out for its connect timeout: 30 s, far
    // past the kill, probe and restart below (a fraction of a second; a few
    // on a loaded machine, where the default 5 s could run out first).
    let other = LockClient::builder(&server.url())
        .connect_timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let waiter = {
        let other = other.clone();
        thread::spawn(move || {
            let g = other.lock_with("job:restart", LockOptions::new().fenced());
            g.map(|g| g.fence())
        })
    };
    assert!(eventually(Duration::from_secs(10), || client
        .stats()
        .live_leases
        == 1));
    // The waiter parks (its first attempt must reach the server before it
    // goes down: a wait rides out an outage only once it waits).
    assert!(eventually(Duration::from_secs(10), || other
        .stats()
        .waiters_parked
        == 1));

    let probe = LockClient::builder(&server.url())
        .connect_timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    server.kill();
    // While Redis is down, calls fail with typed errors, quickly.
    let started = Instant::now();
    let e = probe.try_lock("job:other").unwrap_err();
    assert!(e.is_connection(), "{e:?}");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    server.restart();

    // The holder learns that its lease is gone …
    let why = lost
        .recv_timeout(Duration::from_secs(10))
        .expect("the lost signal");
    assert!(
        matches!(why, LeaseLost::NotOurs | LeaseLost::Unreachable),
        "{why:?}"
    );
    assert!(!held.is_held());
    // … the parked waiter gets the lock on the restarted server, with a
    // token above the one issued before the restart …
    let token = waiter
        .join()
        .unwrap()
        .expect("the waiter's lock after the restart")
        .expect("a fenced token");
    assert!(token > first_token, "{token} after {first_token}");
    // … and the old guard's unlock touches nothing.
    assert!(held.unlock().unwrap_err().is_not_held());
    // The client's pooled connections died with the old server; a new lock
    // works at once (dead connections are skipped, not reported).
    let after = client.try_lock("job:after-restart").unwrap();
    assert!(after.is_some());
}

fn checker(url: &str, names: &str, threads: u32, per_thread: u32, tag: &str) -> Child {
    support::child_command(&[
        "check",
        url,
        names,
        &threads.to_string(),
        &per_thread.to_string(),
        tag,
        "2000",
    ])
    .stdout(Stdio::piped())
    .spawn()
    .expect("start a checker process")
}

fn sections_done(child: Child) -> u64 {
    support::child_done(&child.wait_with_output().unwrap())
}

#[test]
fn processes_and_threads_never_overlap_in_twenty_thousand_sections() {
    let server = RedisServer::start();
    let names = ["mx:a", "mx:b", "mx:c"];
    let children: Vec<Child> = (0..4)
        .map(|p| checker(&server.url(), &names.join(","), 4, 1_250, &format!("p{p}")))
        .collect();
    let done: u64 = children.into_iter().map(sections_done).sum();
    assert_eq!(done, 20_000);
    let (finished, unfinished) = check_history(&mut server.connection(), &names, None);
    assert_eq!((finished, unfinished), (20_000, 0));
}

#[test]
fn a_process_killed_mid_run_costs_only_its_unfinished_section() {
    let server = RedisServer::start();
    let names = ["mk:a", "mk:b", "mk:c"];
    let mut children: Vec<Child> = (0..4)
        .map(|p| checker(&server.url(), &names.join(","), 4, 400, &format!("p{p}")))
        .collect();
    let mut con = server.connection();
    let started = |con: &mut redis::Connection| -> usize {
        names
            .iter()
            .map(|n| con.llen::<_, usize>(format!("events:{n}")).unwrap())
            .sum()
    };
    assert!(eventually(Duration::from_secs(20), || started(&mut con) >= 1_000));
    let mut victim = children.remove(0);
    let _ = victim.kill(); // SIGKILL, mid-run
    let _ = victim.wait();
    let done: u64 = children.into_iter().map(sections_done).sum();
    assert_eq!(done, 3 * 4 * 400, "the other processes finished");
    let (finished, unfinished) = check_history(&mut con, &names, Some("p0"));
    assert!(
        finished >= done,
        "{finished} finished, {done} by the survivors"
    );
    assert!(
        unfinished <= 4,
        "at most one open section per killed thread: {unfinished}"
    );
}

#[test]
fn a_bounded_wait_started_during_a_short_outage_rides_it_out() {
    let mut server = RedisServer::start();
    let client = LockClient::builder(&server.url())
        .connect_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    drop(client.lock("outage:warm").unwrap());
    server.kill();
    // One attempt still fails at once.
    let started = Instant::now();
    let e = client.try_lock("outage:job").unwrap_err();
    assert!(e.is_connection(), "{e:?}");
    assert!(started.elapsed() < Duration::from_secs(3));
    // A bounded wait rides the outage out, up to its deadline (not the
    // 300 ms connect timeout): Redis is back after 1 s, and the lock comes
    // within seconds of that, not at the end of the minute's wait.
    let c = client.clone();
    let started = Instant::now();
    let waiter = thread::spawn(move || {
        c.try_lock_for("outage:job", Duration::from_secs(60))
            .map(|g| g.is_some())
    });
    thread::sleep(Duration::from_secs(1));
    server.restart();
    let got = waiter.join().unwrap();
    assert!(matches!(got, Ok(true)), "{got:?}");
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "{:?}",
        started.elapsed()
    );
    // A bounded wait whose deadline comes first gives up with the error.
    server.kill();
    let started = Instant::now();
    let e = client
        .try_lock_for("outage:job2", Duration::from_millis(500))
        .unwrap_err();
    assert!(e.is_connection(), "{e:?}");
    assert!(started.elapsed() < Duration::from_secs(3));
}

/// Issue 14 (4): a process stopped and continued while it waits for a reply
/// (a debugger, a container freezer, `kill -STOP`) goes on as if nothing
/// happened: a socket read with a timeout fails with `EINTR` after `SIGCONT`
/// on Linux, and the call reads on instead of reporting it.
#[test]
fn a_process_paused_and_resumed_mid_call_fails_no_call() {
    let server = RedisServer::start();
    let mut child = ChildProcess::start(&["cycle", &server.url(), "paused"]);
    assert_eq!(child.line(), "started");
    for _ in 0..40 {
        child.signal("STOP");
        thread::sleep(Duration::from_millis(20));
        child.signal("CONT");
        thread::sleep(Duration::from_millis(30));
    }
    let done = child.ask("stop");
    let mut words = done.split_whitespace();
    let (sections, failed) = match (words.next(), words.next(), words.next(), words.next()) {
        (Some("done"), Some(n), Some("failed"), Some(f)) => {
            (n.parse::<u64>().unwrap(), f.parse::<u64>().unwrap())
        }
        _ => panic!("unexpected answer {done:?}"),
    };
    assert_eq!(
        failed, 0,
        "calls failed across pauses ({sections} sections)"
    );
    assert!(sections > 100, "the child barely ran: {sections} sections");
}
