//! Per-lock options.

use std::time::Duration;

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

    /// The explicit lease, if one was set.
    pub fn lease_value(&self) -> Option<Duration> {
        self.lease
    }

    /// The bounded wait, if one was set.
    pub fn wait_value(&self) -> Option<Duration> {
        self.wait
    }
}
