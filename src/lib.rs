// Module map for maintainers. Layers import downward only (checked by
// `../shared/tools/modcycles` in scripts/test.sh and by tests/layers.rs); a
// file's opening comment says what it owns. The user's documentation
// follows (`//!`).
//
//   bottom     sync      the machinery's Mutex, Condvar and atomics: parking_lot's
//                        and std's, or loom's under `cfg(loom)` (the models)
//              error/    the one Error and its messages; classify: how a redis
//                        error becomes one, and the one classification (Retry)
//              options   LockOptions, SemaphoreOptions, RedlockOptions, Cancel,
//                        Kind, name/lease checks, deadlines
//              names     keys and channels of Redisson's layouts; short ids
//              stats     Stats and the counters behind it
//              tls       rustls for the subscriber socket (feature `tls`)
//              park      how a wait parks (a thread, or a task: wakers, the
//                        timer thread): one acquire path for both APIs
//   protocol   protocol/ every script call and its reply per kind (plain, fair,
//                        rwlock), the renew call (renew), a lock's shape and
//                        forced release (admin), channel messages; one dispatch
//                        on Kind; no threads, no pools
//   conn       conn/     pools, targets (fixed, Sentinel), cluster routing; the
//                        one place that follows redirects (calls: `run`;
//                        batches: `batch`); our socket and wire, one handshake;
//                        the one round trip of the lock path (`transport`:
//                        inline, the client's I/O threads — `threads` — or
//                        the task's own tokio runtime — `runtime`, feature
//                        `tokio`, with `reply`: where a reply ends) and what
//                        a call dropped while out leaves to undo
//   machinery  notify/   the shared subscriber: its book of channels, wake-ups,
//                        grants kept per waiter, slots that move
//              renewal/  the watchdog thread: lease state, timer wheel, the
//                        batches it sends, loss; the client's registration
//              ledger/   the one ledger of holds (count, token, lease state and
//                        renewal share per owner field); the plain lock's
//                        in-process queue and its handover
//   raw        raw/      one lock's operations for every kind (attempt with
//                        WAIT and undo, release, leave, forced release, reads),
//                        each written once over the transport; a guard's hold
//                        (the one acquire ending, the one release path); one
//                        acquisition for the wait loop; lost replies, the
//                        thread that undoes them, and the one hook of a call
//                        whose caller went away
//   wait       wait      the one acquire/wait loop (attempt, park, grant, leave,
//                        outages, deadline), behind two seams (tests: fakes)
//   shared     shared    a client's parts assembled: raw engine and subscriber
//   faces      acquire   LockClient's acquire path over raw + wait
//              guard     LockGuard, OwnedLockGuard; Held, what every guard
//                        does alike over a raw hold (checked release, drop)
//              client    LockClient: the ladder, operators' calls
//              ladder    the fair, read and write rungs of both faces, written once
//              task/     AsyncLockClient, AsyncLockGuard: the same acquire
//                        path for tasks (waits park the task, round trips on
//                        the I/O threads, drop releases in the background)
//              builder   LockClientBuilder<C> (both faces) and the constructors
//              redlock   Redlock over independent masters (a raw hold per node)
//              fenced    FencedStore
//              multi     lock_all: several names in one canonical order,
//                        MultiLockGuard
//              semaphore/ Semaphore, PermitGuard: leased permits over the raw
//                        layer's permits and the one wait loop
//              job/      Job, JobGuard, AsyncJob: scheduled jobs in ShedLock's
//                        layout (one attempt, renewed while the job runs)
//              election/ Election, Leadership: leader election on a fenced
//                        lock (the term is its token), both faces
//              inspect   LockClient::inspect and list: holders, waiters, clients
//              testing   TestServer: a throwaway redis-server for a test (feature
//                        `testing`; the project's own tests stand on it)
//   binary     bin/      the operators' `leasehold` CLI (feature `cli`), the
//                        public API only

//! Distributed locks on Redis with RAII guards, the way Redisson gives them to
//! Java — and in Redisson's layouts, so Rust and Java services can guard the
//! same resource: unique owners, an owner-checked atomic unlock, reentrancy,
//! leases renewed while the guard lives, and waiting on pub/sub instead of
//! polling. A blocking [`LockClient`] for threads, an [`AsyncLockClient`] for
//! tasks.
//!
//! ```no_run
//! # fn pay() -> Result<(), leasehold::Error> { Ok(()) }
//! # fn main() -> Result<(), leasehold::Error> {
//! let client = leasehold::LockClient::connect("redis://127.0.0.1/")?; // one per process; Redis answered
//! let guard = client.lock("order:pay")?; // blocks until held
//! pay()?;                                // exactly one process is here
//! guard.unlock()?;                       // or drop it: an owner-checked unlock
//! # Ok(()) }
//! ```
//!
//! In async code the wait parks the task, not a thread (any executor; none
//! is started):
//!
//! ```no_run
//! # async fn pay() {}
//! #[tokio::main]
//! async fn main() -> leasehold::Result<()> {
//!     let client = leasehold::AsyncLockClient::connect("redis://127.0.0.1/").await?;
//!     let guard = client.lock("order:pay").await?; // parks the task
//!     pay().await;                                 // held across .await
//!     guard.unlock().await                         // or drop: released in the background
//! }
//! ```
//!
//! # The ladder
//! As `parking_lot`'s mutex, inside `Result` because Redis can fail:
//! [`lock`](LockClient::lock) blocks, [`try_lock`](LockClient::try_lock) makes
//! one attempt, [`try_lock_for`](LockClient::try_lock_for) /
//! [`try_lock_until`](LockClient::try_lock_until) wait up to a bound, and
//! [`lock_with`](LockClient::lock_with) takes [`LockOptions`].
//!
//! **A wait that runs out**, on every face (locks of every kind, owned
//! holds, permits, Redlock, `lock_all`, blocking and async): a `try_*` call
//! gives `Ok(None)` when what it asked for stayed busy until its bound —
//! nothing is then held, and no place in a line is left behind; a call
//! without `try_` that was given a bound (`lock_with(LockOptions::new().wait(d))`,
//! `acquire_with`, `lock_all_with`) gives `Err(`[`Error::WaitTimedOut`]`)`
//! instead, as it promised a hold. A wait that ends because Redis could not
//! answer is an error on every rung, `try_*` included:
//! [`Error::Unavailable`] for one server, [`Error::NoQuorum`] for a Redlock
//! whose nodes did not answer in enough number to decide — "busy" is only
//! ever `None` or `WaitTimedOut`.
//!
//! # Every face
//! The same rungs, names and return convention on each face (`tests/faces.rs`
//! fails when a method exists on one face and not its twin, but for those
//! listed there with why):
//!
//! | rung | `LockClient` | `AsyncLockClient` | `Semaphore` / `AsyncSemaphore` | `Redlock` | `lock_all` (both faces) |
//! |---|---|---|---|---|---|
//! | as long as it takes | `lock` | `lock` | `acquire`, `acquire_many` | `lock` | `lock_all` |
//! | one attempt | `try_lock` | `try_lock` | `try_acquire`, `try_acquire_many` | `try_lock` | `try_lock_all` |
//! | a `Duration` | `try_lock_for` | `try_lock_for` | `try_acquire_for`, `try_acquire_many_for` | `try_lock_for` | `try_lock_all_for` |
//! | an `Instant` | `try_lock_until` | `try_lock_until` | `try_acquire_until`, `try_acquire_many_until` | `try_lock_until` | `try_lock_all_until` |
//! | options | `lock_with`, `try_lock_with` | `lock_with`, `try_lock_with` | `acquire_with`, `try_acquire_with` | `lock_with`, `try_lock_with` | `lock_all_with`, `try_lock_all_with` |
//! | options type | [`LockOptions`] | [`LockOptions`] | [`SemaphoreOptions`] | [`RedlockOptions`] | [`LockOptions`] |
//! | made by | `LockClient::builder(url)` … `build()` / `connect()` | `AsyncLockClient::builder(url)` … `build()` / `connect().await` | `client.semaphore(name)` | `Redlock::builder(&urls)` … `build()` | the client |
//! | guard | [`LockGuard`], [`OwnedLockGuard`] | [`AsyncLockGuard`] | [`PermitGuard`] / [`AsyncPermitGuard`] | [`RedlockGuard`] | [`MultiLockGuard`] / [`AsyncMultiLockGuard`] |
//!
//! Every guard has `is_held`, `valid_until`, `remaining`, `lost` and the
//! checked `unlock` — and `name`, `key`, `lease` for one hold, `names`,
//! `keys`, `guards` for several, `fence` for the kinds that mint one.
//! Scheduled jobs ([`Job`] / [`AsyncJob`], guards [`JobGuard`] /
//! [`AsyncJobGuard`]) and elections ([`Election`] / [`AsyncElection`],
//! [`Leadership`] / [`AsyncLeadership`]) are twins the same way; the same
//! test checks them.
//!
//! The three options types share one part — `lease`, `wait`, `cancel_on`
//! (and their getters `lease_time`, `wait_time`, `cancel_handle`); what
//! only locks of one server have (`fenced`, `fair`, `read`, `write`) is on
//! [`LockOptions`] alone, so a face that cannot take it is not offered it.
//!
//! Each lock kind has the first four rungs on both client faces: `fair_lock`,
//! `try_fair_lock`, `try_fair_lock_for`, `try_fair_lock_until`, and so for
//! `read_…` and `write_…`; a thread's owned hold has `lock_owned`,
//! `try_lock_owned`, `try_lock_owned_for`, `try_lock_owned_until`,
//! `lock_owned_with`, `try_lock_owned_with` (an async guard is owned
//! already). Every guard's [`lost()`](LeaseWatch) is a [`LeaseWatch`].
//!
//! # The types
//! - [`LockClient`] — the handle, cloned into every thread: the ladder, the
//!   other kinds, operators' calls, and what it [guarantees](LockClient#guarantees).
//!   [`LockClientBuilder`]: pool, key prefix, leases, timeouts, Cluster,
//!   Sentinel, replica acknowledgement.
//! - [`LockGuard`] — one hold, reentrant on its thread; dropping it unlocks.
//!   [`OwnedLockGuard`] ([`lock_owned`](LockClient::lock_owned)): `Send`, not
//!   reentrant.
//! - [`LockOptions`] — lease, bounded wait, [`Cancel`], kind, fencing;
//!   [`SemaphoreOptions`] and [`RedlockOptions`] — the first three.
//! - Other kinds: [`fair_lock`](LockClient::fair_lock) (first come, first
//!   served across processes), [`read_lock`](LockClient::read_lock) /
//!   [`write_lock`](LockClient::write_lock) (many readers or one writer).
//! - [`FencedStore`] — a resource that refuses stale
//!   [fencing tokens](LockGuard::fence).
//! - [`lock_all`](LockClient::lock_all) → [`MultiLockGuard`] — several names,
//!   all or none, without deadlock.
//! - [`Semaphore`] / [`PermitGuard`] — at most N leased permits across
//!   processes.
//! - [`Redlock`] / [`RedlockGuard`] — one lock over a majority of independent
//!   masters.
//! - [`Job`] ([`LockClient::job`]) → [`JobRun`] / [`JobGuard`] — a scheduled
//!   job run at most once per window across replicas, in ShedLock's layout.
//! - [`Election`] ([`LockClient::election`]) → [`Leadership`] — leader
//!   election whose term is a fencing token; [`Leader`] says who leads.
//! - [`AsyncLockClient`] — the same client for tasks, with [`AsyncLockGuard`],
//!   [`AsyncMultiLockGuard`], [`AsyncSemaphore`] / [`AsyncPermitGuard`].
//! - [`Error`] / [`Result`] — every failure typed, saying what to do;
//!   [`LeaseWatch`] — every guard's lease-lost signal ([`LockGuard::lost`]),
//!   [`LeaseLost`] — why.
//! - [`LockInfo`] — who holds and who waits
//!   ([`inspect`](LockClient::inspect), [`list`](LockClient::list));
//!   [`Stats`] — a client's counters for metrics.
//! - [`redis`](#reexport.redis) and
//!   [`crossbeam_channel`](#reexport.crossbeam_channel) — re-exported in the
//!   versions leasehold is built with: for [`FencedStore::write`]'s
//!   connection, and to `select!` on [`LeaseWatch::receiver`].
//! - `scripts` — the Lua sources, for the benches; hidden, not a stable API.
//!
//! # Features
//! `tls`: `rediss://` URLs with rustls (a server, Cluster, Sentinel). `cli`:
//! the operators' `leasehold` tool (`inspect`, `list`, `force-unlock`,
//! `watch`, `semaphore`). `tokio`: the async face's round trips on the task's
//! own tokio runtime (a connection of that runtime's, read on its reactor)
//! rather than leasehold's I/O threads, and blocking calls refused on an
//! executor's thread. None is on by default.
//!
//! How it works — what is in Redis, how waiters are woken, renewal — is in
//! the README and in `docs/design.md` in the repository.
#![warn(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

/// Consuming setters, each with its docs and attributes:
/// `name(arg: Type) => field = value;` is
/// `pub fn name(mut self, arg: Type) -> Self` setting `self.field`.
macro_rules! setters {
    ($($(#[$attr:meta])* $name:ident($($arg:ident: $ty:ty),*) => $($field:ident).+ = $value:expr;)*) => {$(
        $(#[$attr])*
        pub fn $name(mut self, $($arg: $ty),*) -> Self {
            self.$($field).+ = $value;
            self
        }
    )*};
}

mod acquire;
mod builder;
mod client;
mod conn;
mod election;
mod error;
mod fenced;
mod guard;
mod inspect;
mod job;
mod ladder;
mod ledger;
mod meter;
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
mod sync;
mod task;
#[cfg(feature = "testing")]
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
pub mod testing;
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
pub use election::{AsyncElection, AsyncLeadership, Election, Leader, Leadership, Role};
pub use error::{Error, RedisCause, Result};
pub use fenced::FencedStore;
pub use guard::{LockGuard, Owned, OwnedLockGuard, ThisThread};
pub use inspect::{ClientInfo, HoldMode, Holder, LockInfo, LockKind, WaitQueue, Waiter};
pub use job::{
    assert_locked, running_job, AsyncJob, AsyncJobGuard, Job, JobGuard, JobHistory, JobRun, Skipped,
};
pub use multi::MultiLockGuard;
pub use options::{
    Cancel, LockOptions, RedlockOptions, SemaphoreOptions, ShardedPubSub, MAX_LEASE, MAX_NAME_BYTES,
};
pub use redlock::{Redlock, RedlockBuilder, RedlockGuard};
pub use renewal::{LeaseLost, LeaseWatch, UntilLost};
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
    /// The acquire script: `KEYS` lock, line, yield marker; `ARGV` lease
    /// ms, owner, guards alive, place (empty: none; or its element in line,
    /// `<until>|<place>`).
    pub const ACQUIRE: &str = crate::protocol::ACQUIRE;
    /// The release script: `KEYS` lock, unlock channel, line, yield marker,
    /// token counter; `ARGV` keep, owner, last-hold flag, then an optional
    /// successor.
    pub const RELEASE: &str = crate::protocol::RELEASE;

    /// Every script as the library sends it (classic pub/sub), by name: the
    /// protocol simulator (`tests/sim`) runs exactly these.
    #[cfg(feature = "simulation")]
    pub fn all() -> Vec<(&'static str, &'static str)> {
        crate::protocol::simulated()
    }
}
