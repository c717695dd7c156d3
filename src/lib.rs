// Module map for maintainers. Layers import downward only (checked by
// `../shared/tools/modcycles` in scripts/test.sh and by tests/layers.rs); a
// file's opening comment says what it owns. The user's documentation
// follows (`//!`).
//
//   bottom     error/    the one Error and its messages; classify: how a redis
//                        error becomes one, and the one classification (Retry)
//              options   LockOptions, Kind, name/lease checks, deadlines
//              names     keys and channels of Redisson's layouts; short ids
//              stats     Stats and the counters behind it
//              tls       rustls for the subscriber socket (feature `tls`)
//              park      how a wait parks (a thread, or a task: wakers, the
//                        timer thread) and where a round trip runs (inline,
//                        or the I/O threads): one acquire path for both APIs
//   protocol   protocol/ every script call and its reply per kind (plain, fair,
//                        rwlock), the renew call (renew), a lock's shape and
//                        forced release (admin), channel messages; one dispatch
//                        on Kind; no threads, no pools
//   conn       conn/     pools, targets (fixed, Sentinel), cluster routing; the
//                        one place that follows redirects (calls: `run`;
//                        batches: `batch`); our socket and wire, one handshake
//   machinery  notify/   the shared subscriber: its book of channels, wake-ups,
//                        grants kept per waiter, slots that move
//              renewal/  the watchdog thread: lease state, timer wheel, the
//                        batches it sends, loss; the client's registration
//              ledger/   the one ledger of holds (count, token, lease state and
//                        renewal share per owner field); the plain lock's
//                        in-process queue and its handover
//   raw        raw/      one lock's operations for every kind (attempt with
//                        WAIT and undo, release, leave, forced release, reads);
//                        a guard's hold (the one acquire ending, the one
//                        release path); one acquisition for the wait loop;
//                        lost replies and the thread that undoes them
//   wait       wait      the one acquire/wait loop (attempt, park, grant, leave,
//                        outages, deadline), behind two seams (tests: fakes)
//   shared     shared    a client's parts assembled: raw engine and subscriber
//   faces      acquire   LockClient's acquire path over raw + wait
//              guard     LockGuard, OwnedLockGuard (over a raw hold)
//              client    LockClient: the ladder, operators' calls
//              task/     AsyncLockClient, AsyncLockGuard: the same acquire
//                        path for tasks (waits park the task, round trips on
//                        the I/O threads, drop releases in the background)
//              builder   LockClientBuilder and the constructors
//              redlock   Redlock over independent masters (a raw hold per node)
//              fenced    FencedStore
//              multi     lock_all: several names in one canonical order,
//                        MultiLockGuard
//              semaphore/ Semaphore, PermitGuard: leased permits over the raw
//                        layer's permits and the one wait loop
//              inspect   LockClient::inspect and list: holders, waiters, clients
//   binary     bin/      the operators' `leasehold` CLI (feature `cli`), the
//                        public API only

//! Distributed locks on Redis with RAII guards, the way Redisson gives them to
//! Java: unique owners, owner-checked atomic unlock, reentrancy, leases, and
//! waiting on pub/sub instead of polling.
//!
//! ```no_run
//! # fn pay() -> Result<(), leasehold::Error> { Ok(()) }
//! # fn main() -> Result<(), leasehold::Error> {
//! let client = leasehold::LockClient::new("redis://127.0.0.1/")?;
//! let _g = client.lock("order:pay")?; // blocks until held
//! pay()?;                             // exactly one process is here
//! # Ok(()) }                          // _g dropped: owner-checked unlock
//! ```
//!
//! # The ladder
//! As `parking_lot`'s mutex, inside `Result` because Redis can fail:
//! [`LockClient::lock`] blocks, [`LockClient::try_lock`] makes one attempt,
//! [`LockClient::try_lock_for`] / [`LockClient::try_lock_until`] wait up to a
//! bound, and [`LockClient::lock_with`] takes [`LockOptions`] (an explicit
//! lease, a bounded wait).
//!
//! # What is in Redis
//! The layout is Redisson's `RLock`, so a Rust service and a Java service can
//! guard the same resource: the lock key is a hash
//! `{"<client-uuid>:<thread-n>": hold_count}` with a `PEXPIRE` of the lease;
//! the last unlock deletes it and publishes `0` on
//! `redisson_lock__channel:{<key>}`. Acquire and release are one Lua script
//! each, so an uncontended lock + unlock is two round trips, and the owner
//! check happens inside Redis: no guard can release a lock it does not hold.
//!
//! # Waiting
//! Waiting clients stand in a line in Redis, one place per client and lock
//! name (`leasehold_line:{<key>}`, each place expiring 3 s after its waiter
//! last confirmed it). A release gives the lock to the first live place
//! directly — the owner and a short grant lease are set in the release
//! script, and only that client hears it, on its own grant channel — so a
//! handoff between processes wakes one waiter and costs it no round trip:
//! an acquire and a release, two commands per critical section. A grant
//! sets the lease its waiter asked for, at most 3 s, and a waiter's place
//! lives no longer than that either: a granted or first-in-line waiter that
//! died or stalled costs the next one no more than its own lease, never a
//! watchdog lease; the grantee's renewal lengthens it. With no leasehold
//! waiter in line, the release publishes `0` on the unlock channel exactly as
//! Redisson's does; a leasehold waiter that finds a Redisson holder
//! subscribes to that channel, so the holder's release wakes it (waiters of
//! a leasehold holder hear only their grant channels, so the unlock
//! channel's subscribers are other libraries' waiters). While such waiters
//! are subscribed, at most two grants go out in a row before the lock is
//! left to them.
//!
//! A waiter parks until its grant, an unlock message or the holder's
//! remaining lease — a holder that crashed costs a waiter at most its lease,
//! and no one polls. Subscriptions (one subscriber connection per client,
//! shared and reference-counted) linger a second after the last waiter, so a
//! busy name is not resubscribed for every wait.
//!
//! Threads of one client never race each other at Redis: one thread per lock
//! name talks to Redis (and holds the client's place in line), the others
//! queue in the client in arrival order, and a release hands the lock to the
//! next of them inside the release script (one round trip, the owner field
//! replaced atomically). While other clients wait in line, a client hands it
//! over at most twice in a row, then grants it to the first of them.
//!
//! # Fencing and fair locks
//! [`LockOptions::fenced`] adds a fencing token minted in the acquire script
//! ([`LockGuard::fence`]) for the resource to check ([`FencedStore`]) — the
//! one protection against a holder paused past its lease.
//! [`LockOptions::fair`] (or [`LockClient::fair_lock`]) serves waiters of all
//! clients in the order they asked; a release grants the lock to the next
//! leasehold waiter directly (Redisson's waiters in the same queue are woken
//! with Redisson's message instead).
//!
//! # Read/write locks
//! [`LockClient::read_lock`] and [`LockClient::write_lock`] (or
//! [`LockOptions::read`] / [`LockOptions::write`]): many readers at once
//! across processes, or one writer alone, in Redisson's `RReadWriteLock`
//! layout. Writers go first: while a writer waits, new readers wait behind
//! it, so a steady stream of readers cannot starve writers. A writer may
//! also read (and keep reading after it stops writing); a reader asking to
//! write is refused ([`Error::UpgradeWouldDeadlock`]) instead of hanging.
//!
//! # Several names, semaphores
//! [`LockClient::lock_all`] takes several names in one canonical order (no
//! deadlock between callers listing them in different orders), all or none.
//! [`LockClient::semaphore`] gives a [`Semaphore`]: at most N permits out
//! across processes, each a lease renewed while its [`PermitGuard`] lives
//! (a crashed holder's permits come back within one lease), waiters granted
//! in line one per released permit, in Redisson's
//! `RPermitExpirableSemaphore` layout.
//!
//! # Beyond one Redis
//! [`LockClient::cluster_builder`] routes every lock by its key's slot in a
//! Redis Cluster (following `MOVED`/`ASK`, one renewal batch per node);
//! [`LockClient::sentinel_builder`] follows a Sentinel-managed primary
//! through failovers; [`LockClientBuilder::replicas`] makes every acquire
//! wait for replica acknowledgement (`WAIT`); [`Redlock`] holds a lock on a
//! majority of independent masters.
//!
//! # Guarantees
//! - **One owner at a time, checked in Redis**: acquire, release and renewal
//!   are Lua scripts with the owner check inside; a guard can never release
//!   or extend a lock it does not hold ([`Error::NotHeld`] instead).
//! - **Loss is reported, not hidden**: a watchdog lease that cannot be
//!   confirmed with two socket timeouts to spare is reported lost
//!   ([`LockGuard::is_held`] turns false, one [`LeaseLost`] on
//!   [`LockGuard::lost`]) before Redis expires it; an acquire reply that
//!   arrives after its lease ran out never becomes a guard.
//! - **A lost reply leaves no hold behind, and a release is never lost**: an
//!   acquire whose reply never came is undone, owner-checked, as soon as
//!   Redis answers again; a release whose reply never came is sent again
//!   until Redis answers or the lease ends ([`Error::ReleasePending`]).
//! - **Deadlines are kept**: a bounded wait returns by its deadline plus one
//!   round trip, also while Redis hangs, and rides out an outage up to its
//!   deadline ([`Error::Unavailable`] when the deadline comes first).
//! - **A dead or stalled client costs the others at most the lock's
//!   lease** (a hold granted by a release: at most 3 s).
//! - **Nothing panics** on bad input or Redis faults, and `Drop` is bounded
//!   by the socket timeout.
//!
//! No lease lock can stop a holder that was paused (GC, `SIGSTOP`, a VM
//! migration) past its lease from acting on stale belief; use a fenced lock
//! and let the resource check the token ([`FencedStore`]). Redis restarted
//! without persistence, or a failover with asynchronous replication, can lose
//! a hold; its holder is told at the next renewal
//! ([`LockClientBuilder::replicas`] and [`Redlock`] narrow the second).
//!
//! # Threads, pools and async
//! - **One [`LockClient`] per process**, cloned into every thread (clones
//!   share everything). A client has a connection pool (16 by default,
//!   [`LockClientBuilder::pool_size`]; a call holds a connection only for
//!   its round trips, never while it waits), one subscriber connection for
//!   unlock messages (one per cluster node with sharded pub/sub), and one
//!   renewal thread with its own connection.
//! - **Reentrancy is per OS thread**, so a [`LockGuard`] is not `Send`: it
//!   stays on the thread that took it. A hold that must move — to another
//!   thread, into a struct, across a thread pool — is an [`OwnedLockGuard`]
//!   ([`LockClient::lock_owned`]): `Send`, not reentrant.
//! - **Async code**: [`AsyncLockClient`] ([`LockClient::to_async`]) is the
//!   same client for tasks: a wait parks the task (no thread), round trips
//!   run on the library's I/O threads (never the executor's), dropping a
//!   future cancels its wait and leaves nothing in Redis, and an
//!   [`AsyncLockGuard`] is `Send` (held across `.await`; not reentrant) and
//!   releases in the background on drop. No executor is needed or started.
//!   Don't call the blocking [`LockClient`] from an `async fn`.
//!
//! # Errors
//! Every fallible call returns [`Error`]: bad input, Redis faults and a lock
//! that was lost are typed, never panics, and each message says what to do.
//! Match the variant, or ask a question of it:
//!
//! ```no_run
//! use std::time::Duration;
//! use leasehold::{Error, LockClient};
//!
//! fn nightly_report(client: &LockClient) -> leasehold::Result<()> {
//!     match client.try_lock_for("nightly:report", Duration::from_secs(5)) {
//!         Ok(Some(guard)) => {
//!             // … the report: only this process runs it …
//!             guard.unlock() // Err(NotHeld) if the lease was lost meanwhile
//!         }
//!         Ok(None) => Ok(()), // another process runs it
//!         Err(e) if e.is_connection() || e.is_timeout() => {
//!             eprintln!("redis unreachable, trying again next run: {e}");
//!             Ok(())
//!         }
//!         Err(e @ Error::Auth { .. }) => {
//!             eprintln!("fix the Redis password in the configuration: {e}");
//!             Err(e)
//!         }
//!         Err(e) => Err(e),
//!     }
//! }
//! ```
//!
//! # Features
//! - `tls` — `rediss://` URLs with rustls, for a single server, Cluster
//!   seeds and Sentinels, with
//!   `LockClientBuilder::tls_root_certificate` for
//!   your own CA and `sentinel_primary_tls` for a Sentinel-managed primary.
//! - `cli` — the `leasehold` command-line tool for operators (`inspect`,
//!   `list`, `force-unlock`, `watch`): `cargo install leasehold --features cli`.
//!
//! No feature is on by default.
//!
//! # The crates in the API
//! [`FencedStore::write`] takes a `redis` connection and [`LockGuard::lost`]
//! returns a `crossbeam_channel` receiver; both crates are re-exported
//! ([`redis`], [`crossbeam_channel`]), so code that depends only on
//! `leasehold` can use them in the versions leasehold was built with:
//!
//! ```no_run
//! use std::time::Duration;
//! use leasehold::crossbeam_channel::{select, tick};
//! use leasehold::{FencedStore, LockClient, LockOptions};
//!
//! fn rotate(client: &LockClient, con: &mut leasehold::redis::Connection) -> leasehold::Result<()> {
//!     let guard = client.lock_with("keys:rotate", LockOptions::new().fenced())?;
//!     let lost = guard.lost();
//!     let step = tick(Duration::from_millis(100));
//!     for n in 0..10 {
//!         select! {
//!             recv(lost) -> why => {
//!                 eprintln!("stopping: the lock was lost ({why:?})");
//!                 return Ok(());
//!             }
//!             recv(step) -> _ => { let _ = n; /* … one step of work … */ }
//!         }
//!     }
//!     let store = FencedStore::new("keys:current");
//!     store.write(con, guard.fence().unwrap_or(0), "key-42")?;
//!     guard.unlock()
//! }
//! ```
#![warn(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod acquire;
mod builder;
mod client;
mod conn;
mod error;
mod fenced;
mod guard;
mod inspect;
mod ledger;
mod multi;
mod names;
mod notify;
mod options;
mod park;
mod protocol;
mod raw;
mod redlock;
mod renewal;
mod semaphore;
mod shared;
mod stats;
mod task;
#[cfg(feature = "tls")]
mod tls;
mod wait;

/// The channels of [`LockGuard::lost`] (and `select!` beside them).
pub use crossbeam_channel;
/// The `redis` crate leasehold is built on (for [`FencedStore::write`]'s
/// connection, and for talking to the same Redis yourself), so your code
/// needs no `redis` dependency of its own in a matching version.
pub use redis;

/// This crate's version (what a client registers for operators, and what
/// `leasehold --version` prints).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

pub use builder::LockClientBuilder;
pub use client::LockClient;
pub use error::{Error, Result};
pub use fenced::FencedStore;
pub use guard::{LockGuard, Owned, OwnedLockGuard, ThisThread};
pub use inspect::{ClientInfo, HoldMode, Holder, LockInfo, LockKind, WaitQueue, Waiter};
pub use multi::MultiLockGuard;
pub use options::{Cancel, LockOptions, ShardedPubSub, MAX_LEASE, MAX_NAME_BYTES};
pub use redlock::{Redlock, RedlockBuilder, RedlockGuard};
pub use renewal::LeaseLost;
pub use semaphore::{PermitGuard, PermitInfo, Semaphore, SemaphoreInfo, SemaphoreWaiter};
pub use stats::{Stats, WAIT_BUCKETS_MS};
pub use task::{
    AsyncLockClient, AsyncLockGuard, AsyncMultiLockGuard, AsyncPermitGuard, AsyncSemaphore,
};

/// The Lua sources of the lock protocol, for the benches' protocol floor
/// (the same scripts on a plain connection, without this library around
/// them). Not a stable API.
#[doc(hidden)]
pub mod scripts {
    /// The acquire script: `KEYS` lock, line; `ARGV` lease ms, owner, fresh
    /// flag, place (empty: none).
    pub const ACQUIRE: &str = crate::protocol::ACQUIRE;
    /// The release script: `KEYS` lock, unlock channel, line; `ARGV` lease
    /// ms, owner, last-hold flag, then an optional successor.
    pub const RELEASE: &str = crate::protocol::RELEASE;
}
