//! The read/write lock: readers overlap across processes, a writer is alone,
//! writers are not starved by readers, downgrade, refused upgrade, wake-ups,
//! renewal and lost leases, crashed readers, Redisson's layout, one cluster
//! slot.

#[path = "child/holder.rs"]
mod child;
mod support;

use std::collections::HashMap;
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use leasehold::{LockClient, LockOptions};
use redis::Commands;
use support::{eventually, ChildProcess, RedisServer};

fn hash(con: &mut redis::Connection, name: &str) -> HashMap<String, String> {
    con.hgetall(name).unwrap()
}

/// The owner fields of a read/write lock hash (everything but `mode`).
fn owners(con: &mut redis::Connection, name: &str) -> Vec<String> {
    let mut v: Vec<String> = hash(con, name)
        .into_keys()
        .filter(|k| k != "mode")
        .collect();
    v.sort();
    v
}

fn writers_waiting(con: &mut redis::Connection, name: &str) -> usize {
    con.zcard(format!("{{{name}}}:rwlock_write_waiters"))
        .unwrap()
}

#[test]
fn readers_of_two_clients_hold_at_once_in_redissons_layout() {
    let server = RedisServer::start();
    let a = LockClient::new(&server.url()).unwrap();
    let b = LockClient::new(&server.url()).unwrap();
    let mut con = server.connection();
    let inside = Arc::new(AtomicUsize::new(0));
    let release = Arc::new(AtomicBool::new(false));
    let threads: Vec<_> = (0..5)
        .map(|i| {
            let c = if i < 4 { a.clone() } else { b.clone() };
            let (inside, release) = (inside.clone(), release.clone());
            thread::spawn(move || {
                let g = c.read_lock("rw:share").unwrap();
                inside.fetch_add(1, Ordering::SeqCst);
                while !release.load(Ordering::SeqCst) {
                    thread::sleep(Duration::from_millis(5));
                }
                g.unlock().unwrap();
            })
        })
        .collect();
    // All five hold at the same time: readers do not exclude each other,
    // not in one client (no in-process queue) and not across clients.
    assert!(
        eventually(Duration::from_secs(5), || inside.load(Ordering::SeqCst)
            == 5),
        "only {} readers got in",
        inside.load(Ordering::SeqCst)
    );
    let h = hash(&mut con, "rw:share");
    assert_eq!(h.get("mode").map(String::as_str), Some("read"));
    let fields = owners(&mut con, "rw:share");
    assert_eq!(fields.len(), 5, "{h:?}");
    for field in &fields {
        assert_eq!(h[field], "1");
        let timeout = format!("{{rw:share}}:{field}:rwlock_timeout:1");
        let ttl: i64 = con.pttl(&timeout).unwrap();
        assert!(ttl > 0 && ttl <= 30_000, "{timeout}: {ttl}");
    }
    // Nobody may write meanwhile.
    let w = LockClient::new(&server.url()).unwrap();
    assert!(w
        .try_write_lock_for("rw:share", Duration::from_millis(100))
        .unwrap()
        .is_none());
    release.store(true, Ordering::SeqCst);
    for t in threads {
        t.join().unwrap();
    }
    let exists: bool = con.exists("rw:share").unwrap();
    assert!(!exists, "the last reader deletes the hash");
    let keys: Vec<String> = con.keys("{rw:share}:*").unwrap();
    assert!(keys.is_empty(), "timeout keys left: {keys:?}");
}

#[test]
fn reentrant_holds_count_per_owner_and_unlocks_publish_redissons_messages() {
    let server = RedisServer::start();
    let client = LockClient::new(&server.url()).unwrap();
    let mut con = server.connection();
    let mut sub_con = server.connection();
    let mut pubsub = sub_con.as_pubsub();
    pubsub.subscribe("redisson_rwlock:{rw:msg}").unwrap();
    pubsub
        .set_read_timeout(Some(Duration::from_secs(3)))
        .unwrap();

    let r1 = client.read_lock("rw:msg").unwrap();
    let r2 = client.read_lock("rw:msg").unwrap();
    let fields = owners(&mut con, "rw:msg");
    assert_eq!(fields.len(), 1);
    let owner = fields[0].clone();
    assert_eq!(hash(&mut con, "rw:msg")[&owner], "2");
    for n in [1, 2] {
        let exists: bool = con
            .exists(format!("{{rw:msg}}:{owner}:rwlock_timeout:{n}"))
            .unwrap();
        assert!(exists, "timeout key {n}");
    }
    drop(r2);
    assert_eq!(hash(&mut con, "rw:msg")[&owner], "1");
    r1.unlock().unwrap();
    let msg = pubsub.get_message().unwrap();
    assert_eq!(
        msg.get_payload::<String>().unwrap(),
        "0",
        "a read unlock wakes one"
    );

    let w1 = client.write_lock("rw:msg").unwrap();
    let w2 = client.write_lock("rw:msg").unwrap();
    let h = hash(&mut con, "rw:msg");
    assert_eq!(h.get("mode").map(String::as_str), Some("write"));
    assert_eq!(
        h.get(&format!("{owner}:write")).map(String::as_str),
        Some("2")
    );
    drop(w2);
    w1.unlock().unwrap();
    let msg = pubsub.get_message().unwrap();
    assert_eq!(
        msg.get_payload::<String>().unwrap(),
        "1",
        "a write unlock wakes all"
    );
    let exists: bool = con.exists("rw:msg").unwrap();
    assert!(!exists);
}

#[test]
fn a_write_unlock_wakes_every_waiting_reader_at_once() {
    let server = RedisServer::start();
    let writer = LockClient::new(&server.url()).unwrap();
    let a = LockClient::new(&server.url()).unwrap();
    let b = LockClient::new(&server.url()).unwrap();
    let w = writer.write_lock("rw:wake").unwrap();
    let got = Arc::new(AtomicUsize::new(0));
    let release = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..4)
        .map(|i| {
            let c = if i < 3 { a.clone() } else { b.clone() };
            let (got, release) = (got.clone(), release.clone());
            thread::spawn(move || {
                let g = c.read_lock("rw:wake").unwrap();
                got.fetch_add(1, Ordering::SeqCst);
                while !release.load(Ordering::SeqCst) {
                    thread::sleep(Duration::from_millis(5));
                }
                drop(g);
            })
        })
        .collect();
    assert!(eventually(Duration::from_secs(5), || a
        .stats()
        .waiters_parked
        == 3
        && b.stats().waiters_parked == 1));
    assert_eq!(got.load(Ordering::SeqCst), 0);
    let released = Instant::now();
    w.unlock().unwrap();
    // Woken by the one `1` message: no reader waits for the writer's 30 s
    // lease (with a wake-one message three of them would).
    assert!(
        eventually(Duration::from_secs(3), || got.load(Ordering::SeqCst) == 4),
        "{} of 4 readers got in",
        got.load(Ordering::SeqCst)
    );
    assert!(released.elapsed() < Duration::from_secs(3));
    release.store(true, Ordering::SeqCst);
    for r in readers {
        r.join().unwrap();
    }
}

#[test]
fn a_writer_may_read_and_keep_reading_but_a_reader_may_not_upgrade() {
    let server = RedisServer::start();
    let client = LockClient::new(&server.url()).unwrap();
    let other = LockClient::new(&server.url()).unwrap();
    let mut con = server.connection();
    let w = client.write_lock("rw:down").unwrap();
    let r = client.read_lock("rw:down").unwrap(); // at once: the writer reads
    assert!(other
        .try_read_lock_for("rw:down", Duration::from_millis(100))
        .unwrap()
        .is_none());
    // A reader of another client waits for the writer …
    let waiting = {
        let other = other.clone();
        thread::spawn(move || {
            let g = other.read_lock("rw:down").unwrap();
            let at = Instant::now();
            drop(g);
            at
        })
    };
    assert!(eventually(Duration::from_secs(5), || other
        .stats()
        .waiters_parked
        == 1));
    // … and gets in when the writer stops writing but keeps reading: the
    // downgrade publishes a wake-up (Redisson's does not).
    let downgraded = Instant::now();
    w.unlock().unwrap();
    assert_eq!(hash(&mut con, "rw:down")["mode"], "read");
    let got_in = waiting.join().unwrap();
    assert!(
        got_in.duration_since(downgraded) < Duration::from_secs(2),
        "the waiting reader took {:?}",
        got_in.duration_since(downgraded)
    );
    // Still a read lock: other writers wait.
    assert!(other
        .try_write_lock_for("rw:down", Duration::from_millis(100))
        .unwrap()
        .is_none());
    // Upgrading would wait for ourselves: refused at once, nothing changed.
    let asked = Instant::now();
    let err = client.write_lock("rw:down").unwrap_err();
    assert!(
        matches!(err, leasehold::Error::UpgradeWouldDeadlock { .. }),
        "{err}"
    );
    assert!(asked.elapsed() < Duration::from_secs(1));
    assert!(err.to_string().contains("drop the read guard first"));
    assert_eq!(hash(&mut con, "rw:down")["mode"], "read");
    assert_eq!(owners(&mut con, "rw:down").len(), 1);
    drop(r);
    let exists: bool = con.exists("rw:down").unwrap();
    assert!(!exists);
    // Fencing tokens are for exclusive locks only.
    let err = client
        .lock_with("rw:down", LockOptions::new().write().fenced())
        .unwrap_err();
    assert!(err.to_string().contains("fencing"), "{err}");
}

#[test]
fn a_steady_stream_of_readers_does_not_starve_a_writer() {
    let server = RedisServer::start();
    let readers: Vec<LockClient> = (0..2)
        .map(|_| LockClient::new(&server.url()).unwrap())
        .collect();
    let writer = LockClient::new(&server.url()).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let inside = Arc::new(AtomicUsize::new(0));
    let reads = Arc::new(AtomicUsize::new(0));
    let overlap = Arc::new(AtomicBool::new(false));
    let writing = Arc::new(AtomicBool::new(false));
    // Four readers holding 40 ms each, staggered by 10 ms: from the first
    // moment on there is always a reader inside, so without a writer
    // preference the hash never goes away and the writer never gets in.
    let threads: Vec<_> = (0..4)
        .map(|i| {
            let c = readers[i % 2].clone();
            let (stop, inside, reads, overlap, writing) = (
                stop.clone(),
                inside.clone(),
                reads.clone(),
                overlap.clone(),
                writing.clone(),
            );
            thread::spawn(move || {
                thread::sleep(Duration::from_millis(10 * i as u64));
                while !stop.load(Ordering::SeqCst) {
                    let g = c.read_lock("rw:stream").unwrap();
                    inside.fetch_add(1, Ordering::SeqCst);
                    if writing.load(Ordering::SeqCst) {
                        overlap.store(true, Ordering::SeqCst);
                    }
                    thread::sleep(Duration::from_millis(40));
                    inside.fetch_sub(1, Ordering::SeqCst);
                    reads.fetch_add(1, Ordering::SeqCst);
                    drop(g);
                }
            })
        })
        .collect();
    assert!(
        eventually(Duration::from_secs(5), || inside.load(Ordering::SeqCst) > 0),
        "readers are streaming"
    );
    let asked = Instant::now();
    let w = writer
        .try_write_lock_for("rw:stream", Duration::from_secs(5))
        .unwrap();
    let waited = asked.elapsed();
    let w = w.expect("the writer was starved by the readers for 5 s");
    writing.store(true, Ordering::SeqCst);
    assert_eq!(
        inside.load(Ordering::SeqCst),
        0,
        "a reader is inside with the writer"
    );
    assert!(
        waited < Duration::from_secs(2),
        "the writer waited {waited:?}"
    );
    thread::sleep(Duration::from_millis(200));
    writing.store(false, Ordering::SeqCst);
    let before = reads.load(Ordering::SeqCst);
    w.unlock().unwrap();
    // Readers go on after the writer.
    assert!(eventually(Duration::from_secs(3), || reads
        .load(Ordering::SeqCst)
        >= before + 4));
    stop.store(true, Ordering::SeqCst);
    for t in threads {
        t.join().unwrap();
    }
    assert!(
        !overlap.load(Ordering::SeqCst),
        "a reader overlapped the writer"
    );
}

#[test]
fn a_writer_that_gives_up_leaves_and_lets_readers_in() {
    let server = RedisServer::start();
    let reader = LockClient::new(&server.url()).unwrap();
    let writer = LockClient::new(&server.url()).unwrap();
    let late = LockClient::new(&server.url()).unwrap();
    let mut con = server.connection();
    let r = reader.read_lock("rw:giveup").unwrap();
    let impatient = {
        let writer = writer.clone();
        thread::spawn(move || {
            writer
                // Seconds: the reads below must find it still waiting.
                .try_write_lock_for("rw:giveup", Duration::from_secs(3))
                .unwrap()
                .is_none()
        })
    };
    assert!(eventually(Duration::from_secs(3), || writers_waiting(
        &mut con,
        "rw:giveup"
    ) == 1));
    // While it waits, a new reader waits behind it …
    assert!(late
        .try_read_lock_for("rw:giveup", Duration::from_millis(100))
        .unwrap()
        .is_none());
    // … and the holding reader re-enters (it must not wait for the writer
    // that waits for it).
    let again = reader.read_lock("rw:giveup").unwrap();
    assert!(impatient.join().unwrap(), "the writer gave up");
    // Left at once — or, its last try answered after its deadline (a
    // loaded machine), by the undo thread a round trip later.
    assert!(
        support::eventually(Duration::from_millis(300), || writers_waiting(
            &mut con,
            "rw:giveup"
        ) == 0),
        "left at once"
    );
    let got = late.try_read_lock("rw:giveup");
    assert!(
        matches!(got, Ok(Some(_))),
        "a new reader gets in once no writer waits"
    );
    drop((again, r, got));
}

#[test]
fn read_and_write_holds_are_renewed_and_report_loss() {
    let server = RedisServer::start();
    let client = LockClient::builder(&server.url())
        .watchdog_lease(Duration::from_millis(1_500))
        .build()
        .unwrap();
    let mut con = server.connection();
    let r1 = client.read_lock("rw:renew:r").unwrap();
    let r2 = client.read_lock("rw:renew:r").unwrap();
    let w = client.write_lock("rw:renew:w").unwrap();
    let owner = owners(&mut con, "rw:renew:r").remove(0);
    // Half a second past the first lease; renewed every 500 ms, a second
    // to spare.
    thread::sleep(Duration::from_millis(2_000));
    assert!(r1.is_held() && r2.is_held() && w.is_held());
    for n in [1, 2] {
        let ttl: i64 = con
            .pttl(format!("{{rw:renew:r}}:{owner}:rwlock_timeout:{n}"))
            .unwrap();
        assert!(ttl > 0, "read hold {n} renewed: {ttl}");
    }
    let ttl: i64 = con.pttl("rw:renew:w").unwrap();
    assert!(ttl > 0);
    let (lost_r, lost_w) = (r1.lost().receiver(), w.lost().receiver());
    let _: () = con.del(&["rw:renew:r", "rw:renew:w"]).unwrap();
    // Found at the next renewal (within 500 ms).
    assert!(lost_r.recv_timeout(Duration::from_secs(5)).is_ok());
    assert!(lost_w.recv_timeout(Duration::from_secs(5)).is_ok());
    assert!(!r2.is_held());
    assert!(r1.unlock().unwrap_err().is_not_held());
    assert!(w.unlock().unwrap_err().is_not_held());
    drop(r2);
    // An explicit lease is not renewed: it simply ends.
    let short = client
        .lock_with(
            "rw:lease",
            LockOptions::new().read().lease(Duration::from_millis(300)),
        )
        .unwrap();
    thread::sleep(Duration::from_millis(500));
    assert!(!short.is_held());
    let exists: bool = con.exists("rw:lease").unwrap();
    assert!(!exists);
    assert!(client
        .try_write_lock_for("rw:lease", Duration::from_millis(100))
        .unwrap()
        .is_some());
}

/// A `leasehold-test-child rw` process holding read/write holds on command.
fn rw_process(url: &str, name: &str, lease_ms: u64) -> ChildProcess {
    ChildProcess::start(&["rw", url, name, &lease_ms.to_string()])
}

#[test]
fn a_crashed_readers_hold_ends_with_its_lease_even_while_others_read() {
    let server = RedisServer::start();
    let url = server.url();
    let writer = LockClient::new(&url).unwrap();

    // Alone: the writer gets in about one lease (1 s) after the kill.
    let mut crashed = rw_process(&url, "rw:crash", 1_000);
    assert_eq!(crashed.ask("read"), "read ok");
    crashed.kill();
    let killed = Instant::now();
    let w = writer.write_lock("rw:crash").unwrap();
    assert!(
        killed.elapsed() < Duration::from_millis(1_000 + 1_500),
        "the writer waited {:?}",
        killed.elapsed()
    );
    w.unlock().unwrap();

    // Beside a live reader that renews (30 s lease): the crashed reader's
    // hold is not renewed by it, so the live reader's unlock frees the lock
    // at once. (Redisson's renewal extends every reader's timeout keys, so
    // the writer would wait for the crashed one's 30 s more.)
    let live = LockClient::new(&url).unwrap();
    let mut crashed = rw_process(&url, "rw:crash2", 1_000);
    assert_eq!(crashed.ask("read"), "read ok");
    let r = live.read_lock("rw:crash2").unwrap();
    crashed.kill();
    thread::sleep(Duration::from_millis(2_000)); // its lease and more
    let mut con = server.connection();
    assert_eq!(
        owners(&mut con, "rw:crash2").len(),
        2,
        "the dead field stays"
    );
    let waiting = {
        let writer = writer.clone();
        thread::spawn(move || {
            let g = writer.write_lock("rw:crash2").unwrap();
            let at = Instant::now();
            drop(g);
            at
        })
    };
    assert!(eventually(Duration::from_secs(5), || writers_waiting(
        &mut con,
        "rw:crash2"
    ) == 1));
    let released = Instant::now();
    r.unlock().unwrap();
    let got_in = waiting.join().unwrap();
    assert!(
        got_in.duration_since(released) < Duration::from_secs(2),
        "the writer got in {:?} after the live reader left",
        got_in.duration_since(released)
    );
}

/// Replays one name's enter/exit records: no writer overlaps anyone; returns
/// the most readers seen inside at once.
fn replay(events: &[String]) -> usize {
    let mut readers = 0usize;
    let mut writer: Option<&str> = None;
    let mut most = 0;
    for ev in events {
        let mut parts = ev.split(' ');
        let (Some(dir), Some(side), Some(id)) = (parts.next(), parts.next(), parts.next()) else {
            panic!("bad record {ev}");
        };
        match (dir, side) {
            ("E", "R") => {
                assert!(
                    writer.is_none(),
                    "reader {id} entered while {writer:?} wrote"
                );
                readers += 1;
                most = most.max(readers);
            }
            ("X", "R") => readers -= 1,
            ("E", "W") => {
                assert!(
                    writer.is_none() && readers == 0,
                    "writer {id} entered beside {writer:?} and {readers} readers"
                );
                writer = Some(id);
            }
            ("X", "W") => {
                assert_eq!(writer, Some(id), "exit of a writer that was not inside");
                writer = None;
            }
            _ => panic!("bad record {ev}"),
        }
    }
    assert!(writer.is_none() && readers == 0, "sections left open");
    most
}

#[test]
fn processes_read_together_and_every_writer_is_alone() {
    let server = RedisServer::start();
    let url = server.url();
    let (threads, per_thread, every) = (3, 120, 4);
    let children: Vec<Child> = (0..3)
        .map(|p| {
            support::child_command(&[
                "rwcheck",
                &url,
                "rw:check",
                &threads.to_string(),
                &per_thread.to_string(),
                &format!("p{p}"),
                &every.to_string(),
            ])
            .stdout(Stdio::piped())
            .spawn()
            .expect("start a checker process")
        })
        .collect();
    let mut writes = 0u64;
    for child in children {
        writes += support::child_done(&child.wait_with_output().unwrap());
    }
    let mut con = server.connection();
    let events: Vec<String> = con.lrange("events:rw:check", 0, -1).unwrap();
    assert_eq!(events.len(), 2 * 3 * threads * per_thread);
    let most = replay(&events);
    assert!(most > 1, "readers never overlapped");
    let count: u64 = con.get("count:rw:check").unwrap();
    assert_eq!(count, writes, "a write was lost: writers overlapped");
    assert_eq!(writes, 3 * 3 * 30);
}

#[test]
fn the_replay_catches_a_writer_beside_a_reader() {
    let ok = ["E R a", "E R b", "X R a", "X R b", "E W c", "X W c"].map(String::from);
    assert_eq!(replay(&ok), 2);
    let bad = ["E R a", "E W c", "X W c", "X R a"].map(String::from);
    assert!(std::panic::catch_unwind(|| replay(&bad)).is_err());
}

#[test]
fn every_key_and_channel_of_a_read_write_lock_shares_its_cluster_slot() {
    let server = RedisServer::start_cluster_node();
    let mut con = server.connection();
    let a = LockClient::new(&server.url()).unwrap();
    let b = LockClient::new(&server.url()).unwrap();
    let w = LockClient::new(&server.url()).unwrap();
    let ra = a.read_lock("rw:slot").unwrap();
    let rb = b.read_lock("rw:slot").unwrap();
    let waiting = {
        let w = w.clone();
        thread::spawn(move || drop(w.write_lock("rw:slot").unwrap()))
    };
    assert!(eventually(Duration::from_secs(5), || writers_waiting(
        &mut con, "rw:slot"
    ) == 1));
    let key_slot = server.keyslot("rw:slot");
    let mut names: Vec<String> = con.keys("{rw:slot}:*").unwrap();
    assert_eq!(
        names.len(),
        3,
        "two timeout keys and the writer set: {names:?}"
    );
    names.push("redisson_rwlock:{rw:slot}".into());
    for name in &names {
        assert_eq!(server.keyslot(name), key_slot, "{name}");
    }
    // The scripts ran on a cluster node (which refuses keys of other slots),
    // including the read release that looks at another reader's keys.
    drop(ra);
    drop(rb);
    waiting.join().unwrap();
    let exists: bool = con.exists("rw:slot").unwrap();
    assert!(!exists);
}

#[test]
fn waiting_writers_readers_and_fair_waiters_ride_out_a_redis_restart() {
    let mut server = RedisServer::start();
    let url = server.url();
    let holder = LockClient::builder(&url)
        .watchdog_lease(Duration::from_millis(1_500))
        .build()
        .unwrap();
    let waiters = LockClient::builder(&url)
        .connect_timeout(Duration::from_secs(3))
        .socket_timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    let r = holder.read_lock("rw:restart").unwrap();
    let w = holder.write_lock("rw:restart:w").unwrap();
    let f = holder.fair_lock("fair:restart").unwrap();
    let spawn = |f: fn(&LockClient) -> leasehold::Result<leasehold::LockGuard>| {
        let c = waiters.clone();
        thread::spawn(move || f(&c).map(drop))
    };
    let writer = spawn(|c| c.write_lock("rw:restart"));
    let reader = spawn(|c| c.read_lock("rw:restart:w"));
    let fair = spawn(|c| c.fair_lock("fair:restart"));
    assert!(eventually(Duration::from_secs(5), || waiters
        .stats()
        .waiters_parked
        == 3));
    server.kill();
    thread::sleep(Duration::from_millis(300));
    server.restart();
    // All three were waiting when Redis went away; on the restarted (empty)
    // server each gets its lock instead of failing.
    for (what, t) in [("writer", writer), ("reader", reader), ("fair", fair)] {
        t.join().unwrap().unwrap_or_else(|e| panic!("{what}: {e}"));
    }
    drop((r, w, f));
}
