//! Several names at once (issue 28, `lock_all`): two processes taking the
//! same three names in opposite orders never deadlock and never overlap; a
//! bounded `lock_all` that cannot get one name returns in time holding none;
//! names on three cluster primaries.

#[path = "child/multi.rs"]
mod child;
mod support;

use std::time::{Duration, Instant};

use leasehold::{LockClient, LockOptions};
use support::{check_history, child_command, children_done, RedisCluster, RedisServer};

/// Two processes, `rounds` each, the names in opposite orders; returns the
/// sections each finished.
fn opposite_orders(url: &str, names: &[&str], rounds: usize, records: Option<&str>) -> u64 {
    let forward = names.join(",");
    let backward = names.iter().rev().copied().collect::<Vec<_>>().join(",");
    let started = Instant::now();
    let done = children_done([("f", &forward), ("b", &backward)].map(|(tag, order)| {
        let mut cmd = child_command(&["lockall", url, order, &rounds.to_string(), tag]);
        if let Some(r) = records {
            cmd.env("LEASEHOLD_RECORDS_URL", r);
        }
        cmd
    }));
    println!("{} sections in {:?}", done, started.elapsed());
    done
}

#[test]
fn two_processes_taking_three_names_in_opposite_orders_never_deadlock_or_overlap() {
    let server = RedisServer::start();
    const ROUNDS: usize = 1_000;
    let names = ["acct:1", "acct:2", "acct:3"];
    let done = opposite_orders(&server.url(), &names, ROUNDS, None);
    assert_eq!(done, 2 * ROUNDS as u64);
    let (finished, unfinished) = check_history(&mut server.connection(), &names, None);
    assert_eq!((finished, unfinished), (3 * done, 0));
}

#[test]
fn a_bounded_lock_all_that_cannot_get_one_name_returns_in_time_holding_none() {
    let server = RedisServer::start();
    let (mine, other) = (
        LockClient::new(&server.url()).unwrap(),
        LockClient::new(&server.url()).unwrap(),
    );
    let held = other.lock_owned("b").unwrap();
    let started = Instant::now();
    let got = mine
        .try_lock_all_for(&["c", "b", "a"], Duration::from_millis(300))
        .unwrap();
    let took = started.elapsed();
    assert!(got.is_none());
    // By its deadline (300 ms and a round trip), not after waits that start
    // over or never end: "b" stays held for the whole test.
    assert!(
        took >= Duration::from_millis(300) && took < Duration::from_secs(3),
        "{took:?}"
    );
    // "a" was taken first (sorted) and given back: free for anyone.
    for name in ["a", "c"] {
        assert!(other.try_lock(name).unwrap().is_some(), "{name} is held");
    }
    let e = mine
        .lock_all_with(
            &["a", "b"],
            LockOptions::new().wait(Duration::from_millis(100)),
        )
        .unwrap_err();
    assert!(e.is_wait_timeout(), "{e:?}");
    drop(held);
    let all = mine.lock_all(&["b", "a", "c", "a"]).unwrap();
    assert_eq!(all.names().collect::<Vec<_>>(), ["a", "b", "c"]);
    assert!(all.is_held() && all.lost().check().is_none());
    assert!(other.try_lock("b").unwrap().is_none());
    drop(all);
    assert!(other.try_lock("b").unwrap().is_some());
}

#[test]
fn names_on_three_cluster_primaries_are_taken_together() {
    let cluster = RedisCluster::start(3, 0);
    let records = RedisServer::start();
    // One name on each primary.
    let names: Vec<String> = cluster
        .primaries()
        .into_iter()
        .map(|p| support::name_in_slot(&cluster, cluster.first_slot_of(p), &format!("node{p}:")))
        .collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let done = opposite_orders(&cluster.urls().join(","), &names, 200, Some(&records.url()));
    assert_eq!(done, 400);
    let (finished, _) = check_history(&mut records.connection(), &names, None);
    assert_eq!(finished, 3 * done);
}

/// The async face: tasks of two clients take the same names in opposite
/// orders; a `lock_all` future dropped while it waits for its second name
/// gives back the first.
#[test]
fn tasks_take_names_together_and_a_dropped_wait_gives_back_what_it_took() {
    let server = RedisServer::start();
    let (a, b) = (
        leasehold::AsyncLockClient::new(&server.url()).unwrap(),
        leasehold::AsyncLockClient::new(&server.url()).unwrap(),
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let inside = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    rt.block_on(async {
        let tasks: Vec<_> = [(a.clone(), ["x", "y", "z"]), (b.clone(), ["z", "y", "x"])]
            .into_iter()
            .map(|(client, names)| {
                let inside = inside.clone();
                tokio::spawn(async move {
                    for _ in 0..200 {
                        let opts = LockOptions::new().wait(Duration::from_secs(10));
                        let all = client.lock_all_with(&names, opts).await.unwrap();
                        assert!(!inside.swap(true, std::sync::atomic::Ordering::SeqCst));
                        tokio::task::yield_now().await;
                        inside.store(false, std::sync::atomic::Ordering::SeqCst);
                        all.unlock().await.unwrap();
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
        // b holds "y"; a's wait for x, y takes x first, then waits for y —
        // dropped there, x goes back.
        let y = b.lock("y").await.unwrap();
        let wait = a.lock_all(&["y", "x"]);
        assert!(tokio::time::timeout(Duration::from_millis(200), wait)
            .await
            .is_err());
        let x = tokio::time::timeout(Duration::from_secs(2), b.lock("x")).await;
        assert!(matches!(x, Ok(Ok(_))), "x was given back: {x:?}");
        drop(y);
    });
}

/// With an explicit lease, a name taken early may run out while a later
/// one is waited for. `lock_all` never returns such a set: it gives back
/// what it took and takes every name again, so each hold it returns is
/// held. (Here `a`'s 1 s lease runs out two seconds before `b` is free,
/// and the set is looked at within a second of its return.)
#[test]
fn an_explicit_lease_that_ran_out_during_the_wait_is_taken_again() {
    let server = RedisServer::start();
    let client = LockClient::new(&server.url()).unwrap();
    let other = LockClient::new(&server.url()).unwrap();
    let b = other.lock("b").unwrap();
    let taking = {
        let client = client.clone();
        std::thread::spawn(move || {
            let options = LockOptions::new()
                .lease(Duration::from_secs(1))
                .wait(Duration::from_secs(10));
            let all = client.lock_all_with(&["a", "b"], options).unwrap();
            (
                all.is_held(),
                all.guards().iter().map(|g| g.is_held()).collect::<Vec<_>>(),
            )
        })
    };
    std::thread::sleep(Duration::from_secs(3));
    b.unlock().unwrap();
    let (held, each) = taking.join().unwrap();
    assert!(
        held,
        "a hold had run out when the set was returned: {each:?}"
    );
    // The same for a task.
    let b = other.lock("d").unwrap();
    let client = client.to_async();
    let taking = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let options = LockOptions::new()
                .lease(Duration::from_secs(1))
                .wait(Duration::from_secs(10));
            let all = client.lock_all_with(&["c", "d"], options).await.unwrap();
            all.is_held()
        })
    });
    std::thread::sleep(Duration::from_secs(3));
    b.unlock().unwrap();
    assert!(
        taking.join().unwrap(),
        "a task's hold had run out when the set was returned"
    );
}

/// A lease too short to cover taking the names (2 ms for 300 names) never
/// loops: a single try ends at its deadline (`None`), and a wait with no
/// deadline fails, after a few sets whose first holds all ran out, with
/// `LeaseExpiredOnArrival` (use a longer lease) — as one name's acquire
/// does when its own reply comes after its lease. Each call is given 10 s
/// on a thread; it ran on without end.
#[test]
fn a_lease_too_short_for_the_set_ends_the_call() {
    let server = RedisServer::start();
    let client = LockClient::new(&server.url()).unwrap();
    let short = || LockOptions::new().lease(Duration::from_millis(2));
    let within = |call: Box<dyn FnOnce() -> String + Send>| {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || tx.send(call()));
        rx.recv_timeout(Duration::from_secs(10))
            .expect("the call ran on past 10 s")
    };
    let ended = |got: leasehold::Result<Option<bool>>| match got {
        Err(leasehold::Error::LeaseExpiredOnArrival { .. }) => "expired".to_owned(),
        other => format!("{other:?}"),
    };
    let names: Vec<String> = (0..300).map(|i| format!("short:{i}")).collect();
    let (c, n, o) = (client.clone(), names.clone(), short());
    let tried = within(Box::new(move || {
        ended(c.try_lock_all_with(&n, o).map(|g| g.map(|g| g.is_held())))
    }));
    assert!(["Ok(None)", "expired"].contains(&tried.as_str()), "{tried}");
    let (c, n, o) = (client.clone(), names, short());
    let waited = within(Box::new(move || {
        ended(c.lock_all_with(&n, o).map(|g| Some(g.is_held())))
    }));
    assert_eq!(waited, "expired");
}
