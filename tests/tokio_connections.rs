//! The tokio transport's connections (`conn/runtime.rs`), each case found
//! by a review of the transport: a reply that comes in two segments, an
//! acquire dropped before its `NOSCRIPT` was read, a dropped call whose
//! reply never comes, more live runtimes than a few, `AUTH` and `SELECT`
//! across restarts.
#![cfg(feature = "tokio")]

mod support;

use std::future::Future;
use std::task::Poll;
use std::time::Duration;

use leasehold::LockClient;
use redis::Commands;
use support::{eventually, RedisServer};

fn connections_received(con: &mut redis::Connection) -> i64 {
    support::info_number(con, "stats", "total_connections_received")
}

/// An acquire dropped right after its `EVALSHA` went out, on a server
/// that forgot its scripts (restarted, `SCRIPT FLUSH`), on a runtime that
/// is not driven again for longer than the socket timeout (a current-thread
/// runtime between two `block_on`s): the timer thread tells the hook "no
/// answer" and the undo is sent and answered; when the runtime runs again
/// the call's `Drain` reads `NOSCRIPT`, loads the script and sends the
/// acquire once more — after its undo. The lock is left held for its whole
/// lease.
#[test]
fn an_acquire_dropped_before_noscript_is_read_is_not_taken_after_its_undo() {
    let server = RedisServer::start();
    let client = LockClient::builder(&server.url())
        .socket_timeout(Duration::from_millis(300))
        .watchdog_lease(Duration::from_secs(60))
        .build()
        .unwrap()
        .to_async();
    let rt = support::current_thread();
    // An idle connection of this runtime's, the scripts loaded.
    rt.block_on(async {
        client
            .lock("noscript:warm")
            .await
            .unwrap()
            .unlock()
            .await
            .unwrap();
    });
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query(&mut server.connection())
        .unwrap();
    // Polled once (its EVALSHA written), then dropped.
    rt.block_on(async {
        let mut fut = std::pin::pin!(client.lock("noscript:lock"));
        let first = std::future::poll_fn(|cx| Poll::Ready(fut.as_mut().poll(cx).is_ready())).await;
        assert!(!first, "the acquire ended in one poll");
    });
    // Not driven for 10× the socket timeout: the hook is told "no answer";
    // its undo runs.
    std::thread::sleep(Duration::from_millis(3_000));
    // Driven again.
    rt.block_on(async { tokio::time::sleep(Duration::from_millis(500)).await });
    assert!(
        eventually(Duration::from_secs(5), || {
            !server
                .connection()
                .exists::<_, bool>("noscript:lock")
                .unwrap()
        }),
        "the dropped acquire's lock is held (ttl {} ms)",
        server.connection().pttl::<_, i64>("noscript:lock").unwrap()
    );
}

/// Twenty live runtimes (a thread-per-core server on a 20-core machine:
/// one current-thread runtime per worker), each taking turns at a lock and
/// unlock: each keeps its idle connection. Only 16 runtimes' entries are
/// kept (`RUNTIMES`), live or not: past 16 live runtimes every acquire of
/// every runtime finds its runtime's entry gone and makes a new connection
/// (connect + handshake), and its open count starts again from zero.
#[test]
fn more_than_sixteen_live_runtimes_keep_their_connections() {
    let server = RedisServer::start();
    let client = LockClient::new(&server.url()).unwrap().to_async();
    let runtimes: Vec<_> = (0..20).map(|_| support::current_thread()).collect();
    for rt in &runtimes {
        rt.block_on(async {
            client
                .lock("many:warm")
                .await
                .unwrap()
                .unlock()
                .await
                .unwrap()
        });
    }
    let before = connections_received(&mut server.connection());
    for round in 0..10 {
        for (i, rt) in runtimes.iter().enumerate() {
            rt.block_on(async {
                let name = format!("many:{round}:{i}");
                client.lock(&name).await.unwrap().unlock().await.unwrap();
            });
        }
    }
    // The checks' own connections: one per `INFO`.
    let made = connections_received(&mut server.connection()) - before - 1;
    assert!(
        made <= 20,
        "{made} connections made for 200 lock + unlock pairs on 20 runtimes that each had one"
    );
}

/// A proxy that passes every reply on in two writes — its first byte, then
/// the rest a few microseconds later (a reply split into two segments on
/// the way, as any TCP hop may) — and requests as they come.
fn splitting_proxy(upstream: u16) -> u16 {
    static GAP_MAX_ENV: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    let gap_max = *GAP_MAX_ENV.get_or_init(|| {
        std::env::var("SPLIT_GAP")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(41)
    });
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for client in listener.incoming() {
            let Ok(client) = client else { return };
            let server = TcpStream::connect(("127.0.0.1", upstream)).unwrap();
            client.set_nodelay(true).unwrap();
            server.set_nodelay(true).unwrap();
            let (mut c_in, mut c_out) = (client.try_clone().unwrap(), client);
            let (mut s_in, mut s_out) = (server.try_clone().unwrap(), server);
            std::thread::spawn(move || {
                let mut buf = [0u8; 65536];
                while let Ok(n @ 1..) = c_in.read(&mut buf) {
                    if s_out.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
                let _ = s_out.shutdown(std::net::Shutdown::Both);
            });
            std::thread::spawn(move || {
                let mut buf = [0u8; 65536];
                let mut gap = 0u64;
                #[allow(non_snake_case)]
                let GAP_MAX = gap_max;
                while let Ok(n @ 1..) = s_in.read(&mut buf) {
                    if c_out.write_all(&buf[..1]).is_err() {
                        break;
                    }
                    // 0..=40 µs, varied: the rest lands around the moment
                    // the reader's first read is done.
                    gap = (gap + 7) % GAP_MAX;
                    let until = std::time::Instant::now() + Duration::from_micros(gap);
                    while std::time::Instant::now() < until {
                        std::hint::spin_loop();
                    }
                    if c_out.write_all(&buf[1..n]).is_err() {
                        break;
                    }
                }
                let _ = c_out.shutdown(std::net::Shutdown::Both);
            });
        }
    });
    port
}

/// Replies that come in two segments, on a multi-thread runtime (whose
/// reactor runs on another worker while a task reads): `Con::recv`, after
/// a read shorter than its buffer, clears the socket's read readiness — it
/// once did so in a `try_io` of its own after the read, clearing as well an
/// event the reactor set after that read (the second segment's). The
/// socket is edge-triggered: nothing more came, the rest of the reply sat
/// unread, and the call waited out its socket timeout (1–10 calls in 70,000
/// in 10 s). None may. Probabilistic: it fails on a lost wake-up, which
/// needs the reactor's event between the read and the clear.
#[test]
fn replies_in_two_segments_never_wait_out_the_socket_timeout() {
    let server = RedisServer::start();
    let port = splitting_proxy(server.port());
    let client = LockClient::builder(&format!("redis://127.0.0.1:{port}"))
        .socket_timeout(Duration::from_millis(1_000))
        .build()
        .unwrap()
        .to_async();
    let env = |name: &str, default: u64| -> u64 {
        std::env::var(name)
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(default)
    };
    let secs = env("SPLIT_SECS", 5);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(env("SPLIT_WORKERS", 4) as usize)
        .enable_all()
        .build()
        .unwrap();
    let (calls, slow, failed) = rt.block_on(async {
        let end = std::time::Instant::now() + Duration::from_secs(secs);
        let tasks: Vec<_> = (0..env("SPLIT_TASKS", 8))
            .map(|i| {
                let client = client.clone();
                tokio::spawn(async move {
                    let (mut calls, mut slow, mut failed) = (0u64, 0u64, Vec::new());
                    while std::time::Instant::now() < end {
                        let started = std::time::Instant::now();
                        match client.lock(&format!("split:{i}")).await {
                            Ok(g) => {
                                if let Err(e) = g.unlock().await {
                                    failed.push(format!("unlock: {e}"));
                                }
                            }
                            Err(e) => failed.push(format!("lock: {e}")),
                        }
                        calls += 2;
                        if started.elapsed() > Duration::from_millis(500) {
                            slow += 1;
                        }
                    }
                    (calls, slow, failed)
                })
            })
            .collect();
        let (mut calls, mut slow, mut failed) = (0, 0, Vec::new());
        for t in tasks {
            let (c, s, f) = t.await.unwrap();
            calls += c;
            slow += s;
            failed.extend(f);
        }
        (calls, slow, failed)
    });
    eprintln!(
        "{calls} calls, {slow} pairs over 500 ms, {} failed",
        failed.len()
    );
    // A lost wake-up is a call that waited out its 1 s socket timeout
    // (pairs merely slow on a busy machine are only counted).
    assert!(
        failed.is_empty(),
        "{calls} calls ({slow} pairs over 500 ms): {} waited out the socket timeout: {failed:?}",
        failed.len()
    );
}

/// A password and a database other than 0, on the tokio transport, on a
/// current-thread and a multi-thread runtime, across a restart (its idle
/// connections dead, its scripts forgotten): every lock is in database 3
/// and no I/O thread is needed for it. (Passes: AUTH and SELECT checked.)
#[test]
fn auth_and_select_on_the_runtimes_connections() {
    let mut server = RedisServer::start_with_password("pw");
    let url = format!("{}3", server.url());
    let client = LockClient::new(&url).unwrap().to_async();
    let (ct, mt) = (support::current_thread(), support::multi_thread());
    let check = |server: &RedisServer, name: &str| {
        let mut con = server.connection();
        let _: () = redis::cmd("SELECT").arg(3).query(&mut con).unwrap();
        assert!(con.exists::<_, bool>(name).unwrap(), "{name} not in db 3");
        let _: () = redis::cmd("SELECT").arg(0).query(&mut con).unwrap();
        assert!(!con.exists::<_, bool>(name).unwrap(), "{name} in db 0");
    };
    for round in 0..2 {
        for (rt, which) in [(&ct, "ct"), (&mt, "mt")] {
            let name = format!("db3:{which}:{round}");
            let g = rt.block_on(async { client.lock(&name).await.unwrap() });
            check(&server, &name);
            rt.block_on(async { g.unlock().await.unwrap() });
        }
        server.restart();
    }
}

/// A call dropped while its request went into a partition (bytes vanish,
/// the connection stays open): its `Drain` task waits for a reply that
/// never comes — the timer thread tells the hook after the socket timeout,
/// but nothing ends the `Drain`, which keeps the task, the socket and its
/// place in the runtime's count of open connections for as long as the
/// runtime lives. With a pool of one, that runtime never again sends on a
/// connection of its own (every call through the I/O threads), and each
/// such drop leaks one more.
#[test]
fn a_drain_whose_reply_never_comes_ends() {
    use support::proxy::{Fault, FaultProxy};
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port());
    let client = LockClient::builder(&proxy.url())
        .pool_size(1)
        .socket_timeout(Duration::from_millis(300))
        .connect_timeout(Duration::from_millis(300))
        .watchdog_lease(Duration::from_secs(60))
        .build()
        .unwrap()
        .to_async();
    let rt = support::current_thread();
    rt.block_on(async {
        client
            .lock("stuck:warm")
            .await
            .unwrap()
            .unlock()
            .await
            .unwrap()
    });
    proxy.set(Fault::Blackhole);
    let ended = rt.block_on(async {
        tokio::time::timeout(Duration::from_millis(100), client.lock("stuck:lock"))
            .await
            .is_ok()
    });
    assert!(!ended, "the acquire ended in a partition");
    proxy.set(Fault::Forward);
    // Driven for ten socket timeouts after the partition healed.
    rt.block_on(async { tokio::time::sleep(Duration::from_secs(3)).await });
    assert_eq!(
        rt.metrics().num_alive_tasks(),
        0,
        "the dropped call's task still waits, 3 s after the partition healed"
    );
}

/// One long-lived runtime in steady use, and now and then a runtime made
/// for one call (the R1 bench's shape; a library that builds its own
/// runtime): the long-lived runtime's entry is evicted oldest-*made* first,
/// not least-recently-used — every 16 short-lived runtimes it loses its
/// idle connection (and its open count) though it used it a moment ago.
#[test]
fn a_runtime_in_steady_use_keeps_its_connection_among_short_lived_ones() {
    let server = RedisServer::start();
    let client = LockClient::new(&server.url()).unwrap().to_async();
    let main = support::current_thread();
    main.block_on(async {
        client
            .lock("steady:warm")
            .await
            .unwrap()
            .unlock()
            .await
            .unwrap()
    });
    let before = connections_received(&mut server.connection());
    for i in 0..100 {
        main.block_on(async {
            client
                .lock("steady:main")
                .await
                .unwrap()
                .unlock()
                .await
                .unwrap();
        });
        // Its own connection, one (kept idle after it, in its entry).
        support::current_thread().block_on(async {
            let name = format!("steady:once:{i}");
            client.lock(&name).await.unwrap().unlock().await.unwrap();
        });
    }
    // The short-lived runtimes' 100, the check's own 1. Evicted
    // oldest-made first, the runtime in steady use would make one every 16
    // short-lived runtimes (6 here); on a loaded machine a connect slower
    // than its wait may send one call to the I/O threads' pool, which can
    // open one more (seen once in a loaded run): at most 2.
    let main_made = connections_received(&mut server.connection()) - before - 100 - 1;
    assert!(
        main_made <= 2,
        "the runtime in steady use made {main_made} new connections in 100 pairs"
    );
}

/// A connection of the runtime's that the server closed while it sat idle
/// (`CLIENT KILL`) is found so before anything is sent on it — on a
/// current-thread runtime not driven since the close came, whose reactor
/// has not seen it — and the call goes on a new one: no error. (A request
/// sent on it would meet the close after it went out, when it may have
/// run: it is not sent again.)
#[test]
fn a_connection_closed_while_idle_is_replaced_before_anything_is_sent() {
    let server = RedisServer::start();
    let client = LockClient::new(&server.url()).unwrap().to_async();
    let rt = support::current_thread();
    rt.block_on(async { client.lock("idle:a").await.unwrap().unlock().await.unwrap() });
    server.kill_clients();
    rt.block_on(async {
        let guard = client.lock("idle:b").await.unwrap();
        guard.unlock().await.unwrap();
    });
}
