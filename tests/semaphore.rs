//! Semaphores with leased permits (issue 28): never more than N inside
//! across processes, permits of a killed holder come back within a lease, a
//! working holder keeps its permits, a permit taken back is reported; one
//! waiter woken per released permit (commands counted); Redisson's
//! expirable semaphore on the wire shares one semaphore with us.

#[path = "child/semaphore.rs"]
mod child;
mod support;

use std::time::{Duration, Instant};

use leasehold::{LockClient, SemaphoreOptions};
use redis::Commands;
use support::proxy::{Fault, FaultProxy};
use support::redisson_semaphore::{RedissonSemaphore, Tried};
use support::{child_command, children_done, ChildProcess, RedisServer};

/// Replays `events:<name>`: the most sections open at once, and the
/// sections each worker (`<tag>.<thread>`) finished.
fn replay(
    con: &mut redis::Connection,
    name: &str,
) -> (usize, std::collections::HashMap<String, u64>) {
    let events: Vec<String> = con.lrange(format!("events:{name}"), 0, -1).unwrap();
    let mut open = std::collections::HashSet::new();
    let (mut most, mut per_worker) = (0, std::collections::HashMap::new());
    for ev in &events {
        let (kind, id) = ev.split_once(' ').unwrap();
        match kind {
            "E" => {
                assert!(open.insert(id.to_owned()), "{id} entered twice");
                most = most.max(open.len());
            }
            "X" => {
                assert!(open.remove(id), "{id} left without entering");
                let worker = id.rsplit_once('.').unwrap().0.to_owned();
                *per_worker.entry(worker).or_insert(0) += 1;
            }
            _ => panic!("bad record {ev:?}"),
        }
    }
    assert!(open.is_empty(), "never left: {open:?}");
    (most, per_worker)
}

#[test]
fn three_permits_four_processes_of_four_threads_never_more_than_three_inside() {
    let server = RedisServer::start();
    let client = LockClient::new(&server.url()).unwrap();
    assert!(client.semaphore("exports").try_set_permits(3).unwrap());
    assert!(!client.semaphore("exports").try_set_permits(7).unwrap());
    const ROUNDS: usize = 40;
    let started = Instant::now();
    let done = children_done(["a", "b", "c", "d"].map(|tag| {
        child_command(&[
            "sem",
            &server.url(),
            "exports",
            "4",
            &ROUNDS.to_string(),
            tag,
        ])
    }));
    println!("{done} sections in {:?}", started.elapsed());
    assert_eq!(done, 16 * ROUNDS as u64);
    let (most, per_worker) = replay(&mut server.connection(), "exports");
    assert!(most <= 3, "{most} inside at once");
    assert_eq!(most, 3, "the permits were used: at most {most} inside");
    assert_eq!(per_worker.len(), 16, "{per_worker:?}");
    assert!(per_worker.values().all(|n| *n == ROUNDS as u64));
    assert_eq!(client.semaphore("exports").available_permits().unwrap(), 3);
    let info = client.semaphore("exports").inspect().unwrap();
    assert!(
        info.holders.is_empty() && info.waiters.is_empty(),
        "{info:?}"
    );
}

#[test]
fn a_holder_killed_holding_two_permits_gives_them_back_within_one_lease() {
    let server = RedisServer::start();
    let lease = Duration::from_millis(1_500);
    let client = LockClient::new(&server.url()).unwrap();
    let sem = client.semaphore("shards");
    sem.set_permits(2).unwrap();
    let mut holder = ChildProcess::start(&["hold", &server.url(), "shards", "2", "1500"]);
    assert_eq!(holder.line(), "held");
    assert_eq!(sem.available_permits().unwrap(), 0);
    // Its renewal runs every 500 ms: after 2 s (more than a lease) it
    // still holds both.
    std::thread::sleep(Duration::from_secs(2));
    assert!(sem.try_acquire().unwrap().is_none());
    holder.kill();
    let killed = Instant::now();
    let both = sem.acquire_with(2, SemaphoreOptions::new().wait(Duration::from_secs(5)));
    let took = killed.elapsed();
    let both = both.unwrap();
    println!("both permits back {took:?} after the kill");
    // Within its lease (renewed every 500 ms: 1 to 1.5 s), with seconds to
    // spare; the 30 s default lease, or never, otherwise.
    assert!(took < lease + Duration::from_secs(2), "{took:?}");
    assert_eq!(both.permits(), 2);
    drop(both);
    assert_eq!(sem.available_permits().unwrap(), 2);
}

/// The line of a semaphore's waiters that all died goes by itself: the
/// list and its places' hash expire a place lease (3 s) after a place was
/// last taken or confirmed, while the permit stays held and no script of
/// another client comes by. (The list had no expiry: it stayed for good —
/// the defect the protocol simulator found in the plain lock's line.)
#[test]
fn the_line_of_semaphore_waiters_that_all_died_goes_by_itself() {
    let server = RedisServer::start();
    let client = LockClient::new(&server.url()).unwrap();
    let sem = client.semaphore("sline");
    sem.set_permits(1).unwrap();
    let permit = sem.acquire().unwrap();
    let line_keys = || -> Vec<String> {
        server
            .connection()
            .keys("leasehold_sline:{sline}*")
            .unwrap()
    };
    let mut waiter = ChildProcess::start(&["sem", &server.url(), "sline", "1", "1", "w"]);
    assert!(
        support::eventually(Duration::from_secs(10), || line_keys().len() == 2),
        "the waiter's place: {:?}",
        line_keys()
    );
    waiter.kill();
    assert!(
        support::eventually(Duration::from_secs(10), || line_keys().is_empty()),
        "left: {:?}",
        line_keys()
    );
    assert!(permit.is_held());
}

/// Leases of 1.5 s, renewed every 500 ms: a second to spare before one
/// could run out; unrenewed, the permit would be free from 1.5 s on.
#[test]
fn a_holder_working_three_leases_keeps_its_permit() {
    let server = RedisServer::start();
    let client = LockClient::builder(&server.url())
        .watchdog_lease(Duration::from_millis(1_500))
        .build()
        .unwrap();
    let sem = client.semaphore("slow");
    sem.set_permits(1).unwrap();
    let permit = sem.acquire().unwrap();
    let lost = permit.lost().receiver();
    let other = LockClient::new(&server.url()).unwrap();
    let other = other.semaphore("slow");
    for _ in 0..6 {
        std::thread::sleep(Duration::from_millis(750));
        assert!(other.try_acquire().unwrap().is_none());
    }
    assert!(permit.is_held());
    assert!(lost.try_recv().is_err());
    permit.unlock().unwrap();
    assert!(other.try_acquire().unwrap().is_some());
}

#[test]
fn a_permit_removed_by_hand_is_reported_by_lost() {
    let server = RedisServer::start();
    let client = LockClient::builder(&server.url())
        .watchdog_lease(Duration::from_millis(600))
        .build()
        .unwrap();
    let sem = client.semaphore("hand");
    sem.set_permits(2).unwrap();
    let permit = sem.acquire().unwrap();
    let ids = permit.ids();
    assert_eq!(ids.len(), 1);
    assert_eq!(ids[0].len(), 32);
    let raw: Vec<u8> = (0..32)
        .step_by(2)
        .map(|i| u8::from_str_radix(&ids[0][i..i + 2], 16).unwrap())
        .collect();
    let mut con = server.connection();
    let removed: i64 = con.zrem("{hand}:timeout", raw).unwrap();
    assert_eq!(removed, 1);
    let why = permit.lost().wait_timeout(Duration::from_secs(2));
    assert!(why.is_some(), "lost() said nothing: {why:?}");
    assert!(!permit.is_held());
    let e = permit.unlock().unwrap_err();
    assert!(e.is_not_held(), "{e:?}");
}

#[test]
fn uncontended_acquire_and_release_are_two_round_trips() {
    let server = RedisServer::start();
    let client = LockClient::new(&server.url()).unwrap();
    let sem = client.semaphore("rt");
    sem.set_permits(2).unwrap();
    sem.acquire().unwrap().unlock().unwrap();
    let monitor = support::Monitor::start(&server);
    const N: usize = 50;
    for _ in 0..N {
        sem.acquire().unwrap().unlock().unwrap();
    }
    let sent = monitor.client_commands_except("leasehold_client:");
    assert_eq!(sent.len(), 2 * N, "{sent:?}");
    assert!(sent.iter().all(|c| c == "evalsha"), "{sent:?}");
}

#[test]
fn eight_waiting_clients_cost_at_most_three_commands_per_acquisition() {
    let server = RedisServer::start();
    let setup = LockClient::new(&server.url()).unwrap();
    setup.semaphore("api").set_permits(2).unwrap();
    const CLIENTS: usize = 8;
    const ROUNDS: usize = 60;
    let clients: Vec<_> = (0..CLIENTS)
        .map(|_| LockClient::new(&server.url()).unwrap())
        .collect();
    // Warm up: pools open, scripts loaded, subscribers connected.
    for c in &clients {
        c.semaphore("api").acquire().unwrap().unlock().unwrap();
    }
    let monitor = support::Monitor::start(&server);
    let started = Instant::now();
    std::thread::scope(|s| {
        for c in &clients {
            s.spawn(move || {
                let sem = c.semaphore("api");
                for _ in 0..ROUNDS {
                    let p = sem.acquire().unwrap();
                    std::thread::sleep(Duration::from_millis(1));
                    drop(p);
                }
            });
        }
    });
    let took = started.elapsed();
    // Every command the clients sent (the scripts' own calls left out),
    // but the registration each client writes every 2 s for operators.
    let sent = monitor.client_commands_except("leasehold_client:");
    let per = sent.len() as f64 / (CLIENTS * ROUNDS) as f64;
    let mut counts = std::collections::BTreeMap::new();
    for c in &sent {
        *counts.entry(c.as_str()).or_insert(0) += 1;
    }
    println!("{per:.2} commands per acquisition ({counts:?}) in {took:?}");
    assert!(per <= 3.0, "{per:.2} commands per acquisition: {counts:?}");
}

#[test]
fn a_bounded_wait_returns_in_time_and_leaves_no_place() {
    let server = RedisServer::start();
    let client = LockClient::new(&server.url()).unwrap();
    let sem = client.semaphore("b");
    sem.set_permits(1).unwrap();
    let held = sem.acquire().unwrap();
    let other = LockClient::new(&server.url()).unwrap();
    let started = Instant::now();
    let got = other
        .semaphore("b")
        .try_acquire_for(Duration::from_millis(300))
        .unwrap();
    let took = started.elapsed();
    assert!(got.is_none());
    // By its deadline (300 ms and a round trip), not when the permit comes
    // back: it is held for the whole test.
    assert!(
        took >= Duration::from_millis(300) && took < Duration::from_secs(3),
        "{took:?}"
    );
    let e = other
        .semaphore("b")
        .acquire_with(1, SemaphoreOptions::new().wait(Duration::from_millis(50)))
        .unwrap_err();
    assert!(e.is_wait_timeout(), "{e:?}");
    // Left at once — a thread's wait leaves its place before it returns —
    // not expired (a place lives 3 s unconfirmed).
    let waiters = sem.inspect().unwrap().waiters;
    assert!(waiters.is_empty(), "{waiters:?}");
    let info = sem.inspect().unwrap();
    assert_eq!(info.holders.len(), 1);
    assert!(info.holders[0].ours);
    drop(held);
    assert!(other.semaphore("b").try_acquire().unwrap().is_some());
    // Bad input is a typed error.
    for e in [
        sem.acquire_many(0).unwrap_err(),
        sem.acquire_many(1_001).unwrap_err(),
        client.semaphore("").acquire().unwrap_err(),
    ] {
        assert!(
            matches!(e, leasehold::Error::InvalidArgument { .. }),
            "{e:?}"
        );
    }
}

#[test]
fn waiters_are_served_in_line_and_inspect_shows_them() {
    let server = RedisServer::start();
    let client = LockClient::new(&server.url()).unwrap();
    let sem = client.semaphore("line");
    sem.set_permits(2).unwrap();
    let first = sem.acquire_many(2).unwrap();
    let order = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|s| {
        // Three waiters of three clients, in this order: 2 permits, then
        // 1, then 1 — the one asking for 2 is not overtaken.
        for (i, permits) in [2u32, 1, 1].into_iter().enumerate() {
            let (url, order) = (server.url(), &order);
            s.spawn(move || {
                let c = LockClient::new(&url).unwrap();
                let p = c.semaphore("line").acquire_many(permits).unwrap();
                order.lock().unwrap().push(i);
                std::thread::sleep(Duration::from_millis(50));
                drop(p);
            });
            let want = i + 1;
            assert!(support::eventually(Duration::from_secs(2), || {
                sem.inspect().unwrap().waiters.len() == want
            }));
        }
        let info = sem.inspect().unwrap();
        assert_eq!(
            info.waiters.iter().map(|w| w.permits).collect::<Vec<_>>(),
            [2, 1, 1]
        );
        assert_eq!(info.holders.len(), 2);
        assert_eq!(info.available, Some(0));
        drop(first);
    });
    assert_eq!(order.into_inner().unwrap()[0], 0);
    assert_eq!(sem.available_permits().unwrap(), 2);
}

#[test]
fn a_redisson_client_and_leasehold_share_one_semaphore() {
    let server = RedisServer::start();
    let client = LockClient::new(&server.url()).unwrap();
    let sem = client.semaphore("mixed");
    let mut java = RedissonSemaphore::new(&server.url(), false);
    assert!(java.try_set_permits("mixed", 3));
    assert!(!sem.try_set_permits(5).unwrap());
    // Counted together.
    let Tried::Taken(java_ids) = java.try_acquire("mixed", 1, Some(Duration::from_secs(30))) else {
        panic!("redisson could not take a permit");
    };
    let ours = sem.acquire_many(2).unwrap();
    assert!(sem.try_acquire().unwrap().is_none());
    assert!(matches!(
        java.try_acquire("mixed", 1, Some(Duration::from_secs(30))),
        Tried::Later(Some(_))
    ));
    assert_eq!(java.available("mixed"), 0);
    // A Redisson release wakes our waiter: it gets in woken by the message,
    // not at its place's confirmation (`Stats::woken_acquisitions`).
    let other = LockClient::new(&server.url()).unwrap();
    let waiter = {
        let other = other.clone();
        std::thread::spawn(move || {
            let p = other
                .semaphore("mixed")
                .try_acquire_for(Duration::from_secs(5))
                .unwrap();
            p.is_some()
        })
    };
    assert!(support::eventually(Duration::from_secs(5), || other
        .stats()
        .waiters_parked
        == 1));
    assert!(java.release("mixed", &java_ids[0]));
    assert!(waiter.join().unwrap(), "the waiter got a permit");
    assert_eq!(other.stats().woken_acquisitions, 1, "{:?}", other.stats());
    // Redisson releases ours by id (hex), as its users would.
    let ids = ours.ids();
    assert!(java.release("mixed", &ids[0]));
    drop(ours);
    assert_eq!(java.available("mixed"), 3);

    // Redisson's expired permit is reclaimed by our waiter: when it
    // expires (100 ms), not when the waiter next confirms its place (a
    // second).
    let started = Instant::now();
    let Tried::Taken(_) = java.try_acquire("mixed", 3, Some(Duration::from_millis(100))) else {
        panic!("redisson could not take 3 permits");
    };
    let p = sem
        .acquire_with(1, SemaphoreOptions::new().wait(Duration::from_secs(3)))
        .unwrap();
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(100) && took < Duration::from_millis(500),
        "{took:?}"
    );
    drop(p);
    assert_eq!(java.available("mixed"), 3);

    // Ours, with an explicit lease (not renewed), reclaimed by Redisson.
    let short = SemaphoreOptions::new().lease(Duration::from_millis(300));
    let ours = sem.acquire_with(3, short).unwrap();
    assert!(matches!(
        java.try_acquire("mixed", 1, None),
        Tried::Later(_)
    ));
    std::thread::sleep(Duration::from_millis(400));
    assert!(matches!(
        java.try_acquire("mixed", 1, None),
        Tried::Taken(_)
    ));
    assert!(ours.unlock().unwrap_err().is_not_held());
}

/// The async face: tasks of two clients share three permits (never more
/// than three inside); waits dropped at random points leave nothing behind
/// (no place in line, no permit out).
#[test]
fn tasks_share_permits_and_dropped_waits_leave_nothing() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let server = RedisServer::start();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let a = leasehold::AsyncLockClient::new(&server.url()).unwrap();
    let b = leasehold::AsyncLockClient::new(&server.url()).unwrap();
    rt.block_on(async {
        assert!(a.semaphore("t").try_set_permits(3).await.unwrap());
        let inside = std::sync::Arc::new(AtomicUsize::new(0));
        let most = std::sync::Arc::new(AtomicUsize::new(0));
        let tasks: Vec<_> = (0..60)
            .map(|i| {
                let sem = if i % 2 == 0 {
                    a.semaphore("t")
                } else {
                    b.semaphore("t")
                };
                let (inside, most) = (inside.clone(), most.clone());
                tokio::spawn(async move {
                    for _ in 0..5 {
                        let p = sem.acquire().await.unwrap();
                        let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                        most.fetch_max(now, Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_millis(1)).await;
                        inside.fetch_sub(1, Ordering::SeqCst);
                        if i % 3 == 0 {
                            drop(p);
                        } else {
                            p.unlock().await.unwrap();
                        }
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
        assert_eq!(most.load(Ordering::SeqCst), 3);
        // Dropped waits: another task churns the permits meanwhile.
        let churn = {
            let sem = b.semaphore("t");
            tokio::spawn(async move {
                for _ in 0..100 {
                    let p = sem.acquire_many(3).await.unwrap();
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    drop(p);
                }
            })
        };
        let mut dropped = 0;
        for i in 0..200u64 {
            let sem = a.semaphore("t");
            let wait = Duration::from_micros((i * 7_919) % 4_000);
            match tokio::time::timeout(wait, sem.acquire_many(1 + (i % 2) as u32)).await {
                Ok(p) => drop(p.unwrap()),
                Err(_) => dropped += 1,
            }
        }
        churn.await.unwrap();
        println!("{dropped} of 200 waits dropped");
        assert!(dropped > 50, "{dropped}");
    });
    let sem = LockClient::new(&server.url()).unwrap().semaphore("t");
    assert!(
        support::eventually(Duration::from_secs(3), || {
            let info = sem.inspect().unwrap();
            info.waiters.is_empty() && info.holders.is_empty() && info.available == Some(3)
        }),
        "{:?}",
        sem.inspect().unwrap()
    );
}

/// A cluster (sharded pub/sub on Redis ≥ 7): every key and channel of a
/// semaphore is in its name's slot, waiters are granted across clients.
#[test]
fn a_semaphore_on_a_cluster_grants_waiters_across_clients() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let cluster = support::RedisCluster::start(3, 0);
    let clients: Vec<_> = (0..4)
        .map(|_| {
            LockClient::cluster_builder(&cluster.urls())
                .build()
                .unwrap()
        })
        .collect();
    for name in ["batch", "{tenant:7}:exports"] {
        clients[0].semaphore(name).set_permits(2).unwrap();
        let (inside, most) = (AtomicUsize::new(0), AtomicUsize::new(0));
        std::thread::scope(|s| {
            for c in &clients {
                let (inside, most) = (&inside, &most);
                s.spawn(move || {
                    let sem = c.semaphore(name);
                    for _ in 0..25 {
                        let wait = SemaphoreOptions::new().wait(Duration::from_secs(10));
                        let p = sem.acquire_with(1, wait).unwrap();
                        let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                        most.fetch_max(now, Ordering::SeqCst);
                        std::thread::sleep(Duration::from_millis(1));
                        inside.fetch_sub(1, Ordering::SeqCst);
                        drop(p);
                    }
                });
            }
        });
        assert_eq!(most.load(Ordering::SeqCst), 2, "{name}");
        let info = clients[1].semaphore(name).inspect().unwrap();
        assert_eq!(info.available, Some(2), "{name}: {info:?}");
        assert!(
            info.waiters.is_empty() && info.holders.is_empty(),
            "{info:?}"
        );
    }
}

/// More permits than the semaphore has would wait forever: refused at once,
/// and a waiter left so by a lowered total holds nobody up behind it.
#[test]
fn asking_for_more_permits_than_there_are_is_refused_and_blocks_no_one() {
    let server = RedisServer::start();
    let client = LockClient::new(&server.url()).unwrap();
    let sem = client.semaphore("few");
    sem.set_permits(3).unwrap();
    let e = sem.acquire_many(5).unwrap_err();
    assert!(
        matches!(e, leasehold::Error::InvalidArgument { .. }),
        "{e:?}"
    );
    assert!(e.to_string().contains("3 in all"), "{e}");
    // A waiter for 3 first in line, a waiter for 1 behind it; the total
    // drops to 2 while all 3 are out.
    let out = sem.acquire_many(3).unwrap();
    std::thread::scope(|s| {
        let big = s.spawn(|| {
            let c = LockClient::new(&server.url()).unwrap();
            c.semaphore("few").acquire_many(3)
        });
        assert!(support::eventually(Duration::from_secs(2), || {
            sem.inspect().unwrap().waiters.len() == 1
        }));
        let small = s.spawn(|| {
            let c = LockClient::new(&server.url()).unwrap();
            let started = Instant::now();
            let p = c.semaphore("few").acquire().unwrap();
            (started.elapsed(), p.permits())
        });
        assert!(support::eventually(Duration::from_secs(2), || {
            sem.inspect().unwrap().waiters.len() == 2
        }));
        sem.set_permits(2).unwrap();
        drop(out);
        let e = big.join().unwrap().unwrap_err();
        assert!(
            matches!(e, leasehold::Error::InvalidArgument { .. }),
            "{e:?}"
        );
        let (took, permits) = small.join().unwrap();
        assert_eq!(permits, 1);
        assert!(took < Duration::from_secs(2), "{took:?}");
    });
    assert_eq!(sem.available_permits().unwrap(), 2);
}

/// The counter may go below zero: nothing is available, and `inspect`
/// says how far below (and "never set" apart from it).
#[test]
fn a_negative_count_is_reported_and_waits_until_enough_came_back() {
    let server = RedisServer::start();
    let client = LockClient::new(&server.url()).unwrap();
    let sem = client.semaphore("neg");
    assert_eq!(sem.available_permits().unwrap(), 0);
    assert_eq!(sem.inspect().unwrap().available, None);
    assert!(
        matches!(
            sem.try_acquire().unwrap_err(),
            leasehold::Error::NoPermits { .. }
        ),
        "never set: said so, not taken for busy"
    );
    sem.set_permits(2).unwrap();
    let both = sem.acquire_many(2).unwrap();
    sem.reduce_permits(1).unwrap();
    assert_eq!(sem.available_permits().unwrap(), 0);
    assert_eq!(sem.inspect().unwrap().available, Some(-1));
    drop(both);
    assert_eq!(sem.available_permits().unwrap(), 1);
    sem.add_permits(2).unwrap();
    assert_eq!(sem.available_permits().unwrap(), 3);
    sem.reduce_permits(2).unwrap();
    assert!(sem.try_acquire().unwrap().is_some());
    let info = sem.inspect().unwrap();
    assert_eq!(info.available, Some(1));
}

/// What Redisson's waiters hear on `redisson_sc:{name}`: a positive count
/// when permits came back (never on an acquire), also when leasehold's
/// first waiter in line needs more than came back.
#[test]
fn redissons_waiters_hear_permits_that_came_back_and_only_those() {
    let server = RedisServer::start();
    let client = LockClient::new(&server.url()).unwrap();
    let sem = client.semaphore("heard");
    sem.set_permits(3).unwrap();
    let mut listener =
        support::redisson::Listener::start(&server.url(), "redisson_sc:{heard}", false);
    for _ in 0..5 {
        let p = sem.acquire().unwrap();
        drop(p);
    }
    // One count per release (3 available again), none per acquire: had an
    // acquire published too, the message after these five would not be the
    // "1" below.
    let heard: Vec<_> = (0..5)
        .map(|_| listener.next(Duration::from_secs(1)))
        .collect();
    assert!(heard.iter().all(|m| m.as_deref() == Some("3")), "{heard:?}");
    // Our first waiter in line wants 3; one permit comes back.
    let one = sem.acquire().unwrap();
    let two = sem.acquire_many(2).unwrap();
    std::thread::scope(|s| {
        let waiter = s.spawn(|| {
            let c = LockClient::new(&server.url()).unwrap();
            c.semaphore("heard").acquire_many(3).map(|p| p.permits())
        });
        assert!(support::eventually(Duration::from_secs(2), || {
            sem.inspect().unwrap().waiters.len() == 1
        }));
        drop(one);
        assert_eq!(listener.next(Duration::from_secs(1)).as_deref(), Some("1"));
        drop(two);
        assert_eq!(waiter.join().unwrap().unwrap(), 3);
    });
}

/// `replicas(n, timeout)` holds for permits as for locks: an acquire no
/// replica acknowledged is refused, and its permits are given back.
#[test]
fn permits_no_replica_acknowledged_are_refused_and_given_back() {
    let server = RedisServer::start(); // no replica
    let client = LockClient::builder(&server.url())
        .replicas(1, Duration::from_millis(50))
        .build()
        .unwrap();
    let sem = client.semaphore("acked");
    sem.set_permits(2).unwrap();
    let e = sem.acquire().unwrap_err();
    assert!(
        matches!(e, leasehold::Error::NotReplicated { acked: 0, .. }),
        "{e:?}"
    );
    assert!(support::eventually(Duration::from_secs(1), || {
        sem.available_permits().unwrap() == 2
    }));
    assert!(sem.inspect().unwrap().holders.is_empty());
}

/// An async permit guard's `lost()` ends with `None` once the permits were
/// given back (a task `select!`ing on it is not left waiting forever), and
/// with why when they were taken back.
#[test]
fn an_async_permits_lost_future_ends_at_release_or_loss() {
    let server = RedisServer::start();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let client = leasehold::AsyncLockClient::new(&server.url()).unwrap();
    rt.block_on(async {
        let sem = client.semaphore("al");
        sem.set_permits(1).await.unwrap();
        let p = sem.acquire().await.unwrap();
        let lost = tokio::spawn(p.lost().until_lost());
        p.unlock().await.unwrap();
        let ended = tokio::time::timeout(Duration::from_secs(2), lost).await;
        assert!(matches!(ended, Ok(Ok(None))), "{ended:?}");
    });
    let short = LockClient::builder(&server.url())
        .watchdog_lease(Duration::from_millis(600))
        .build()
        .unwrap()
        .to_async();
    rt.block_on(async {
        let p = short.semaphore("al").acquire().await.unwrap();
        let lost = tokio::spawn(p.lost().until_lost());
        let mut con = server.connection();
        let _: i64 = con.del("{al}:timeout").unwrap();
        let ended = tokio::time::timeout(Duration::from_secs(2), lost).await;
        assert!(matches!(ended, Ok(Ok(Some(_)))), "{ended:?}");
        assert!(p.unlock().await.unwrap_err().is_not_held());
    });
}

/// A release of permits that Redis refused (`LOADING`: it never ran) is
/// sent again once Redis answers, as a lock's release is, and not left
/// until the permits' lease runs out (a minute here, against seconds).
#[test]
fn a_refused_release_is_sent_again_once_redis_answers() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port());
    let client = LockClient::new(&proxy.url()).unwrap();
    let sem = client.semaphore("refused");
    sem.set_permits(1).unwrap();
    let options = SemaphoreOptions::new().lease(Duration::from_secs(60));
    let permit = sem.acquire_with(1, options).unwrap();
    proxy.set(Fault::Refuse(
        "LOADING Redis is loading the dataset in memory",
    ));
    let e = permit.unlock().unwrap_err();
    proxy.set(Fault::Forward);
    let other = LockClient::new(&server.url()).unwrap();
    let started = Instant::now();
    let again = other
        .semaphore("refused")
        .try_acquire_for(Duration::from_secs(10))
        .unwrap();
    assert!(
        again.is_some(),
        "the refused release ({e}) was not sent again: the permit stays its minute"
    );
    println!(
        "the permit came back {:?} after the refusal ended",
        started.elapsed()
    );
}

/// A waiter whose semaphore is deleted while it stands in line (an
/// operator's `DEL`, Redisson's `delete()`) ends its wait with
/// `NoPermits` and leaves its place, as any wait that ends without
/// permits does. A place left behind would stay in line for up to 3 s, and
/// a semaphore set again meanwhile would give it a permit nobody holds.
#[test]
fn a_waiter_whose_semaphore_is_deleted_leaves_its_place() {
    let server = RedisServer::start();
    let holder = LockClient::new(&server.url()).unwrap();
    let sem = holder.semaphore("ghost");
    sem.set_permits(1).unwrap();
    let permit = sem.acquire().unwrap();
    let waiter = LockClient::new(&server.url()).unwrap();
    let waiting = {
        let waiter = waiter.clone();
        std::thread::spawn(move || {
            waiter
                .semaphore("ghost")
                .try_acquire_for(Duration::from_secs(20))
        })
    };
    assert!(support::eventually(Duration::from_secs(5), || sem
        .inspect()
        .unwrap()
        .waiters
        .len()
        == 1));
    let mut con = server.connection();
    let _: () = con.del("ghost").unwrap();
    // Its next confirmation of its place (within a second) finds no
    // semaphore.
    let ended = waiting.join().unwrap();
    assert!(
        matches!(ended, Err(leasehold::Error::NoPermits { .. })),
        "{ended:?}"
    );
    let info = sem.inspect().unwrap();
    assert!(info.waiters.is_empty(), "a place left in line: {info:?}");
    drop(permit);
}
