//! The reactor lane (feature `tokio`, issue 27): a task's lock and unlock
//! of a client of one server go on its own tokio runtime — no leasehold I/O
//! thread is started, still two round trips — on a current-thread and a
//! multi-thread runtime; and where the lane cannot go (a runtime without an
//! I/O driver, another executor, a server that restarted and forgot the
//! scripts, a stopped server) the same calls work through the I/O threads,
//! with the same errors and nothing left behind — an unlock whose task is
//! dropped while an I/O thread sends it included.
//!
//! One test: the first part needs a process in which no I/O thread was
//! ever started (the pool is the process's).
#![cfg(feature = "tokio")]

mod support;

use std::time::{Duration, Instant};

use leasehold::{AsyncLockClient, Error, LockClient, LockOptions};
use redis::Commands;
use support::{Monitor, RedisServer};

/// The names of this process's threads.
fn thread_names() -> Vec<String> {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .map(|n| n.trim().to_owned())
        .collect()
}

fn io_threads() -> usize {
    thread_names()
        .iter()
        .filter(|n| n.starts_with("leasehold-io"))
        .count()
}

/// `connected_clients` of `INFO clients`.
fn connected_clients(con: &mut redis::Connection) -> i64 {
    let info: String = redis::cmd("INFO").arg("clients").query(con).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("connected_clients:"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap()
}

async fn pairs(client: &AsyncLockClient, name: &str, n: usize) {
    for _ in 0..n {
        client.lock(name).await.unwrap().unlock().await.unwrap();
    }
}

/// The other kinds: `n` lock + unlock pairs of each on names of `name`,
/// a fenced guard's token checked.
async fn every_kind(client: &AsyncLockClient, name: &str, n: usize) {
    let mut last_token = 0;
    for _ in 0..n {
        let fenced = LockOptions::new().fenced();
        let g = client
            .lock_with(&format!("{name}:fenced"), fenced)
            .await
            .unwrap();
        let token = g.fence().unwrap();
        assert!(token > last_token, "{token} after {last_token}");
        last_token = token;
        g.unlock().await.unwrap();
        let fair = format!("{name}:fair");
        client
            .fair_lock(&fair)
            .await
            .unwrap()
            .unlock()
            .await
            .unwrap();
        let rw = format!("{name}:rw");
        let (r1, r2) = (
            client.read_lock(&rw).await.unwrap(),
            client.read_lock(&rw).await.unwrap(),
        );
        r1.unlock().await.unwrap();
        r2.unlock().await.unwrap();
        client
            .write_lock(&rw)
            .await
            .unwrap()
            .unlock()
            .await
            .unwrap();
    }
}

#[test]
fn tasks_lock_on_their_runtime_and_fall_back_to_the_io_threads_where_it_cannot() {
    let mut server = RedisServer::start();
    let client = AsyncLockClient::new(&server.url()).unwrap();

    // On the lane: a current-thread and a multi-thread runtime, two round
    // trips per pair, and no I/O thread. (Waiting tasks of one client that
    // leave a place in line do that in the background, on an I/O thread:
    // these names are not contended.)
    let current = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    current.block_on(pairs(&client, "lane:ct", 50));
    current.block_on(every_kind(&client, "lane:ct", 20));
    assert_eq!(io_threads(), 0, "current-thread: {:?}", thread_names());
    let monitor = Monitor::start(&server);
    current.block_on(pairs(&client, "lane:ct", 1));
    let sent = monitor.client_commands_except("leasehold_client:");
    assert_eq!(sent, ["evalsha", "evalsha"], "one pair: {sent:?}");
    // Every other kind, each lock and unlock one script call: fenced,
    // fair, two reads, a write.
    let monitor = Monitor::start(&server);
    current.block_on(every_kind(&client, "lane:ct", 1));
    let sent = monitor.client_commands_except("leasehold_client:");
    assert_eq!(sent, ["evalsha"; 10], "each kind once: {sent:?}");
    // A semaphore's permits too (set by a thread: inline).
    client
        .blocking()
        .semaphore("lane:sem")
        .set_permits(3)
        .unwrap();
    let sem = client.semaphore("lane:sem");
    current.block_on(async {
        for _ in 0..20 {
            let one = sem.acquire().await.unwrap();
            let two = sem.acquire_many(2).await.unwrap();
            assert!(sem.try_acquire().await.unwrap().is_none());
            one.release().await.unwrap();
            two.release().await.unwrap();
        }
    });
    assert_eq!(io_threads(), 0, "semaphore: {:?}", thread_names());
    let monitor = Monitor::start(&server);
    current.block_on(async { sem.acquire().await.unwrap().release().await.unwrap() });
    let sent = monitor.client_commands_except("leasehold_client:");
    assert_eq!(sent, ["evalsha", "evalsha"], "one permit: {sent:?}");
    let multi = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    multi.block_on(async {
        let tasks: Vec<_> = (0..8)
            .map(|i| {
                let client = client.clone();
                tokio::spawn(async move {
                    pairs(&client, &format!("lane:mt:{i}"), 50).await;
                    every_kind(&client, &format!("lane:mt:{i}"), 10).await;
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
    });
    assert_eq!(
        io_threads(),
        0,
        "no I/O thread for tasks on the lane: {:?}",
        thread_names()
    );
    // A bounded wait on a held name, on the lane, ends by its deadline.
    current.block_on(async {
        let held = client.lock("lane:busy").await.unwrap();
        let started = Instant::now();
        let none = client
            .try_lock_for("lane:busy", Duration::from_millis(300))
            .await
            .unwrap();
        assert!(none.is_none());
        let took = started.elapsed();
        assert!(
            took >= Duration::from_millis(300) && took < Duration::from_secs(2),
            "{took:?}"
        );
        held.unlock().await.unwrap();
    });

    // A restarted server: its pooled lane connections are closed and it
    // knows no script. The next calls still work.
    server.restart();
    current.block_on(pairs(&client, "lane:ct", 3));
    multi.block_on(pairs(&client, "lane:mt:0", 3));

    // A stopped server: an unlock that gets no reply within the socket
    // timeout is sent again in the background, and the lock is free once
    // Redis answers.
    let short = LockClient::builder(&server.url())
        .socket_timeout(Duration::from_millis(300))
        .watchdog_lease(Duration::from_secs(2))
        .build()
        .unwrap()
        .to_async();
    current.block_on(async {
        let g = short.lock("lane:stopped").await.unwrap();
        server.signal("STOP");
        let e = g.unlock().await.unwrap_err();
        server.signal("CONT");
        assert!(matches!(e, Error::ReleasePending { .. }), "{e:?}");
    });
    assert!(support::eventually(Duration::from_secs(5), || {
        !server
            .connection()
            .exists::<_, bool>("lane:stopped")
            .unwrap()
    }));

    // An unlock the lane could not send (its connection had been closed)
    // goes to an I/O thread; its task is dropped while that try gets no
    // answer (a partition: the request never reaches Redis). The release is
    // still sent again in the background: the lock is free soon after the
    // partition heals, not when its 30 s lease ends.
    let partition = support::proxy::FaultProxy::start(server.port());
    let patient = LockClient::builder(&partition.url())
        .socket_timeout(Duration::from_millis(300))
        .connect_timeout(Duration::from_millis(300))
        .watchdog_lease(Duration::from_secs(30))
        .build()
        .unwrap()
        .to_async();
    let g = current
        .block_on(patient.lock("lane:dropped-unlock"))
        .unwrap();
    partition.reset_all();
    partition.set(support::proxy::Fault::Blackhole);
    let gave_up = current
        .block_on(async { tokio::time::timeout(Duration::from_millis(100), g.unlock()).await });
    assert!(gave_up.is_err(), "the unlock ended: {gave_up:?}");
    // The I/O thread's try ends (socket and connect timeouts) meanwhile.
    std::thread::sleep(Duration::from_millis(1500));
    partition.set(support::proxy::Fault::Forward);
    let healed = Instant::now();
    assert!(
        support::eventually(Duration::from_secs(5), || {
            !server
                .connection()
                .exists::<_, bool>("lane:dropped-unlock")
                .unwrap()
        }),
        "the lock is still held {:?} after the partition healed (ttl {} ms)",
        healed.elapsed(),
        server
            .connection()
            .pttl::<_, i64>("lane:dropped-unlock")
            .unwrap()
    );

    // A runtime without an I/O driver, and another executor: the I/O
    // threads take the round trips.
    let no_io = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    no_io.block_on(pairs(&client, "lane:no-io", 3));
    futures::executor::block_on(pairs(&client, "lane:futures", 3));
    assert!(io_threads() > 0, "{:?}", thread_names());
    let opts = LockOptions::new().wait(Duration::from_millis(100));
    let g = no_io
        .block_on(client.lock_with("lane:no-io", opts))
        .unwrap();
    no_io.block_on(g.unlock()).unwrap();
    let left: Vec<String> = server.connection().keys("lane:*").unwrap();
    assert!(left.is_empty(), "{left:?}");

    // No more connections than the pool size: 60 tasks, each holding a
    // name of its own for 20 ms, on a client of pool size 4.
    let small = LockClient::builder(&server.url())
        .pool_size(4)
        .build()
        .unwrap()
        .to_async();
    let before = connected_clients(&mut server.connection());
    let most = std::sync::Arc::new(std::sync::atomic::AtomicI64::new(0));
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watcher = {
        let (most, done, url) = (most.clone(), done.clone(), server.url());
        std::thread::spawn(move || {
            let mut con = redis::Client::open(url).unwrap().get_connection().unwrap();
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                let n = connected_clients(&mut con);
                most.fetch_max(n, std::sync::atomic::Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(2));
            }
        })
    };
    multi.block_on(async {
        let tasks: Vec<_> = (0..60)
            .map(|i| {
                let small = small.clone();
                tokio::spawn(async move {
                    for _ in 0..3 {
                        let g = small.lock(&format!("lane:cap:{i}")).await.unwrap();
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        g.unlock().await.unwrap();
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
    });
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    watcher.join().unwrap();
    let most = most.load(std::sync::atomic::Ordering::Relaxed);
    // The lane's 4, the pool's 4, the client's subscriber and renewal
    // connections, the watcher's own.
    assert!(
        most - before <= 4 + 4 + 3,
        "{most} connections at most, {before} before"
    );

    // A bounded wait that must connect first keeps its deadline: each
    // chunk through the proxy waits 5 s, so the handshake alone (AUTH, a
    // round trip: 10 s, within the client's 20 s socket and connect
    // timeouts) would take fifty times a 200 ms wait. A second and a
    // fifth allowed.
    let guarded = RedisServer::start_with_password("pw");
    let holder = LockClient::new(&guarded.url()).unwrap();
    let held = holder.lock("lane:far").unwrap();
    let proxy = support::proxy::FaultProxy::start(guarded.port());
    let url = proxy.url().replace("redis://", "redis://:pw@");
    let far = LockClient::builder(&url)
        .watchdog_lease(Duration::from_secs(60))
        .socket_timeout(Duration::from_secs(20))
        .connect_timeout(Duration::from_secs(20))
        .build()
        .unwrap()
        .to_async();
    proxy.set(support::proxy::Fault::Delay(Duration::from_secs(5)));
    let started = Instant::now();
    let got = current.block_on(far.try_lock_for("lane:far", Duration::from_millis(200)));
    let took = started.elapsed();
    assert!(!matches!(got, Ok(Some(_))), "{got:?}");
    assert!(
        took < Duration::from_millis(1_200),
        "a 200 ms wait took {took:?}: {got:?}"
    );
    drop(held);

    // An unlock dropped before its request went out (on a runtime with no
    // lane connection yet, whose handshake, AUTH, is slow): the release is
    // sent in the background all the same.
    proxy.set(support::proxy::Fault::Forward);
    let fresh = AsyncLockClient::new(&url).unwrap();
    let plain = current.block_on(fresh.lock("lane:unsent-unlock")).unwrap();
    let fair = current
        .block_on(fresh.fair_lock("lane:unsent-fair"))
        .unwrap();
    proxy.set(support::proxy::Fault::Delay(Duration::from_millis(250)));
    let other = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let gave_up = other.block_on(async {
        let both = futures::future::join(plain.unlock(), fair.unlock());
        tokio::time::timeout(Duration::from_millis(50), both).await
    });
    assert!(gave_up.is_err(), "the unlocks ended: {gave_up:?}");
    std::thread::sleep(Duration::from_millis(600));
    proxy.set(support::proxy::Fault::Forward);
    let dropped = Instant::now();
    for name in ["lane:unsent-unlock", "lane:unsent-fair"] {
        assert!(
            support::eventually(Duration::from_secs(5), || {
                !guarded.connection().exists::<_, bool>(name).unwrap()
            }),
            "{name} is still held {:?} after its unlock was dropped (ttl {} ms)",
            dropped.elapsed(),
            guarded.connection().pttl::<_, i64>(name).unwrap()
        );
    }
    // And a semaphore's permit (a new runtime again: no lane connection).
    let sem = fresh.semaphore("lane:unsent-sem");
    sem.blocking().set_permits(1).unwrap();
    let permit = current.block_on(sem.acquire()).unwrap();
    proxy.set(support::proxy::Fault::Delay(Duration::from_millis(250)));
    let another = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let gave_up = another.block_on(async {
        tokio::time::timeout(Duration::from_millis(50), permit.release()).await
    });
    assert!(gave_up.is_err(), "the release ended: {gave_up:?}");
    std::thread::sleep(Duration::from_millis(600));
    proxy.set(support::proxy::Fault::Forward);
    let available = || sem.blocking().available().unwrap();
    assert!(
        support::eventually(Duration::from_secs(5), || available() == Some(1)),
        "the permit is not back after its release was dropped: {:?} available",
        available()
    );

    // Acquires dropped while their requests are held up on the way (a slow
    // network; here a proxy holds them 300 ms, and the undo goes out at
    // once on another connection): what they take when they land — a
    // permit, a lock — is undone after them, not before.
    let slow = support::proxy::FaultProxy::start(server.port());
    let late = LockClient::builder(&slow.url())
        .socket_timeout(Duration::from_secs(1))
        .watchdog_lease(Duration::from_secs(30))
        .build()
        .unwrap()
        .to_async();
    let sem = late.semaphore("lane:late-sem");
    sem.blocking().set_permits(1).unwrap();
    current.block_on(async {
        // A lane connection each, on this runtime.
        let (permit, lock) = futures::future::join(sem.acquire(), late.lock("lane:late")).await;
        permit.unwrap().release().await.unwrap();
        lock.unwrap().unlock().await.unwrap();
    });
    slow.set(support::proxy::Fault::Delay(Duration::from_millis(300)));
    current.block_on(async {
        let mut both = Box::pin(futures::future::join(sem.acquire(), late.lock("lane:late")));
        let r = tokio::time::timeout(Duration::from_millis(30), &mut both).await;
        assert!(r.is_err(), "the acquires ended");
        slow.set(support::proxy::Fault::Forward);
        drop(both);
    });
    let dropped = Instant::now();
    let (permit_back, lock_free) = (
        || sem.blocking().available().unwrap() == Some(1),
        || !server.connection().exists::<_, bool>("lane:late").unwrap(),
    );
    std::thread::sleep(Duration::from_millis(1000));
    assert!(
        support::eventually(Duration::from_secs(2), || permit_back() && lock_free()),
        "{:?} after the drop: permit back {}, lock free {} (ttl {} ms)",
        dropped.elapsed(),
        permit_back(),
        lock_free(),
        server.connection().pttl::<_, i64>("lane:late").unwrap()
    );
}
