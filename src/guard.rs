//! `LockGuard`: the RAII handle of one hold.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;

use crate::client::Inner;
use crate::error::{Error, Result};
use crate::local::Outcome;
use crate::raw::Release;
use crate::renewal::{LeaseLost, LeaseState};

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
    client: Arc<Inner>,
    name: String,
    key: String,
    pub(crate) owner: String,
    lease: Duration,
    /// Shared with the renewal thread and with reentrant guards of one owner.
    state: Arc<LeaseState>,
    /// Whether the watchdog renews this lease (no explicit lease given).
    renewed: bool,
    /// Set by `unlock(self)` so that `Drop` does nothing more.
    released: bool,
    /// The fencing token of a fenced hold.
    fence: Option<u64>,
    /// Which lock this is a hold of (which release script it needs).
    kind: Kind,
}

/// The lock a guard holds.
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

impl LockGuard {
    pub(crate) fn new(
        client: Arc<Inner>,
        name: String,
        key: String,
        owner: String,
        lease: Duration,
        state: Arc<LeaseState>,
        renewed: bool,
    ) -> Self {
        LockGuard {
            client,
            name,
            key,
            owner,
            lease,
            state,
            renewed,
            released: false,
            fence: None,
            kind: Kind::Plain,
        }
    }

    pub(crate) fn kind(mut self, kind: Kind) -> Self {
        self.kind = kind;
        self
    }

    pub(crate) fn with_fence(mut self, fence: Option<u64>) -> Self {
        self.fence = fence;
        self
    }

    /// The fencing token of this hold, when it was taken with
    /// [`LockOptions::fenced`](crate::LockOptions::fenced); `None` for a
    /// plain lock. Pass it with every write to the protected resource.
    pub fn fence(&self) -> Option<u64> {
        self.fence
    }

    /// Whether the lock is still ours, as far as this client knows: false once
    /// renewal found the lease gone or could not renew it before it ran out,
    /// and false once an explicit lease has run out. Never touches the network.
    ///
    /// For a watchdog lease this turns false within one renewal period (a
    /// third of the lease) of the loss.
    pub fn is_held(&self) -> bool {
        self.state.is_held()
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
        self.state.lost_receiver()
    }

    /// The lock name as given to `lock`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The Redis key of the lock: the client's key prefix followed by the name.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The lease this hold was taken with.
    pub fn lease(&self) -> Duration {
        self.lease
    }

    /// Releases this hold, checking that it was still ours.
    ///
    /// If other guards of the same owner (reentrant holds) remain, the lock
    /// stays held and keeps its lease; otherwise it is freed and waiters are
    /// woken.
    ///
    /// # Errors
    /// [`Error::NotHeld`] when the lock was no longer ours (the lease ran
    /// out, the key was removed): nothing was changed in Redis. Connection
    /// errors when Redis could not be reached; the lock then expires with its
    /// lease.
    pub fn unlock(mut self) -> Result<()> {
        self.released = true;
        self.release(None)
    }

    fn release(&self, pool_wait: Option<Duration>) -> Result<()> {
        if self.renewed {
            // Stops renewal (when this is the last hold) before the release.
            self.client
                .renewer
                .release(&self.key, &self.owner, &self.state);
        }
        if self.kind != Kind::Plain {
            if self.fence.is_some() {
                self.client.fair_fence_release(&self.key, &self.owner);
            }
            if self.state.is_lost() {
                return Err(Error::NotHeld {
                    name: self.name.clone(),
                });
            }
            let released = match self.kind {
                Kind::Read | Kind::Write => {
                    self.client
                        .release_rw(&self.key, &self.owner, self.kind, pool_wait)?
                }
                _ => self
                    .client
                    .release_fair(&self.key, &self.owner, self.lease, pool_wait)?,
            };
            return match released {
                Some(_) => Ok(()),
                None => Err(Error::NotHeld {
                    name: self.name.clone(),
                }),
            };
        }
        // A thread of this client queued for the lock may get it directly.
        let handover = self.client.local.release(&self.key, &self.owner);
        if self.state.is_lost() {
            // Someone else may hold it now: send nothing at all (dropping the
            // handover lets the next local thread try Redis itself).
            return Err(Error::NotHeld {
                name: self.name.clone(),
            });
        }
        let sent_at = Instant::now();
        let released = self.client.release(
            &self.key,
            &self.owner,
            self.lease,
            pool_wait,
            handover.last(),
            // With replica acknowledgement every acquire is its own script
            // and WAIT: no handoff inside the release script.
            handover
                .successor()
                .filter(|_| self.client.replicas.is_none()),
        )?;
        match released {
            Release::HandedOver { fence } => {
                handover.finish(Outcome::HandedOver(sent_at, fence));
                Ok(())
            }
            Release::FreedForOthers => {
                handover.finish(Outcome::FreedForOthers);
                Ok(())
            }
            Release::Freed | Release::StillHeld => {
                handover.finish(Outcome::Other);
                Ok(())
            }
            Release::NotHeld => {
                handover.finish(Outcome::Other);
                Err(Error::NotHeld {
                    name: self.name.clone(),
                })
            }
        }
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        self.released = true;
        // Wait for a pooled connection no longer than one reply may take.
        if let Err(e) = self.release(Some(self.client.socket_timeout())) {
            tracing::warn!(lock = %self.name, error = %e, "leasehold: releasing a lock on drop failed");
        }
    }
}

impl fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Only the thread part of the owner: the client id is not printed.
        let owner = self.owner.strip_suffix(":write").unwrap_or(&self.owner);
        let thread = owner.rsplit(':').next().unwrap_or("");
        f.debug_struct("LockGuard")
            .field("name", &self.name)
            .field("key", &self.key)
            .field("lease", &self.lease)
            .field("thread", &thread)
            .field("kind", &self.kind)
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
