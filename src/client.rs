//! `LockClient`: the handle users hold, and its methods in the order its
//! page shows them — the ladder of ways to take a lock (`lock`, `try_lock`,
//! `try_lock_for`, `try_lock_until`, `lock_with`), owned guards that may
//! change threads, the fair and read/write variants, then operators' calls
//! (`inspect`, `list`, `is_locked`, `force_unlock`, `ping`, `stats`,
//! `acl_rules`). Each call states what it wants and hands it to the acquire
//! path; constructors live with the builder, `lock_all` in `multi`,
//! `semaphore` in `semaphore/`, `to_async` in `task/`.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::acquire::acquire_hold;
use crate::error::{Error, Result};
use crate::guard::{DropOn, LockGuard, OwnedLockGuard, OwnerKind};
use crate::names::short_id;
use crate::options::{check_name, deadline_after, LockOptions};
use crate::park::{block_on, blocking_wait_allowed, Park};
use crate::raw::{Raw, Want};
use crate::shared::Shared;
use crate::stats::Stats;

/// What a blocking wait refused on an async runtime's thread should use.
const ASYNC_FACE: &str =
    "the async face, leasehold::AsyncLockClient (LockClient::to_async), and .await the lock";

/// A handle to a Redis server for taking distributed locks.
///
/// Cheap to clone (an `Arc` inside), `Send + Sync`: build one per process and
/// share it. Each client has a random id; together with a small per-thread
/// number it forms the owner of every lock the client takes, so the same thread
/// can re-enter a lock it holds and no one else can release it. Such a guard
/// stays on its thread; [`lock_owned`](Self::lock_owned) gives one that can
/// move (see "Threads, pools and async" in the README). [The crate
/// docs](crate) show it in use.
///
/// # In Redis
/// The layout is Redisson's `RLock`, so a Rust service and a Java service
/// can guard the same resource: the lock key (the
/// [key prefix](crate::LockClientBuilder::key_prefix) followed by the name)
/// is a hash `{"<client-uuid>:<thread-n>": hold_count}` with a `PEXPIRE` of
/// the lease; the last unlock deletes it and publishes `0` on
/// `redisson_lock__channel:{<key>}`. Acquire and release are one Lua script
/// each, so an uncontended lock + unlock is two round trips, and the owner
/// check happens inside Redis. How waiters are woken is under *Waiting* on
/// [`lock`](Self::lock).
///
/// # Connections and threads
/// A client has a connection pool (16 by default,
/// [`pool_size`](crate::LockClientBuilder::pool_size); a call holds a
/// connection only for its round trips, never while it waits), one
/// subscriber connection for unlock messages (one per cluster node with
/// sharded pub/sub), and one renewal thread with its own connection. Clones
/// share all of it. Don't call it from an `async fn`: use its
/// [async face](Self::to_async).
///
/// # Guarantees
/// - **One owner at a time, checked in Redis**: acquire, release and renewal
///   are Lua scripts with the owner check inside; a guard can never release
///   or extend a lock it does not hold ([`Error::NotHeld`] instead).
/// - **Loss is reported, not hidden**: a watchdog lease that cannot be
///   confirmed with two socket timeouts to spare is reported lost
///   ([`LockGuard::is_held`] turns false, one
///   [`LeaseLost`](crate::LeaseLost) on [`LockGuard::lost`]) before Redis
///   expires it; an acquire reply that arrives after its lease ran out never
///   becomes a guard.
/// - **A lost reply leaves no hold behind, and a release is never lost**: an
///   acquire whose reply never came is undone, owner-checked, as soon as
///   Redis answers again; a release whose reply never came is sent again
///   until Redis answers or the lease ends ([`Error::ReleasePending`]).
/// - **Deadlines are kept**: a bounded wait returns by its deadline plus one
///   round trip, also while Redis hangs, and rides out an outage up to its
///   deadline ([`Error::Unavailable`] when the deadline comes first).
/// - **A dead or stalled client costs the others at most the lock's
///   lease** (a hold granted by a release: at most 3 s).
/// - **Nothing panics** on bad input or Redis faults, and `Drop` is bounded
///   by the socket timeout.
///
/// No lease lock can stop a holder that was paused (GC, `SIGSTOP`, a VM
/// migration) past its lease from acting on stale belief; use a
/// [fenced](LockOptions::fenced) lock and let the resource check the token
/// ([`FencedStore`](crate::FencedStore)). Redis restarted without
/// persistence, or a failover with asynchronous replication, can lose a
/// hold; its holder is told at the next renewal
/// ([`replicas`](crate::LockClientBuilder::replicas) and
/// [`Redlock`](crate::Redlock) narrow the second).
#[derive(Clone)]
pub struct LockClient {
    shared: Arc<Shared>,
}

impl LockClient {
    /// Takes the lock `name`, waiting as long as it takes.
    ///
    /// The lease is the client's watchdog lease, renewed by the client's
    /// renewal thread while the guard lives. If the calling thread already
    /// holds `name`, this re-enters at once and returns a second guard; the lock
    /// is free only when every guard is gone.
    ///
    /// # Waiting
    /// While someone else holds the lock the thread parks until its grant,
    /// the holder's unlock message or the end of the holder's lease,
    /// whichever comes first — it never polls, and a holder that crashed
    /// costs it at most that lease.
    ///
    /// Waiting clients stand in a line in Redis, one place per client and
    /// lock name (`leasehold_line:{<key>}`). A release gives the lock to the
    /// first live place directly — the release script sets the owner and a
    /// grant lease of at most 3 s (the grantee's renewal lengthens it), and
    /// only that client hears it, on its own grant channel — so a handoff
    /// between processes wakes one waiter and costs it no round trip: two
    /// commands per critical section. A place expires 3 s after its waiter
    /// last confirmed it, so a granted or first-in-line waiter that died or
    /// stalled costs the next one at most 3 s, never a watchdog lease.
    ///
    /// With no leasehold waiter in line, the release publishes `0` on the
    /// unlock channel exactly as Redisson's does; a leasehold waiter that
    /// finds a Redisson holder subscribes to it (a leasehold holder's waiters
    /// hear only their grant channels). While such waiters are subscribed, at
    /// most two grants go out in a row before the lock is left to them.
    /// Subscriptions (one subscriber connection per client, shared and
    /// reference-counted) linger a second after the last waiter, so a busy
    /// name is not resubscribed for every wait.
    ///
    /// Threads of one client never race each other at Redis: one per lock
    /// name talks to Redis and holds the client's place, the others queue in
    /// the client in arrival order, and a release hands the lock to the next
    /// of them inside the release script (one round trip, the owner field
    /// replaced atomically) — at most twice in a row while other clients
    /// wait, then to the first of them.
    ///
    /// If Redis goes away while the thread waits (a restart, a failover), it
    /// keeps trying with backoff up to the connect timeout, then returns the
    /// connection error; pooled connections that died meanwhile are skipped.
    ///
    /// # Errors
    /// Invalid name, Redis unreachable or failing, a non-lock value at the key.
    pub fn lock(&self, name: &str) -> Result<LockGuard> {
        self.lock_with(name, LockOptions::new())
    }

    /// One attempt: the guard if the lock was free (or already ours), `None`
    /// if someone else holds it. When another thread of this client holds the
    /// lock or is already trying for it, the answer is `None` at once, with no
    /// round trip.
    ///
    /// # Errors
    /// As [`lock`](Self::lock).
    pub fn try_lock(&self, name: &str) -> Result<Option<LockGuard>> {
        self.take(name, LockOptions::new(), Some(Instant::now()))
    }

    /// Waits up to `wait` for the lock; `None` if it stayed held.
    ///
    /// Errors are typed, and each message says what to do; match the
    /// variant, or ask a question of it:
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use leasehold::{Error, LockClient};
    ///
    /// fn reindex(client: &LockClient) -> leasehold::Result<()> {
    ///     match client.try_lock_for("search:reindex", Duration::from_secs(5)) {
    ///         Ok(Some(guard)) => {
    ///             // … the rebuild: no other process runs it meanwhile …
    ///             guard.unlock() // Err(NotHeld) if the lease was lost meanwhile
    ///         }
    ///         // Another process was rebuilding for the whole 5 s. (One that
    ///         // finishes sooner lets this one in, and it rebuilds again:
    ///         // one at a time, not once per window.)
    ///         Ok(None) => Ok(()),
    ///         Err(e) if e.is_connection() || e.is_timeout() => {
    ///             eprintln!("redis unreachable, trying again next run: {e}");
    ///             Ok(())
    ///         }
    ///         Err(e @ Error::Auth { .. }) => {
    ///             eprintln!("fix the Redis password in the configuration: {e}");
    ///             Err(e)
    ///         }
    ///         Err(e) => Err(e),
    ///     }
    /// }
    /// ```
    ///
    /// # Errors
    /// As [`lock`](Self::lock).
    pub fn try_lock_for(&self, name: &str, wait: Duration) -> Result<Option<LockGuard>> {
        self.take(name, LockOptions::new(), Some(deadline_after(wait)))
    }

    /// Waits until `deadline` for the lock; `None` if it stayed held. A
    /// deadline in the past makes one attempt.
    ///
    /// # Errors
    /// As [`lock`](Self::lock).
    pub fn try_lock_until(&self, name: &str, deadline: Instant) -> Result<Option<LockGuard>> {
        self.take(name, LockOptions::new(), Some(deadline))
    }

    /// Takes the lock with options: an explicit lease, a bounded wait.
    ///
    /// With [`LockOptions::wait`] set, gives up when the wait runs out and
    /// returns [`Error::WaitTimedOut`]; without it, waits as long as it takes.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), leasehold::Error> {
    /// use std::time::Duration;
    /// use leasehold::LockOptions;
    /// let client = leasehold::LockClient::new("redis://127.0.0.1/")?;
    /// let opts = LockOptions::new()
    ///     .lease(Duration::from_secs(10))
    ///     .wait(Duration::from_secs(2));
    /// match client.lock_with("cache:rebuild", opts) {
    ///     Ok(_guard) => { /* at most 10 s of work */ }
    ///     Err(e) if e.is_wait_timeout() => { /* someone else is on it */ }
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`lock`](Self::lock), plus [`Error::WaitTimedOut`] and a zero lease.
    pub fn lock_with(&self, name: &str, options: LockOptions) -> Result<LockGuard> {
        self.take_waiting(name, options)
    }

    /// Like [`lock_with`](Self::lock_with) but returns `None` when the wait
    /// runs out; without [`LockOptions::wait`] it makes one attempt.
    ///
    /// # Errors
    /// As [`lock`](Self::lock), plus a zero lease.
    pub fn try_lock_with(&self, name: &str, options: LockOptions) -> Result<Option<LockGuard>> {
        let deadline = deadline_after(options.wait_time().unwrap_or_default());
        self.take(name, options, Some(deadline))
    }

    /// Takes the lock `name` for a guard that owns it on its own — not
    /// reentrant, and `Send`: hand it to another thread, a pool, a blocking
    /// task. The lock is free when the guard is dropped or unlocked, wherever
    /// that happens. The thread that took it does not hold the lock: if it
    /// asks for `name` again it waits like anyone else (and waits for itself
    /// if it still keeps the guard).
    ///
    /// # Errors
    /// As [`lock`](Self::lock).
    pub fn lock_owned(&self, name: &str) -> Result<OwnedLockGuard> {
        self.lock_owned_with(name, LockOptions::new())
    }

    /// [`lock_owned`](Self::lock_owned) with options: any kind (fair, read,
    /// write), fencing, an explicit lease, a bounded wait.
    ///
    /// # Errors
    /// As [`lock_with`](Self::lock_with).
    pub fn lock_owned_with(&self, name: &str, options: LockOptions) -> Result<OwnedLockGuard> {
        self.take_waiting(name, options)
    }

    /// One attempt at an owned hold of `name` (see
    /// [`lock_owned`](Self::lock_owned)): `None` when it is held elsewhere.
    ///
    /// # Errors
    /// As [`lock`](Self::lock).
    pub fn try_lock_owned(&self, name: &str) -> Result<Option<OwnedLockGuard>> {
        self.take(name, LockOptions::new(), Some(Instant::now()))
    }

    /// An owned hold of `name`, waiting up to `wait`: `None` when the wait
    /// ran out.
    ///
    /// # Errors
    /// As [`lock`](Self::lock).
    pub fn try_lock_owned_for(&self, name: &str, wait: Duration) -> Result<Option<OwnedLockGuard>> {
        self.take(name, LockOptions::new(), Some(deadline_after(wait)))
    }

    /// An owned hold of `name`, waiting until `deadline`: `None` when it
    /// passed.
    ///
    /// # Errors
    /// As [`lock`](Self::lock).
    pub fn try_lock_owned_until(
        &self,
        name: &str,
        deadline: Instant,
    ) -> Result<Option<OwnedLockGuard>> {
        self.take(name, LockOptions::new(), Some(deadline))
    }

    /// Like [`lock_owned_with`](Self::lock_owned_with) but returns `None`
    /// when the wait runs out; without [`LockOptions::wait`] it makes one
    /// attempt.
    ///
    /// # Errors
    /// As [`lock`](Self::lock), plus a zero lease.
    pub fn try_lock_owned_with(
        &self,
        name: &str,
        options: LockOptions,
    ) -> Result<Option<OwnedLockGuard>> {
        let deadline = deadline_after(options.wait_time().unwrap_or_default());
        self.take(name, options, Some(deadline))
    }

    /// What Redis knows of lock `name` now, for people on call: its kind,
    /// every holder (owner, hold count, read/write mode) and the client it
    /// belongs to — host, pid and [`client_name`] of every leasehold client
    /// that registered (they do while they hold or renew anything), the
    /// remaining lease, the waiters Redis knows of (the line of waiting
    /// clients, the fair queue, the waiting writers) and the last fencing
    /// token. One script reads the lock's whole state at one moment (a
    /// holder and its waiters never come from two different moments),
    /// then one read per client named; never part of the lock path, and
    /// the answer may be stale by the time it arrives.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), leasehold::Error> {
    /// let client = leasehold::LockClient::new("redis://127.0.0.1/")?;
    /// let info = client.inspect("order:pay")?;
    /// for h in &info.holders {
    ///     match &h.client {
    ///         Some(c) => println!("held by {c}, thread {:?}", h.thread),
    ///         None => println!("held by {} (not registered)", h.owner),
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// [`client_name`]: crate::LockClientBuilder::client_name
    ///
    /// # Errors
    /// As [`is_locked`](Self::is_locked).
    pub fn inspect(&self, name: &str) -> Result<crate::LockInfo> {
        check_name(name)?;
        let raw = self.raw();
        crate::inspect::inspect(raw, name, &raw.key(name))
    }

    /// **An operator's tool**: the locks (held, or waited for) whose names
    /// match `pattern`, a `SCAN` glob (`*` for all, `order:*`), each as
    /// [`inspect`](Self::inspect) gives it, sorted by name. Looks under this
    /// client's key prefix on every server holding locks — each primary of
    /// a cluster, whichever seeds the client was given — at about `limit`
    /// keys at most on each (`SCAN` is incremental, but on a large keyspace
    /// it still reads every key it looks at; hashes and strings are scanned
    /// apart, about `limit` keys each). Locks of every kind, Redisson's
    /// included: the hashes whose every field is an owner with a hold count,
    /// and scheduled jobs' locks (strings holding ShedLock's value); other
    /// hashes and strings under the prefix are left out.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), leasehold::Error> {
    /// let client = leasehold::LockClient::new("redis://127.0.0.1/")?;
    /// for lock in client.list("order:*", 10_000)? {
    ///     println!("{}: {} holder(s), {} waiting", lock.name, lock.holders.len(), lock.waiters.len());
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// An ACL user needs `+scan` for it besides [`acl_rules`](Self::acl_rules)
    /// (which cover what `inspect` reads): an operator's user, not the
    /// services'.
    ///
    /// # Errors
    /// Connection errors when a server could not be reached (in a cluster:
    /// any primary); [`Error::NoPermission`](crate::Error) without `+scan`.
    pub fn list(&self, pattern: &str, limit: usize) -> Result<Vec<crate::LockInfo>> {
        crate::inspect::list(self.raw(), pattern, limit)
    }

    /// Whether anyone holds lock `name` (of any kind) now — Redisson's
    /// `isLocked`. One round trip; the answer may be stale by the time it
    /// arrives, so it is for operators and dashboards, not for deciding to
    /// enter a critical section (take the lock for that).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an empty or overlong name;
    /// [`Error::NotALock`] when the key holds something that is not a lock
    /// (an application hash, a string); connection errors when Redis could
    /// not be reached.
    pub fn is_locked(&self, name: &str) -> Result<bool> {
        check_name(name)?;
        let raw = self.raw();
        raw.lock_shape(&raw.key(name))
    }

    /// **An operator's tool**: releases lock `name` whoever holds it —
    /// Redisson's `forceUnlock`. Deletes the lock of any kind (plain,
    /// fenced, fair, read/write: every holder at once) and wakes its waiters
    /// as that kind's release does, Redisson's included. The holders' guards
    /// report [`LeaseLost::NotOurs`](crate::LeaseLost) at their next renewal
    /// (an explicit lease is not renewed: its guard believes it holds until
    /// its lease ends) and their `unlock()` says `NotHeld`. Mutual exclusion
    /// is broken on purpose: use it for a lock whose holder is stuck, not
    /// one that is working. Returns false when the lock was not held.
    ///
    /// # Errors
    /// As [`is_locked`](Self::is_locked) (a [`Error::NotALock`] changes
    /// nothing).
    pub fn force_unlock(&self, name: &str) -> Result<bool> {
        check_name(name)?;
        let raw = self.raw();
        raw.force_unlock(&raw.key(name))
    }

    /// Checks that Redis answers as configured: a `PING` on a pooled
    /// connection to every server holding locks (each primary of a
    /// cluster; the primary Sentinel names), opening it if needed. Returns
    /// the longest round trip. For start-up checks and health endpoints.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), leasehold::Error> {
    /// let client = leasehold::LockClient::new("redis://127.0.0.1/")?;
    /// let rtt = client.ping()?;
    /// println!("redis answered in {rtt:?}");
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// The typed errors of the lock path, naming the server: a refused or
    /// unreachable address ([`Error::Connection`], [`Error::Pool`]), a
    /// wrong password ([`Error::Auth`]), a server that does not answer in
    /// time ([`Error::TimedOut`]), a peer that is not Redis
    /// ([`Error::NotRedis`]).
    pub fn ping(&self) -> Result<Duration> {
        let rtts = self.raw().read_every_primary("PING", |con| {
            let sent = Instant::now();
            redis::cmd("PING").query::<String>(con)?;
            Ok(sent.elapsed())
        })?;
        Ok(rtts.into_iter().max().unwrap_or_default())
    }

    /// Sees through what this client still does in the background — the
    /// release of a guard or permit dropped in async code, a lost reply
    /// still to undo — waiting at most the socket timeout; whether all of
    /// it was answered (false: Redis did not answer in time, and what it
    /// held expires with its lease). The client stays usable through its
    /// other clones.
    ///
    /// The last handle of a client does the same as it goes, so a program
    /// that ends in the ordinary way (its guards, then its client, going
    /// out of scope) leaves nothing held; call this where a clone may live
    /// on (a `static`, an `Arc` in a framework's state) or to know.
    pub fn close(self) -> bool {
        let raw = Arc::clone(self.raw());
        block_on(raw.flush(Park::Thread, raw.socket_timeout()))
    }

    /// Counters of this client (shared by its clones) for export to metrics:
    /// live watchdog leases, renewals sent and their round trips, leases lost,
    /// waiters parked and queued, in-process handoffs. Reads atomics only;
    /// never touches the network.
    pub fn stats(&self) -> Stats {
        self.shared.stats()
    }

    /// The ACL rules a Redis user needs for this client: every command its
    /// locks send (directly and inside their scripts), the keys of every lock
    /// kind under its key prefix, and their channels — plus `WAIT` with
    /// [`replicas`](crate::LockClientBuilder::replicas) and the cluster
    /// commands for a cluster. What a [`Error::NoPermission`] lists. Pass them
    /// after `ACL SETUSER <user> on ><password>`.
    ///
    /// The channels start with `resetchannels`: Redis 6.2 gives a user
    /// `allchannels` by default and then refuses channel patterns (7.x
    /// gives a new user none), so the user ends up with exactly these
    /// channels on every server — the rules are for a user of its own:
    /// applied to a user that has other channels, they take those away. On a Redis 6.2 *cluster*, leave out the
    /// sharded pub/sub rules (`+spublish`, `+ssubscribe`, `+sunsubscribe`,
    /// `+pubsub|shardnumsub`): 6.2 does not know those commands, refuses
    /// them, and leasehold uses classic pub/sub there.
    ///
    /// ```
    /// # fn main() -> Result<(), leasehold::Error> {
    /// let client = leasehold::LockClient::builder("redis://127.0.0.1/")
    ///     .key_prefix("billing:")
    ///     .build()?;
    /// let rules = client.acl_rules();
    /// assert!(rules.iter().any(|r| r == "~billing:*"));
    /// assert!(rules.iter().any(|r| r == "+evalsha"));
    /// # Ok(()) }
    /// ```
    pub fn acl_rules(&self) -> Vec<String> {
        self.raw().acl_rules().to_vec()
    }

    /// The lease of locks taken without an explicit lease.
    pub fn watchdog_lease(&self) -> Duration {
        self.raw().watchdog_lease()
    }

    /// Waits as `options` say; a wait that runs out is an error.
    fn take_waiting<O: OwnerKind>(&self, name: &str, options: LockOptions) -> Result<LockGuard<O>> {
        let waited = options.wait_time();
        let got = self.take(name, options, waited.map(deadline_after))?;
        or_timed_out(got, name, waited)
    }

    /// The acquire path for `options`, waiting until `deadline` (`None`: as
    /// long as it takes), for the owner `O` says (the thread, or one of its
    /// own).
    pub(crate) fn take<O: OwnerKind>(
        &self,
        name: &str,
        options: LockOptions,
        deadline: Option<Instant>,
    ) -> Result<Option<LockGuard<O>>> {
        let thread = matches!(O::DROP_ON, DropOn::Thread);
        blocking_wait_allowed(name, deadline, thread, ASYNC_FACE)?;
        let want = Want::of(&options, !thread, Park::Thread);
        let hold = block_on(acquire_hold(&self.shared, name, want, deadline))?;
        Ok(hold.map(|hold| LockGuard::new(Arc::clone(self.raw()), hold)))
    }

    /// This client's raw lock engine (shared with its clones and guards).
    pub(crate) fn raw(&self) -> &Arc<Raw> {
        self.shared.raw()
    }

    /// What this client's clones and other faces share.
    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// The blocking face of `shared` (another face's client).
    pub(crate) fn of(shared: &Arc<Shared>) -> Self {
        LockClient {
            shared: Arc::clone(shared),
        }
    }
}

/// `got`, or — a wait of `waited` for `name` that ran out —
/// [`Error::WaitTimedOut`].
pub(crate) fn or_timed_out<T>(got: Option<T>, name: &str, waited: Option<Duration>) -> Result<T> {
    got.ok_or_else(|| Error::WaitTimedOut {
        name: name.to_owned(),
        waited: waited.unwrap_or_default(),
    })
}

impl fmt::Debug for LockClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let raw = self.raw();
        f.debug_struct("LockClient")
            .field("id", &format_args!("{}…", short_id(raw.id())))
            .field("key_prefix", &raw.key_prefix())
            .field("watchdog_lease", &raw.watchdog_lease())
            .field("socket_timeout", &raw.socket_timeout())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_send_sync<T: Send + Sync + Clone + fmt::Debug + 'static>() {}

    #[test]
    fn client_is_send_sync_clone_debug() {
        assert_send_sync::<LockClient>();
    }

    #[test]
    fn empty_name_and_zero_lease_are_rejected_before_redis() {
        // Port 1 on loopback: nothing listens, but validation comes first.
        let client = LockClient::new("redis://127.0.0.1:1/").unwrap();
        assert!(client.try_lock("").unwrap_err().is_invalid_argument());
        let opts = LockOptions::new().lease(Duration::ZERO);
        assert!(client
            .try_lock_with("x", opts)
            .unwrap_err()
            .is_invalid_argument());
    }
}
