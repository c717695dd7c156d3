//! Per-lock options.

use std::time::Duration;

use crate::guard::Kind;

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
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[must_use = "options do nothing until passed to lock_with or try_lock_with"]
pub struct LockOptions {
    lease: Option<Duration>,
    wait: Option<Duration>,
    fenced: bool,
    kind: Kind,
}

impl LockOptions {
    /// Defaults: the client's watchdog lease, and waiting as long as it takes
    /// (`lock_with`) or one attempt (`try_lock_with`).
    pub fn new() -> Self {
        Self::default()
    }

    /// An explicit lease: the lock simply expires this long after it was
    /// taken unless unlocked first (Redisson's `lock(leaseTime)`). Must be
    /// greater than zero. Defaults to the client's watchdog lease.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = Some(lease);
        self
    }

    /// The longest to wait for the lock. Defaults to unbounded for
    /// `lock_with` and to a single attempt for `try_lock_with`.
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = Some(wait);
        self
    }

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
    pub fn fenced(mut self) -> Self {
        self.fenced = true;
        self
    }

    /// A fair lock: waiters — threads of this and of every other client —
    /// get it in the order they asked, each woken on its own channel by the
    /// release before it (Redisson's `RedissonFairLock` layout). A waiter
    /// that gives up leaves the queue at once; one that died is dropped from
    /// it within 5 s, never holding up the others longer. Combines with
    /// [`fenced`](Self::fenced). Use either fair or plain locking on one
    /// name, not both. Of `fair`, [`read`](Self::read) and
    /// [`write`](Self::write) the last one called counts.
    pub fn fair(mut self) -> Self {
        self.kind = Kind::Fair;
        self
    }

    /// The read side of a read/write lock (see
    /// [`LockClient::read_lock`](crate::LockClient::read_lock)): any number
    /// of readers at once, in any process, while no one writes. Not with
    /// [`fenced`](Self::fenced).
    pub fn read(mut self) -> Self {
        self.kind = Kind::Read;
        self
    }

    /// The write side of a read/write lock (see
    /// [`LockClient::write_lock`](crate::LockClient::write_lock)): one
    /// writer alone, no readers. Not with [`fenced`](Self::fenced).
    pub fn write(mut self) -> Self {
        self.kind = Kind::Write;
        self
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
}
