//! `AsyncLockGuard`: the hold of an async acquisition — an owned guard
//! (`Send`, not reentrant) whose drop hands the release to an I/O thread
//! (never blocking the task) and whose `unlock().await` is the checked one.

use std::time::{Duration, Instant};

use crate::error::Result;
use crate::guard::OwnedLockGuard;
use crate::park::Park;
use crate::renewal::LeaseWatch;

/// One hold of a distributed lock taken by an async task; dropping it
/// releases the hold in the background.
///
/// Owned by the guard, not by a task or a thread: `Send` and `Sync`, so it
/// can be held across `.await` in a task that moves between threads, kept
/// in a struct or handed to another task. Not reentrant: each acquisition
/// has an owner of its own, so a task that asks for a name it holds waits
/// for itself (see the README's *Async* section).
///
/// Dropping it never blocks: the owner-checked release runs on one of the
/// library's I/O threads, and a failure is logged through `tracing`.
/// [`unlock`](Self::unlock)`.await` is the checked release.
#[must_use = "if unused the lock is released at once"]
#[clippy::has_significant_drop]
#[derive(Debug)]
pub struct AsyncLockGuard {
    /// Made to release in the background (`DropOn::Task`).
    pub(crate) guard: OwnedLockGuard,
}

impl AsyncLockGuard {
    /// The fencing token of this hold, when taken with
    /// [`LockOptions::fenced`](crate::LockOptions::fenced).
    pub fn fence(&self) -> Option<u64> {
        self.guard.fence()
    }

    /// Whether the lock is still ours as far as this client knows (see
    /// [`LockGuard::is_held`](crate::LockGuard::is_held)). Never touches
    /// the network.
    pub fn is_held(&self) -> bool {
        self.guard.is_held()
    }

    /// Until when the lease is known to be ours; `None` once it is not.
    pub fn valid_until(&self) -> Option<Instant> {
        self.guard.valid_until()
    }

    /// How long the lease is known to last from now; zero once not held.
    pub fn remaining(&self) -> Duration {
        self.guard.remaining()
    }

    /// The lock name as given.
    pub fn name(&self) -> &str {
        self.guard.name()
    }

    /// The Redis key of the lock.
    pub fn key(&self) -> &str {
        self.guard.key()
    }

    /// The lease this hold was taken with.
    pub fn lease(&self) -> Duration {
        self.guard.lease()
    }

    /// The lease-lost signal of this hold (see [`LeaseWatch`]): a task
    /// awaits it — why, once the watchdog finds the lease
    /// lost, or `None` once the guard released the lock first; a future
    /// that borrows nothing (`'static`, `Send`), for a `select!` beside the
    /// work. An explicit lease is not watched (see
    /// [`is_held`](Self::is_held)).
    ///
    /// ```no_run
    /// # async fn work() {}
    /// # async fn run(client: leasehold::AsyncLockClient) -> Result<(), leasehold::Error> {
    /// let guard = client.lock("rotate:keys").await?;
    /// let lost = guard.lost().until_lost();
    /// # let select = |a, b| async { let _ = (a, b); };
    /// // e.g. tokio::select! { why = lost => ..., () = work() => ... }
    /// select(lost, work()).await;
    /// guard.unlock().await
    /// # }
    /// ```
    pub fn lost(&self) -> LeaseWatch {
        self.guard.held.lost()
    }

    /// Releases this hold, checking that it was still ours; the round trip
    /// runs on an I/O thread — or, with the `tokio` feature, on the task's
    /// own tokio runtime (every lock kind, for a client of one server).
    /// Dropped before it completes (a `select!`, a timeout), the future
    /// leaves the release to the background: the hold is given back all the
    /// same, owner-checked, once Redis answers.
    ///
    /// # Errors
    /// As [`LockGuard::unlock`](crate::LockGuard::unlock).
    pub async fn unlock(self) -> Result<()> {
        self.guard.held.release(Park::Task).await
    }
}
