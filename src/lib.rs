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
//! an acquire and a release, two commands per critical section. A granted
//! waiter that died costs the next one the grant lease (3 s), never a
//! watchdog lease; the grantee's renewal lengthens it. With no leasehold
//! waiter in line, the release publishes `0` on the unlock channel exactly as
//! Redisson's does, and leasehold waiters hear that too, so a Redisson holder
//! wakes them. While other libraries' waiters are subscribed, at most two
//! grants go out in a row before the lock is left to them.
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
//! # Beyond one Redis
//! [`LockClient::cluster_builder`] routes every lock by its key's slot in a
//! Redis Cluster (following `MOVED`/`ASK`, one renewal batch per node);
//! [`LockClient::sentinel_builder`] follows a Sentinel-managed primary
//! through failovers; [`LockClientBuilder::replicas`] makes every acquire
//! wait for replica acknowledgement (`WAIT`); [`Redlock`] holds a lock on a
//! majority of independent masters.
//!
//! # Errors
//! Every fallible call returns [`Error`]: bad input, Redis faults and a lock
//! that was lost are typed, never panics.
#![warn(missing_docs)]

// Module map for maintainers. Layers import downward only (checked by
// `../shared/tools/modcycles` in scripts/test.sh); a file's opening comment
// says what it owns.
//
//   bottom      error     the one Error; the one Redis error classification (Retry)
//               options   LockOptions, Kind, name/lease checks, deadline arithmetic
//               names     keys and channels of Redisson's layouts; short ids
//               stats     Stats and the counters behind it
//               tls       rustls for the subscriber socket (feature `tls`)
//   protocol    protocol/ scripts and replies per kind (plain, fair, rwlock), one
//                         dispatch on Kind; no threads, no pools
//   conn        conn/     pools, targets (fixed, Sentinel), cluster routing, `run`;
//                         our socket (`stream`: reads on after EINTR) and command
//                         connection (`wire`), one handshake for all
//   machinery   notify/   the shared pub/sub subscriber (per node when a cluster
//                         shards): lingering subscriptions, unlock messages,
//                         grants kept per waiter, slots that move
//               renewal/  the watchdog thread: lease state, wheel, worker
//               local/    the in-process queue and handoff
//               orphans   acquires whose reply was lost, undone once Redis
//                         answers; live fair/read/write holds
//   shared      shared    what a client and its guards share; the release path
//   wait        wait      the one acquire/wait loop (attempt, park, grant, leave),
//                         behind two seams (tests: fakes)
//   top         acquire   input checks, the local turn, the kind adapter → wait
//               guard     LockGuard, OwnedLockGuard (call Shared::release)
//               client    LockClient and its ladder
//               builder   LockClientBuilder and the constructors
//               redlock   Redlock over independent masters
//               fenced    FencedStore
//               inspect   LockClient::inspect: holders, waiters, clients
//   binary      bin/      the operators' `leasehold` CLI (feature `cli`),
//                         the public API only

mod acquire;
mod builder;
mod client;
mod conn;
mod error;
mod fenced;
mod guard;
mod inspect;
mod local;
mod names;
mod notify;
mod options;
mod orphans;
mod protocol;
mod redlock;
mod renewal;
mod shared;
mod stats;
#[cfg(feature = "tls")]
mod tls;
mod wait;

pub use builder::LockClientBuilder;
pub use client::LockClient;
pub use error::{Error, Result};
pub use fenced::FencedStore;
pub use guard::{LockGuard, Owned, OwnedLockGuard, ThisThread};
pub use inspect::{ClientInfo, HoldMode, Holder, LockInfo, LockKind, WaitQueue, Waiter};
pub use options::{Cancel, LockOptions, ShardedPubSub, MAX_LEASE, MAX_NAME_BYTES};
pub use redlock::{Redlock, RedlockBuilder, RedlockGuard};
pub use renewal::LeaseLost;
pub use stats::{Stats, WAIT_BUCKETS_MS};

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
