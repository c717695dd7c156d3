//! Review of 7fae70f (the tokio transport on the runtime's own
//! connections): cases found by reading the change.
#![cfg(feature = "tokio")]

mod support;

use std::future::Future;
use std::task::Poll;
use std::time::Duration;

use leasehold::LockClient;
use redis::Commands;
use support::{eventually, RedisServer};

/// `total_connections_received` of `INFO stats`.
fn connections_received(con: &mut redis::Connection) -> i64 {
    let info: String = redis::cmd("INFO").arg("stats").query(con).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("total_connections_received:"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap()
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
        client.lock("noscript:warm").await.unwrap().unlock().await.unwrap();
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
    // Not driven for 3× the socket timeout: the hook is told "no answer";
    // its undo runs.
    std::thread::sleep(Duration::from_millis(1_000));
    // Driven again.
    rt.block_on(async { tokio::time::sleep(Duration::from_millis(500)).await });
    assert!(
        eventually(Duration::from_secs(5), || {
            !server.connection().exists::<_, bool>("noscript:lock").unwrap()
        }),
        "the dropped acquire's lock is held (ttl {} ms)",
        server.connection().pttl::<_, i64>("noscript:lock").unwrap()
    );
}

/// Twenty live runtimes (a thread-per-core server on a 20-core machine:
/// one current-thread runtime per worker), each taking turns at a lock and
/// unlock: each keeps its idle connection. Runtimes' entries are evicted
/// oldest-made first, not least-recently used: past 16 runtimes every
/// acquire of every runtime finds its runtime's entry gone and makes a new
/// connection (connect + handshake), and its open count starts again from
/// zero.
#[test]
fn more_than_sixteen_live_runtimes_keep_their_connections() {
    let server = RedisServer::start();
    let client = LockClient::new(&server.url()).unwrap().to_async();
    let runtimes: Vec<_> = (0..20).map(|_| support::current_thread()).collect();
    for rt in &runtimes {
        rt.block_on(async { client.lock("many:warm").await.unwrap().unlock().await.unwrap() });
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
