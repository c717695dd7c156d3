//! A task's call dropped while it is out, on every transport a task's round
//! trip can take — the task's own tokio runtime (feature `tokio`) and the
//! client's I/O threads (any other executor; every executor without the
//! feature): what it did or may do in Redis is undone, or the release it
//! was sent again, by the transport — never left for a whole lease.
//!
//! The three cases reviews found on the old reactor lane, each on every
//! transport: an unlock dropped before its request went out (the
//! connection still being made), one dropped while it went out into a
//! partition, and acquires dropped while their requests were held up on
//! the way (undone after they land, not before). Each executor's runtime
//! is made for the call and dropped with it: the transport must see the
//! call through when its runtime is gone.

mod support;

use std::future::Future;
use std::time::{Duration, Instant};

use leasehold::LockClient;
use redis::Commands;
use support::proxy::{Fault, FaultProxy};
use support::{eventually, RedisServer};

/// Where a task runs its calls.
#[derive(Debug, Clone, Copy)]
enum Exec {
    /// A current-thread tokio runtime with its I/O driver, new for each
    /// call: with the `tokio` feature its round trips go on it.
    Tokio,
    /// `futures`' executor: its round trips go on the client's I/O threads.
    Futures,
}

const EVERY: [Exec; 2] = [Exec::Tokio, Exec::Futures];

impl Exec {
    fn block_on<F: Future>(self, fut: F) -> F::Output {
        match self {
            Exec::Tokio => tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap()
                .block_on(fut),
            Exec::Futures => futures::executor::block_on(fut),
        }
    }

    /// Polls `fut` for at most `limit`, then drops it (and, for tokio, its
    /// runtime); whether it ended first.
    fn give_up_after<F: Future>(self, limit: Duration, fut: F) -> bool {
        let timer = {
            let (tell, told) = futures::channel::oneshot::channel::<()>();
            std::thread::spawn(move || {
                std::thread::sleep(limit);
                let _ = tell.send(());
            });
            told
        };
        self.block_on(async {
            let fut = std::pin::pin!(fut);
            matches!(
                futures::future::select(fut, timer).await,
                futures::future::Either::Left(_)
            )
        })
    }
}

/// The lease of every lock here: what a lock left behind would live.
const LEASE: Duration = Duration::from_secs(60);

/// Whether `key` is gone within 5 s (against a lease of 60: 12×).
fn gone(server: &RedisServer, key: &str) -> bool {
    eventually(Duration::from_secs(5), || {
        !server.connection().exists::<_, bool>(key).unwrap()
    })
}

/// An unlock dropped before its request went out — the connection it
/// needs is still being made (a slow AUTH through a 250 ms delay per
/// chunk) — is sent in the background all the same: the lock is free soon
/// after, not when its lease ends.
#[test]
fn an_unlock_dropped_before_its_request_went_out_is_sent_in_the_background() {
    let server = RedisServer::start_with_password("pw");
    let proxy = FaultProxy::start(server.port());
    let url = proxy.url().replace("redis://", "redis://:pw@");
    for exec in EVERY {
        let client = LockClient::builder(&url)
            .watchdog_lease(LEASE)
            .build()
            .unwrap()
            .to_async();
        let (plain, fair) = (format!("unsent:{exec:?}"), format!("unsent-fair:{exec:?}"));
        let guards = exec.block_on(async {
            (
                client.lock(&plain).await.unwrap(),
                client.fair_lock(&fair).await.unwrap(),
            )
        });
        // Every connection made again, slowly.
        proxy.reset_all();
        proxy.set(Fault::Delay(Duration::from_millis(250)));
        let (a, b) = guards;
        let ended = exec.give_up_after(Duration::from_millis(50), async {
            futures::future::join(a.unlock(), b.unlock()).await
        });
        assert!(!ended, "{exec:?}: the unlocks ended");
        std::thread::sleep(Duration::from_millis(600));
        proxy.set(Fault::Forward);
        let dropped = Instant::now();
        for key in [&plain, &fair] {
            assert!(
                gone(&server, key),
                "{exec:?}: {key} still held {:?} after its unlock was dropped (ttl {} ms)",
                dropped.elapsed(),
                server.connection().pttl::<_, i64>(key).unwrap()
            );
        }
    }
}

/// An unlock dropped while its request went into a partition (connections
/// open, nothing answers): sent again in the background once the partition
/// heals — the lock is free soon after, not when its lease ends. A
/// semaphore's permit too.
#[test]
fn an_unlock_dropped_in_a_partition_is_sent_again_once_it_heals() {
    let server = RedisServer::start();
    let partition = FaultProxy::start(server.port());
    for exec in EVERY {
        let client = LockClient::builder(&partition.url())
            .socket_timeout(Duration::from_millis(300))
            .connect_timeout(Duration::from_millis(300))
            .watchdog_lease(LEASE)
            .build()
            .unwrap();
        let name = format!("partition:{exec:?}");
        let sem_name = format!("partition-sem:{exec:?}");
        client.semaphore(&sem_name).set_permits(1).unwrap();
        let client = client.to_async();
        let sem = client.semaphore(&sem_name);
        let (guard, permit) = exec.block_on(async {
            (
                client.lock(&name).await.unwrap(),
                sem.acquire().await.unwrap(),
            )
        });
        partition.reset_all();
        partition.set(Fault::Blackhole);
        let ended = exec.give_up_after(Duration::from_millis(100), async {
            futures::future::join(guard.unlock(), permit.unlock()).await
        });
        assert!(!ended, "{exec:?}: the releases ended");
        // Their tries end (socket and connect timeouts) meanwhile.
        std::thread::sleep(Duration::from_millis(1_500));
        partition.set(Fault::Forward);
        let healed = Instant::now();
        assert!(
            gone(&server, &name),
            "{exec:?}: the lock is still held {:?} after the partition healed (ttl {} ms)",
            healed.elapsed(),
            server.connection().pttl::<_, i64>(&name).unwrap()
        );
        let available = || sem.blocking().available_permits().unwrap();
        assert!(
            eventually(Duration::from_secs(5), || available() == 1),
            "{exec:?}: the permit is not back: {:?} available",
            available()
        );
    }
}

/// Acquires dropped while their requests are held up on the way (a slow
/// network: a proxy holds every chunk 300 ms): what they take when they
/// land — a permit, a lock — is undone after them, not before (an undo
/// sent at once on another connection would overtake them and leave both
/// taken for nobody).
#[test]
fn acquires_dropped_while_held_up_on_the_way_are_undone_after_they_land() {
    let server = RedisServer::start();
    let slow = FaultProxy::start(server.port());
    for exec in EVERY {
        let client = LockClient::builder(&slow.url())
            .socket_timeout(Duration::from_secs(1))
            .watchdog_lease(LEASE)
            .build()
            .unwrap();
        let (name, sem_name) = (format!("late:{exec:?}"), format!("late-sem:{exec:?}"));
        client.semaphore(&sem_name).set_permits(1).unwrap();
        let client = client.to_async();
        let sem = client.semaphore(&sem_name);
        slow.set(Fault::Delay(Duration::from_millis(300)));
        let ended = exec.give_up_after(Duration::from_millis(30), async {
            futures::future::join(sem.acquire(), client.lock(&name)).await
        });
        assert!(!ended, "{exec:?}: the acquires ended");
        slow.set(Fault::Forward);
        let dropped = Instant::now();
        let permit_back = || sem.blocking().available_permits().unwrap() == 1;
        let lock_free = || !server.connection().exists::<_, bool>(&name).unwrap();
        // Landed by now (the delay was 300 ms a chunk); then undone.
        std::thread::sleep(Duration::from_millis(1_000));
        assert!(
            eventually(Duration::from_secs(5), || permit_back() && lock_free()),
            "{exec:?}: {:?} after the drop: permit back {}, lock free {} (ttl {} ms)",
            dropped.elapsed(),
            permit_back(),
            lock_free(),
            server.connection().pttl::<_, i64>(&name).unwrap()
        );
    }
}
