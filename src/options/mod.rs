//! The options of every face (`LockOptions`, `SemaphoreOptions`,
//! `RedlockOptions`, sharing one part: `Common`), the lock kinds, and the
//! input checks and deadline arithmetic every face shares (one wording,
//! one limit).

mod cancel;

use std::time::{Duration, Instant};

pub use cancel::Cancel;

use crate::error::{Error, Result};

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

impl Kind {
    /// What the counters (`meter`) call it.
    pub(crate) fn meter_kind(self) -> &'static str {
        match self {
            Kind::Plain => "plain",
            Kind::Fair => "fair",
            Kind::Read => "read",
            Kind::Write => "write",
        }
    }
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

/// Refuses a renewed lease (`what`: its name and the setting that raises
/// it) not longer than two socket timeouts: one renewal may take two (a
/// write and a read), so the lease could run out before the client learns
/// whether it was renewed.
pub(crate) fn check_renewable(what: &str, lease: Duration, socket_timeout: Duration) -> Result<()> {
    if lease <= socket_timeout.saturating_mul(2) {
        return Err(Error::invalid(format_args!(
            "the {what} ({lease:?}) must be longer than twice the socket timeout ({socket_timeout:?}): \
             one renewal may take two socket timeouts (a write and a read), so the lease could run out \
             before the client learns whether it was renewed; lower socket_timeout (a third of the lease \
             or less) or raise the {what}"
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

/// What every face's options hold: an explicit lease, a bounded wait, a
/// cancel handle — one part, with one set of setters (`common_options!`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Common {
    pub(crate) lease: Option<Duration>,
    pub(crate) wait: Option<Duration>,
    pub(crate) cancel: Option<Cancel>,
}

/// The setters and getters of [`Common`], on an options type with a
/// `common` field.
macro_rules! common_options {
    () => {
        /// An explicit lease: the hold simply expires this long after it
        /// was taken unless released first, and is not renewed (Redisson's
        /// `leaseTime`). Must be greater than zero. Without it, the
        /// watchdog lease, renewed while the guard lives.
        pub fn lease(mut self, lease: Duration) -> Self {
            self.common.lease = Some(lease);
            self
        }

        /// The longest to wait. Without it, the `_with` call waits as long
        /// as it takes and the `try_*_with` call makes one attempt. When it
        /// runs out, `try_*_with` gives `Ok(None)` and the `_with` call
        /// [`Error::WaitTimedOut`](crate::Error::WaitTimedOut) (the crate
        /// docs' one rule for a wait that runs out).
        pub fn wait(mut self, wait: Duration) -> Self {
            self.common.wait = Some(wait);
            self
        }

        /// Lets another thread or task cancel this wait (see
        /// [`Cancel`](crate::Cancel)): the call returns
        /// [`Error::Cancelled`](crate::Error::Cancelled) as soon as
        /// [`Cancel::cancel`](crate::Cancel::cancel) is called (a Redlock:
        /// once the round under way ended, within the node timeout; a try
        /// out to a Redis that does not answer: once its round trip ended,
        /// within the socket timeout), holding nothing and leaving no
        /// waiting place.
        pub fn cancel_on(mut self, cancel: &Cancel) -> Self {
            self.common.cancel = Some(cancel.clone());
            self
        }

        /// The explicit lease, if one was set.
        pub fn lease_time(&self) -> Option<Duration> {
            self.common.lease
        }

        /// The bounded wait, if one was set.
        pub fn wait_time(&self) -> Option<Duration> {
            self.common.wait
        }

        /// The cancel handle, if one was given.
        pub fn cancel_handle(&self) -> Option<&Cancel> {
            self.common.cancel.as_ref()
        }
    };
}

/// How to take a lock — [`LockClient::lock_with`](crate::LockClient::lock_with)
/// and its twins on every lock face (`AsyncLockClient`, `lock_all_with`):
/// an explicit lease, a bounded wait, a cancel handle (the part every
/// face's options share), and what only locks have — a fencing token and
/// the kind (fair, read, write).
///
/// ```
/// use std::time::Duration;
/// use leasehold::LockOptions;
///
/// let opts = LockOptions::new()
///     .lease(Duration::from_secs(10))
///     .wait(Duration::from_millis(500));
/// assert_eq!(opts.lease_time(), Some(Duration::from_secs(10)));
/// assert_eq!(opts.wait_time(), Some(Duration::from_millis(500)));
/// assert_eq!(LockOptions::new().lease_time(), None);
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[must_use = "options do nothing until passed to lock_with or try_lock_with"]
pub struct LockOptions {
    common: Common,
    fenced: bool,
    kind: Kind,
}

/// How to take permits — [`Semaphore::acquire_with`](crate::Semaphore::acquire_with)
/// and its async twin: an explicit lease, a bounded wait, a cancel handle.
/// What only locks have (fencing, fair, read, write) is not offered:
///
/// ```compile_fail
/// let _ = leasehold::SemaphoreOptions::new().fenced(); // locks only
/// ```
///
/// ```
/// use std::time::Duration;
/// let opts = leasehold::SemaphoreOptions::new().wait(Duration::from_secs(1));
/// assert_eq!(opts.wait_time(), Some(Duration::from_secs(1)));
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[must_use = "options do nothing until passed to acquire_with or try_acquire_with"]
pub struct SemaphoreOptions {
    common: Common,
}

/// How to take a Redlock — [`Redlock::lock_with`](crate::Redlock::lock_with):
/// an explicit lease (the guard's validity is what is left of it after the
/// attempt), a bounded wait, a cancel handle. No fencing token (a Redlock
/// has no single counter to mint one; see the Redlock docs) and no lock
/// kinds — not offered:
///
/// ```compile_fail
/// let _ = leasehold::RedlockOptions::new().fair(); // one server's locks only
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[must_use = "options do nothing until passed to lock_with or try_lock_with"]
pub struct RedlockOptions {
    common: Common,
}

impl LockOptions {
    /// Defaults: the client's watchdog lease, and waiting as long as it takes
    /// (`lock_with`) or one attempt (`try_lock_with`).
    pub fn new() -> Self {
        Self::default()
    }

    common_options!();

    setters! {
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

    /// Whether a fencing token was asked for.
    pub fn is_fenced(&self) -> bool {
        self.fenced
    }

    pub(crate) fn kind(&self) -> Kind {
        self.kind
    }

    pub(crate) fn common(&self) -> &Common {
        &self.common
    }
}

impl SemaphoreOptions {
    /// Defaults: the client's watchdog lease, and waiting as long as it takes
    /// (`acquire_with`) or one attempt (`try_acquire_with`).
    pub fn new() -> Self {
        Self::default()
    }

    common_options!();

    pub(crate) fn common(&self) -> &Common {
        &self.common
    }
}

impl RedlockOptions {
    /// Defaults: the Redlock's watchdog lease, and waiting as long as it
    /// takes (`lock_with`) or one attempt (`try_lock_with`).
    pub fn new() -> Self {
        Self::default()
    }

    common_options!();

    pub(crate) fn common(&self) -> &Common {
        &self.common
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
