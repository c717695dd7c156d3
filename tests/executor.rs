//! The blocking face on an async runtime's thread (feature `tokio`): a
//! blocking call that may wait refuses at once with a typed error that
//! names the async face — on a current-thread runtime, where it would
//! deadlock a service whose other task holds the lock, and on a
//! multi-thread runtime's worker — while `spawn_blocking` and
//! `block_in_place` (where blocking is the point), a single attempt, and a
//! thread outside any runtime go on as ever; and dropping a blocking guard
//! on an executor's thread never stalls it (the release goes to the
//! background) with Redis stopped.
//!
//! Without the `tokio` feature the library cannot see a runtime: these
//! calls then block as they say (see the README's *Async* section).
#![cfg(feature = "tokio")]

mod support;

use support::{current_thread, multi_thread};

use std::time::{Duration, Instant};

use leasehold::{LockClient, LockOptions, Redlock};
use redis::Commands;
use support::{eventually, RedisServer};

/// Asserts `result` is the typed refusal, naming the async face.
fn refused<T>(what: &str, result: leasehold::Result<T>) {
    match result {
        Err(e) if e.is_blocking_in_async() => {
            let msg = e.to_string();
            assert!(
                msg.contains("Async") || msg.contains("spawn_blocking"),
                "{what}: the refusal names what to use instead: {msg}"
            );
        }
        Err(e) => panic!("{what}: not the blocking-in-async refusal: {e}"),
        Ok(_) => panic!("{what}: a blocking wait on an executor's thread went ahead"),
    }
}

/// Every blocking call that may wait, on the calling thread: refused, and
/// at once — the lock is held by another client for the whole test, so a
/// call that waited would block here for its bound (seconds), not return
/// in milliseconds.
fn every_waiting_call_refuses(client: &LockClient, redlock: &Redlock) {
    let started = Instant::now();
    let long = Duration::from_secs(30);
    refused("lock", client.lock("busy"));
    refused("lock_owned", client.lock_owned("busy"));
    refused("lock_with", client.lock_with("busy", LockOptions::new()));
    refused(
        "lock_with(wait)",
        client.lock_with("busy", LockOptions::new().wait(long)),
    );
    refused("try_lock_for", client.try_lock_for("busy", long));
    refused(
        "try_lock_until",
        client.try_lock_until("busy", Instant::now() + long),
    );
    refused("fair_lock", client.fair_lock("busy:fair"));
    refused("read_lock", client.read_lock("busy:rw"));
    refused("write_lock", client.write_lock("busy:rw"));
    refused("lock_all", client.lock_all(&["busy", "other"]));
    refused(
        "try_lock_all_for",
        client.try_lock_all_for(&["busy", "other"], long),
    );
    let sem = client.semaphore("busy:sem");
    refused("semaphore acquire", sem.acquire());
    refused("semaphore try_acquire_for", sem.try_acquire_for(long));
    refused("redlock lock", redlock.lock("busy:redlock"));
    refused(
        "redlock try_lock_for",
        redlock.try_lock_for("busy:redlock", long),
    );
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(3),
        "refused at once: {took:?} for 15 calls whose waits are 30 s or unbounded"
    );
}

/// A second client holds every name the calls above ask for.
fn hold_everything(server: &RedisServer) -> impl Drop {
    let other = LockClient::new(&server.url()).unwrap();
    let sem = other.semaphore("busy:sem");
    sem.set_permits(1).unwrap();
    let held = (
        other.lock_owned("busy").unwrap(),
        other
            .lock_owned_with("busy:fair", LockOptions::new().fair())
            .unwrap(),
        other
            .lock_owned_with("busy:rw", LockOptions::new().write())
            .unwrap(),
        sem.acquire().unwrap(),
        other.lock_owned("busy:redlock").unwrap(),
    );
    struct Held<T>(T);
    impl<T> Drop for Held<T> {
        fn drop(&mut self) {}
    }
    Held(held)
}

#[test]
fn every_blocking_wait_on_a_current_thread_runtime_refuses_at_once() {
    let server = RedisServer::start();
    let _held = hold_everything(&server);
    let client = LockClient::new(&server.url()).unwrap();
    let redlock = Redlock::new(&[server.url()]).unwrap();
    current_thread().block_on(async {
        every_waiting_call_refuses(&client, &redlock);
    });
    // The same inside a spawned task.
    let rt = current_thread();
    let (c, r) = (client.clone(), Redlock::new(&[server.url()]).unwrap());
    rt.block_on(async move {
        tokio::spawn(async move { every_waiting_call_refuses(&c, &r) })
            .await
            .unwrap();
    });
}

#[test]
fn every_blocking_wait_on_a_multi_thread_runtimes_worker_refuses_at_once() {
    let server = RedisServer::start();
    let _held = hold_everything(&server);
    let client = LockClient::new(&server.url()).unwrap();
    let redlock = Redlock::new(&[server.url()]).unwrap();
    multi_thread().block_on(async move {
        tokio::spawn(async move { every_waiting_call_refuses(&client, &redlock) })
            .await
            .unwrap();
    });
}

/// The service: two requests for one order on a current-thread
/// runtime, each taking the blocking owned guard and holding it across an
/// `.await`. Before, the second blocked the only executor thread for ever
/// (the first could never run its release); now each gets the typed error
/// and the runtime finishes.
#[test]
fn two_requests_for_one_order_on_a_current_thread_runtime_get_the_error_not_a_deadlock() {
    let server = RedisServer::start();
    let client = LockClient::new(&server.url()).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let c = client.clone();
    std::thread::spawn(move || {
        let out = current_thread().block_on(async move {
            let handler = |c: LockClient| async move {
                let guard = c.lock_owned("order:7")?;
                tokio::time::sleep(Duration::from_millis(50)).await;
                drop(guard);
                leasehold::Result::Ok(())
            };
            let (a, b) = tokio::join!(
                tokio::spawn(handler(c.clone())),
                tokio::spawn(handler(c.clone()))
            );
            [a.unwrap(), b.unwrap()]
        });
        let _ = tx.send(out);
    });
    let outcomes = rx
        .recv_timeout(Duration::from_secs(20))
        .expect("the runtime finished (no deadlock)");
    for out in outcomes {
        refused("lock_owned in a handler", out);
    }
}

/// Where blocking is the point — `spawn_blocking`, `block_in_place`, a
/// thread outside any runtime — calls wait as ever; on an executor's
/// thread a single attempt for an owned guard goes ahead (no wait, and the
/// guard is its own owner), while one for a guard the thread would own is
/// refused: every task on the thread would share that reentrant hold.
#[test]
fn spawn_blocking_block_in_place_and_owned_single_attempts_go_ahead() {
    let server = RedisServer::start();
    let client = LockClient::new(&server.url()).unwrap();
    let rt = multi_thread();
    let c = client.clone();
    rt.block_on(async move {
        // On the runtime's thread: a single attempt for an owned guard
        // goes ahead; the thread's own guard is refused.
        let once = c.try_lock_owned_with("c", LockOptions::new()).unwrap();
        assert!(once.is_some());
        refused("try_lock on the executor", c.try_lock("c:2"));
        let c2 = c.clone();
        let spawned = tokio::spawn(async move { c2.try_lock("c:3").map(|g| g.is_some()) })
            .await
            .unwrap();
        refused("try_lock in a task", spawned);
        let c2 = c.clone();
        let held = tokio::task::spawn_blocking(move || {
            let g = c2.lock("a").unwrap();
            let waited = c2.try_lock_for("a:other", Duration::from_millis(10));
            assert!(waited.unwrap().is_some());
            g.unlock().is_ok()
        })
        .await
        .unwrap();
        assert!(held, "spawn_blocking may wait");
        let c2 = c.clone();
        let in_place = tokio::spawn(async move {
            tokio::task::block_in_place(|| c2.lock("b").map(|g| g.unlock()))
        })
        .await
        .unwrap();
        assert!(in_place.is_ok(), "block_in_place may wait: {in_place:?}");
    });
    // Outside any runtime, as ever.
    client.lock("d").unwrap().unlock().unwrap();
    client.try_lock("d").unwrap().unwrap().unlock().unwrap();
}

/// A blocking guard dropped on an executor's thread while Redis is stopped:
/// the drop returns at once (its release goes to the background, where the
/// socket timeout of 20 s bounds it), and the release lands once Redis is
/// back. A drop that sent the release itself would block for the socket
/// timeout, ten times the 2 s allowed.
#[test]
fn dropping_a_blocking_guard_on_an_executor_never_stalls_it() {
    let server = RedisServer::start();
    let client = LockClient::builder(&server.url())
        .watchdog_lease(Duration::from_secs(60))
        .socket_timeout(Duration::from_secs(20))
        .build()
        .unwrap();
    let mut con = server.connection();
    let guard = client.lock_owned("stall").unwrap();
    server.signal("STOP");
    let took = current_thread().block_on(async move {
        let started = Instant::now();
        drop(guard);
        started.elapsed()
    });
    server.signal("CONT");
    assert!(
        took < Duration::from_secs(2),
        "the drop blocked the executor {took:?} (the socket timeout is 20 s)"
    );
    assert!(
        eventually(Duration::from_secs(10), || !con
            .exists::<_, bool>("stall")
            .unwrap()),
        "the release landed once redis was back"
    );
}
