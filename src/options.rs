//! Per-lock options, the lock kinds, and the input checks and deadline
//! arithmetic that `LockClient` and `Redlock` share (one wording, one limit).

use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::sync::atomic::{AtomicBool, Ordering};
use crate::sync::Mutex;

/// The longest lock name accepted, in bytes. Redis would take longer keys,
/// but every lock command carries the name (twice on release, as key and
/// channel); a name this long is a mistake or an attack.
pub const MAX_NAME_BYTES: usize = 64 * 1024;

/// The longest lease accepted (Redis refuses expiry times that overflow its
/// millisecond clock; 100 years is far from that and from any real use).
pub const MAX_LEASE: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// Whether a Redis Cluster client publishes unlock messages with sharded
/// pub/sub (`SPUBLISH`, waiters `SSUBSCRIBE` on the node of the channel's
/// slot) or classic pub/sub (`PUBLISH`, broadcast to every node) — chosen
/// as Redisson's `ClusterServersConfig.shardedSubscriptionMode` chooses, so
/// both libraries hear each other on the same names. Only clusters use it:
/// a single server and Sentinel always use classic pub/sub (as Redisson).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ShardedPubSub {
    /// Sharded when the cluster has it (Redis ≥ 7: `PUBSUB SHARDNUMSUB`
    /// answers), classic otherwise — Redisson's default since 3.22.0.
    #[default]
    Auto,
    /// Sharded, also where an ACL user may not run the probe (`PUBSUB
    /// SHARDNUMSUB`) on a server that has it. Only a cluster that does not
    /// know sharded pub/sub (Redis < 7, e.g. 6.2; it cannot `SPUBLISH` at
    /// all) makes the client use classic pub/sub there, with a warning.
    On,
    /// Always classic: for deployments whose Redisson is older than 3.22.0
    /// or configured with `ShardedSubscriptionMode.OFF`.
    Off,
}

/// Which lock a hold is of (which scripts it needs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Kind {
    /// The plain reentrant lock (in-process queue and handoff).
    #[default]
    Plain,
    /// The fair lock (released by the fair script, no local queue).
    Fair,
    /// A read hold of a read/write lock.
    Read,
    /// A write hold of a read/write lock.
    Write,
}

/// Refuses an empty or overlong lock name.
pub(crate) fn check_name(name: &str) -> Result<()> {
    if name.is_empty() {
        return Err(Error::invalid("lock name must not be empty"));
    }
    if name.len() > MAX_NAME_BYTES {
        return Err(Error::invalid(format_args!(
            "lock name is {} bytes; names longer than {MAX_NAME_BYTES} bytes are refused (hash a long name first)",
            name.len()
        )));
    }
    Ok(())
}

/// Refuses a zero lease or one above [`MAX_LEASE`]; `what` names it.
pub(crate) fn check_lease(what: &str, lease: Duration) -> Result<()> {
    if lease.is_zero() {
        return Err(Error::invalid(format_args!(
            "{what} must be greater than zero (a zero PEXPIRE would delete the lock at once)"
        )));
    }
    if lease > MAX_LEASE {
        return Err(Error::invalid(format_args!(
            "{what} must be at most {MAX_LEASE:?} (100 years); for a lock that never expires use the watchdog (no explicit lease)"
        )));
    }
    Ok(())
}

/// What is left from now until `until` (`None`: nothing held) — what
/// every guard's `remaining()` answers from its `valid_until()`.
pub(crate) fn left_until(until: Option<Instant>) -> Duration {
    until.map_or(Duration::ZERO, |t| {
        t.saturating_duration_since(Instant::now())
    })
}

/// The instant `wait` from now; a wait too long for the clock (e.g.
/// `Duration::MAX`) means 100 years — no deadline in practice, no overflow.
pub(crate) fn deadline_after(wait: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(wait)
        .or_else(|| now.checked_add(MAX_LEASE))
        .unwrap_or(now)
}

/// The earlier of an optional deadline and `at`.
pub(crate) fn deadline_min(deadline: Option<Instant>, at: Instant) -> Instant {
    deadline.map_or(at, |d| d.min(at))
}

/// How to take one lock: an explicit lease, a bounded wait.
///
/// ```
/// use std::time::Duration;
/// use leasehold::LockOptions;
///
/// let opts = LockOptions::new()
///     .lease(Duration::from_secs(10))
///     .wait(Duration::from_millis(500));
/// assert_eq!(opts.lease_value(), Some(Duration::from_secs(10)));
/// assert_eq!(opts.wait_value(), Some(Duration::from_millis(500)));
/// assert_eq!(LockOptions::new().lease_value(), None);
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[must_use = "options do nothing until passed to lock_with or try_lock_with"]
pub struct LockOptions {
    lease: Option<Duration>,
    wait: Option<Duration>,
    fenced: bool,
    kind: Kind,
    cancel: Option<Cancel>,
}

/// Cancels the waits it was given to, from another thread — Redisson's
/// `lockInterruptibly`. Pass it with [`LockOptions::cancel_on`]; calling
/// [`cancel`](Self::cancel) wakes every wait holding it at once — a parked
/// thread or task, no polling — and each returns [`Error::Cancelled`],
/// holding nothing and leaving no waiting place in Redis; a wait given it
/// later ends before it starts. A cancelled handle stays cancelled; make a
/// new one for new waits. Clones share the state.
///
/// ```no_run
/// # fn main() -> Result<(), leasehold::Error> {
/// use leasehold::{Cancel, LockOptions};
/// let client = leasehold::LockClient::new("redis://127.0.0.1/")?;
/// let stop = Cancel::new();
/// let waiting = {
///     let (client, stop) = (client.clone(), stop.clone());
///     std::thread::spawn(move || {
///         client.lock_with("batch:shard-7", LockOptions::new().cancel_on(&stop))
///             .map(drop)
///     })
/// };
/// stop.cancel(); // e.g. on shutdown
/// assert!(waiting.join().unwrap().unwrap_err().is_cancelled());
/// # Ok(()) }
/// ```
#[derive(Clone, Default)]
pub struct Cancel {
    inner: Arc<CancelInner>,
}

#[derive(Default)]
struct CancelInner {
    cancelled: AtomicBool,
    /// What wakes each wait holding it now, by registration (see
    /// [`Cancel::on_cancel`]).
    wakers: Mutex<Vec<(u64, Waker)>>,
}

/// Wakes one wait: notifies the signal it parks on, under that signal's
/// mutex (so a wait that looked at the handle just before cannot miss it).
pub(crate) type Waker = Arc<dyn Fn() + Send + Sync>;

impl Cancel {
    /// A handle not cancelled yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Cancels every wait given this handle (or a clone): each one parked
    /// now is woken at once.
    pub fn cancel(&self) {
        if self.inner.cancelled.swap(true, Ordering::SeqCst) {
            return;
        }
        let woken = std::mem::take(&mut *self.inner.wakers.lock());
        for (_, wake) in woken {
            wake();
        }
    }

    /// Whether [`cancel`](Self::cancel) was called.
    pub fn is_cancelled(&self) -> bool {
        self.inner.cancelled.load(Ordering::SeqCst)
    }

    /// Has `wake` run when the handle is cancelled, while the returned
    /// registration lives. The wait looks at [`is_cancelled`] under the
    /// mutex `wake` takes, after registering: a cancel then either is seen
    /// there or wakes it.
    ///
    /// [`is_cancelled`]: Self::is_cancelled
    pub(crate) fn on_cancel(&self, wake: Waker) -> OnCancel {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let id = NEXT.fetch_add(1, Ordering::Relaxed);
        self.inner.wakers.lock().push((id, wake));
        OnCancel {
            cancel: self.clone(),
            id,
        }
    }
}

/// A wait's registration with a [`Cancel`]; taken out when dropped.
pub(crate) struct OnCancel {
    cancel: Cancel,
    id: u64,
}

impl Drop for OnCancel {
    fn drop(&mut self) {
        let mut wakers = self.cancel.inner.wakers.lock();
        wakers.retain(|(id, _)| *id != self.id);
    }
}

impl std::fmt::Debug for Cancel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cancel")
            .field("cancelled", &self.is_cancelled())
            .finish()
    }
}

/// Handles are equal when they are clones of one another.
impl PartialEq for Cancel {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }
}

impl Eq for Cancel {}

impl LockOptions {
    /// Defaults: the client's watchdog lease, and waiting as long as it takes
    /// (`lock_with`) or one attempt (`try_lock_with`).
    pub fn new() -> Self {
        Self::default()
    }

    setters! {
        /// An explicit lease: the lock simply expires this long after it was
        /// taken unless unlocked first (Redisson's `lock(leaseTime)`). Must be
        /// greater than zero. Defaults to the client's watchdog lease.
        lease(lease: Duration) => lease = Some(lease);

        /// Lets another thread or task cancel this wait (see [`Cancel`]): the
        /// call returns [`Error::Cancelled`] as soon as [`Cancel::cancel`] is
        /// called, holding nothing and leaving no waiting place.
        cancel_on(cancel: &Cancel) => cancel = Some(cancel.clone());

        /// The longest to wait for the lock. Defaults to unbounded for
        /// `lock_with` and to a single attempt for `try_lock_with`.
        wait(wait: Duration) => wait = Some(wait);

        /// Ask for a fencing token: the guard's [`fence`](crate::LockGuard::fence)
        /// returns a number minted inside the acquire script (same round trip),
        /// strictly greater than every token handed out before for this lock —
        /// across clients, processes and restarts of the clients. Give it to the
        /// resource you protect and let it refuse a write that carries a smaller
        /// token than one it has seen (see [`FencedStore`](crate::FencedStore)):
        /// that is what keeps a holder that was paused past its lease from doing
        /// damage, which no lease alone can. A reentrant fenced hold returns the
        /// token of the outer hold.
        ///
        /// The counter lives in `redisson_lock_token:{<key>}` (Redisson's fenced
        /// lock's key, in the lock's cluster slot) and is only created for fenced
        /// locks. Tokens never go below the server's clock in microseconds, so
        /// they keep increasing even when Redis loses the counter (a restart
        /// without persistence, a flush) — assuming the server's clock did not go
        /// back and fewer than a million fenced locks a second were taken on
        /// average.
        fenced() => fenced = true;

        /// A fair lock: waiters — threads of this and of every other client —
        /// get it in the order they asked, each woken on its own channel by the
        /// release before it (Redisson's `RedissonFairLock` layout). A waiter
        /// that gives up leaves the queue at once; one that died is dropped from
        /// it within 5 s, never holding up the others longer. Combines with
        /// [`fenced`](Self::fenced). Use either fair or plain locking on one
        /// name, not both. Of `fair`, [`read`](Self::read) and
        /// [`write`](Self::write) the last one called counts.
        fair() => kind = Kind::Fair;

        /// The read side of a read/write lock (see
        /// [`LockClient::read_lock`](crate::LockClient::read_lock)): any number
        /// of readers at once, in any process, while no one writes. Not with
        /// [`fenced`](Self::fenced).
        read() => kind = Kind::Read;

        /// The write side of a read/write lock (see
        /// [`LockClient::write_lock`](crate::LockClient::write_lock)): one
        /// writer alone, no readers. Not with [`fenced`](Self::fenced).
        write() => kind = Kind::Write;
    }

    /// Whether a fair lock was asked for.
    pub fn is_fair(&self) -> bool {
        self.kind == Kind::Fair
    }

    /// Whether the read side of a read/write lock was asked for.
    pub fn is_read(&self) -> bool {
        self.kind == Kind::Read
    }

    /// Whether the write side of a read/write lock was asked for.
    pub fn is_write(&self) -> bool {
        self.kind == Kind::Write
    }

    pub(crate) fn kind_value(&self) -> Kind {
        self.kind
    }

    /// Whether a fencing token was asked for.
    pub fn is_fenced(&self) -> bool {
        self.fenced
    }

    /// The explicit lease, if one was set.
    pub fn lease_value(&self) -> Option<Duration> {
        self.lease
    }

    /// The bounded wait, if one was set.
    pub fn wait_value(&self) -> Option<Duration> {
        self.wait
    }

    /// The cancel handle, if one was given.
    pub fn cancel_value(&self) -> Option<Cancel> {
        self.cancel.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn huge_waits_do_not_overflow() {
        let far = deadline_after(Duration::MAX);
        assert!(far > Instant::now() + Duration::from_secs(365 * 24 * 3600));
        let near = deadline_after(Duration::from_millis(5));
        assert!(near <= Instant::now() + Duration::from_millis(5));
        assert_eq!(deadline_min(None, near), near);
        assert_eq!(deadline_min(Some(near), far), near);
    }

    #[test]
    fn names_and_leases_are_checked_with_one_wording() {
        assert!(check_name("").unwrap_err().is_invalid_argument());
        assert!(check_name(&"x".repeat(MAX_NAME_BYTES + 1)).is_err());
        assert!(check_name("ok").is_ok());
        let e = check_lease("lease", Duration::ZERO).unwrap_err();
        assert!(
            e.to_string().contains("lease must be greater than zero"),
            "{e}"
        );
        assert!(check_lease("lease", MAX_LEASE + Duration::from_secs(1)).is_err());
        assert!(check_lease("lease", Duration::from_secs(1)).is_ok());
    }
}
