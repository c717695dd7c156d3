//! The tokio transport (feature `tokio`): a task's lock and unlock of a
//! client of one server go on its own tokio runtime — no leasehold I/O
//! thread is started, still two round trips — on a current-thread and a
//! multi-thread runtime; and where it cannot go (a runtime without an I/O
//! driver, another executor) the same calls work through the I/O threads;
//! a server that restarted and forgot the scripts, a stopped server, a
//! connection pool's size, a bounded wait that must connect first. Calls
//! dropped while out, on every transport: `dropped_calls.rs`.
//!
//! One test: the first part needs a process in which no I/O thread was
//! ever started (threads are counted by name, any client's).
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

fn connected_clients(con: &mut redis::Connection) -> i64 {
    support::info_number(con, "clients", "connected_clients")
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

    // On the tokio transport: a current-thread and a multi-thread runtime, two round
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
            one.unlock().await.unwrap();
            two.unlock().await.unwrap();
        }
    });
    assert_eq!(io_threads(), 0, "semaphore: {:?}", thread_names());
    let monitor = Monitor::start(&server);
    current.block_on(async { sem.acquire().await.unwrap().unlock().await.unwrap() });
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
        "no I/O thread for tasks on the tokio transport: {:?}",
        thread_names()
    );
    // A bounded wait on a held name, on the tokio transport, ends by its deadline.
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
}
