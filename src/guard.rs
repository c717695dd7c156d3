//! `LockGuard`: the RAII handle of one hold. It keeps the hold and hands it
//! back through the shared client state's release (`Shared::release`).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::Receiver;

use crate::error::Result;
use crate::renewal::LeaseLost;
use crate::shared::{Hold, Shared};
/// One hold of a distributed lock; dropping it releases the hold.
///
/// Holds an `Arc` to the client's internals, so it has no lifetime and can be
/// moved into threads and structs, and dropped on another thread than the one
/// that took it (it remembers its owner).
///
/// [`unlock`](Self::unlock) is the checked release; `Drop` does the same
/// best-effort — it never panics, logs a failure through `tracing`, and is
/// bounded by the client's socket timeout when Redis is unreachable.
///
/// ```no_run
/// # fn main() -> Result<(), leasehold::Error> {
/// let client = leasehold::LockClient::new("redis://127.0.0.1/")?;
/// let outer = client.lock("ledger")?;
/// let inner = client.lock("ledger")?; // same thread: re-enters at once
/// assert_eq!(inner.name(), "ledger");
/// drop(outer);                         // still held through `inner`
/// inner.unlock()?;                     // now free
/// # Ok(()) }
/// ```
#[must_use = "if unused the lock is released at once"]
#[clippy::has_significant_drop]
pub struct LockGuard {
    shared: Arc<Shared>,
    hold: Hold,
    /// Set by `unlock(self)` so that `Drop` does nothing more.
    released: bool,
}

impl LockGuard {
    pub(crate) fn new(shared: Arc<Shared>, hold: Hold) -> Self {
        LockGuard {
            shared,
            hold,
            released: false,
        }
    }

    /// The fencing token of this hold, when it was taken with
    /// [`LockOptions::fenced`](crate::LockOptions::fenced); `None` for a
    /// plain lock. Pass it with every write to the protected resource.
    pub fn fence(&self) -> Option<u64> {
        self.hold.fence
    }

    /// Whether the lock is still ours, as far as this client knows: false once
    /// renewal found the lease gone or could not renew it before it ran out,
    /// and false once an explicit lease has run out. Never touches the network.
    ///
    /// For a watchdog lease this turns false within one renewal period (a
    /// third of the lease) of the loss.
    pub fn is_held(&self) -> bool {
        self.hold.state.is_held()
    }

    /// A channel that receives one [`LeaseLost`] when the watchdog finds this
    /// lease lost — so a long job can stop without polling, e.g. in a
    /// `crossbeam_channel::select!` beside its work. Guards of one reentrant
    /// hold share the channel (one message in all). Explicit leases are not
    /// watched: they simply expire (see [`is_held`](Self::is_held)).
    ///
    /// ```no_run
    /// # fn main() -> Result<(), leasehold::Error> {
    /// let client = leasehold::LockClient::new("redis://127.0.0.1/")?;
    /// let guard = client.lock("rotate:keys")?;
    /// let lost = guard.lost();
    /// for step in 0..1_000 {
    ///     if let Ok(why) = lost.try_recv() {
    ///         eprintln!("stopping at step {step}: lock lost ({why})");
    ///         break;
    ///     }
    ///     // … one step of work …
    /// }
    /// # Ok(()) }
    /// ```
    pub fn lost(&self) -> Receiver<LeaseLost> {
        self.hold.state.lost_receiver()
    }

    /// The lock name as given to `lock`.
    pub fn name(&self) -> &str {
        &self.hold.name
    }

    /// The Redis key of the lock: the client's key prefix followed by the name.
    pub fn key(&self) -> &str {
        &self.hold.key
    }

    /// The lease this hold was taken with.
    pub fn lease(&self) -> Duration {
        self.hold.lease
    }

    /// Releases this hold, checking that it was still ours.
    ///
    /// If other guards of the same owner (reentrant holds) remain, the lock
    /// stays held and keeps its lease; otherwise it is freed and waiters are
    /// woken.
    ///
    /// # Errors
    /// [`Error::NotHeld`](crate::Error::NotHeld) when the lock was no longer ours (the lease ran
    /// out, the key was removed): nothing was changed in Redis. Connection
    /// errors when Redis could not be reached; the lock then expires with its
    /// lease.
    pub fn unlock(mut self) -> Result<()> {
        self.released = true;
        self.shared.release(&self.hold, None)
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        self.released = true;
        // Wait for a pooled connection no longer than one reply may take.
        let pool_wait = Some(self.shared.socket_timeout);
        if let Err(e) = self.shared.release(&self.hold, pool_wait) {
            tracing::warn!(lock = %self.hold.name, error = ?e, "leasehold: releasing a lock on drop failed");
        }
    }
}

impl fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Only the thread part of the owner: the client id is not printed.
        let field = &self.hold.field;
        let owner = field.strip_suffix(":write").unwrap_or(field);
        let thread = owner.rsplit(':').next().unwrap_or("");
        f.debug_struct("LockGuard")
            .field("name", &self.hold.name)
            .field("key", &self.hold.key)
            .field("lease", &self.hold.lease)
            .field("thread", &thread)
            .field("kind", &self.hold.kind)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_send_sync<T: Send + Sync + 'static>() {}

    #[test]
    fn guard_is_send_sync_static() {
        assert_send_sync::<LockGuard>();
    }
}
