//! The async face: [`AsyncLockClient`] — the same client (id, line of
//! waiters, renewal thread, subscriber, in-process queue) as the blocking
//! [`LockClient`] it is made from, its waits parking tasks instead of
//! threads (`park::Park::Task`) — and its guard ([`AsyncLockGuard`]);
//! `semaphore`: [`AsyncSemaphore`] and [`AsyncPermitGuard`].
//! Thin: the acquire path is the blocking face's own (`acquire`).

mod guard;
mod multi;
mod semaphore;

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub use guard::AsyncLockGuard;
pub use multi::AsyncMultiLockGuard;
pub use semaphore::{AsyncPermitGuard, AsyncSemaphore};

use crate::acquire::acquire_hold;
use crate::client::{or_timed_out, LockClient};
use crate::error::Result;
use crate::guard::{DropOn, LockGuard};
use crate::inspect::LockInfo;
use crate::options::{deadline_after, LockOptions};
use crate::park::Park;
use crate::raw::Want;
use crate::shared::Shared;
use crate::stats::Stats;

/// A lock client for async code: waiting parks the task, not a thread.
///
/// Made from a [`LockClient`] ([`LockClient::to_async`]) or a URL
/// ([`AsyncLockClient::new`]); cheap to clone, and the same client as the
/// blocking one it was made from — a blocking thread and an async task of
/// it wait in the same line and hand the lock over to each other.
///
/// Runtime-agnostic: no executor is needed or started. A waiting task is
/// woken by the same unlock message, grant or timer that wakes a blocking
/// waiter (the timer is one thread for the process); Redis round trips run
/// on a few I/O threads of the client (4, more only while all are stuck on
/// a server that does not answer; they end with the client), never
/// blocking the executor's threads — or, with the `tokio` feature, a task's round trips
/// to a client of one server run on its own tokio runtime (a connection of
/// that runtime's, read on its reactor: no hop to another thread or task;
/// the runtime needs its I/O driver). Dropping a future cancels its wait at
/// once: its place in line is left, and a lock Redis granted it meanwhile
/// is released. [The crate docs](crate) show it in use.
///
/// Its guards ([`AsyncLockGuard`], [`AsyncMultiLockGuard`],
/// [`AsyncPermitGuard`]) are `Send` and, dropped, released in the
/// background. Don't call the blocking [`LockClient`] from an `async fn`.
#[derive(Clone)]
pub struct AsyncLockClient {
    shared: Arc<Shared>,
}

impl LockClient {
    /// The async face of this client: the same client (id, waiters' line,
    /// renewal, subscriber), for tasks.
    pub fn to_async(&self) -> AsyncLockClient {
        AsyncLockClient {
            shared: Arc::clone(self.shared()),
        }
    }
}

impl AsyncLockClient {
    /// A client for the Redis at `url` with the default settings (see
    /// [`LockClient::new`]; [`builder`](Self::builder) for the others, and
    /// [`connect`](Self::connect) to check at start-up that Redis answers).
    /// Connects lazily.
    ///
    /// # Errors
    /// As [`LockClient::new`].
    pub fn new(url: &str) -> Result<Self> {
        LockClient::new(url).map(|c| c.to_async())
    }

    /// [`LockClient::close`] for a task, parking it (at most the socket
    /// timeout) where the last handle's drop would block its thread:
    /// `close().await` at the end of `main` or of a service's shutdown sees
    /// the background work through (a dropped guard's release, say):
    ///
    /// ```no_run
    /// #[tokio::main]
    /// async fn main() -> leasehold::Result<()> {
    ///     let client = leasehold::AsyncLockClient::new("redis://127.0.0.1/")?;
    ///     {
    ///         let _guard = client.lock("report").await?;
    ///         // … the work; the guard is dropped here, its release sent
    ///         // in the background …
    ///     }
    ///     client.close().await; // … and seen through before main ends
    ///     Ok(())
    /// }
    /// ```
    pub async fn close(self) -> bool {
        let raw = Arc::clone(self.shared.raw());
        raw.flush(Park::Task, raw.socket_timeout()).await
    }

    /// The blocking face of this same client.
    pub fn blocking(&self) -> LockClient {
        LockClient::of(&self.shared)
    }

    // The acquiring methods return their future (no `async fn` layers
    // around the one acquire): a waiting task's future stays small.

    /// Takes the lock `name`, waiting as long as it takes; the lease is
    /// renewed while the guard lives. Dropping the future cancels the wait.
    ///
    /// # Errors
    /// As [`LockClient::lock`].
    pub fn lock<'a>(
        &'a self,
        name: &'a str,
    ) -> impl Future<Output = Result<AsyncLockGuard>> + Send + 'a {
        self.lock_with(name, LockOptions::new())
    }

    /// One attempt: the guard, or `None` when the lock is held elsewhere.
    ///
    /// # Errors
    /// As [`LockClient::try_lock`].
    pub fn try_lock<'a>(
        &'a self,
        name: &'a str,
    ) -> impl Future<Output = Result<Option<AsyncLockGuard>>> + Send + 'a {
        self.try_lock_with(name, LockOptions::new())
    }

    /// Waits up to `wait` (counted from the first poll): the guard, or
    /// `None` when the wait ran out.
    ///
    /// # Errors
    /// As [`LockClient::try_lock_for`].
    pub fn try_lock_for<'a>(
        &'a self,
        name: &'a str,
        wait: Duration,
    ) -> impl Future<Output = Result<Option<AsyncLockGuard>>> + Send + 'a {
        self.try_lock_with(name, LockOptions::new().wait(wait))
    }

    /// Waits until `deadline`: the guard, or `None` when it passed.
    ///
    /// # Errors
    /// As [`LockClient::try_lock_until`].
    pub fn try_lock_until<'a>(
        &'a self,
        name: &'a str,
        deadline: Instant,
    ) -> impl Future<Output = Result<Option<AsyncLockGuard>>> + Send + 'a {
        self.take(name, &LockOptions::new(), move || Some(deadline), Ok)
    }

    /// Takes the lock as `options` say (kind, lease, fencing, a bounded
    /// wait counted from the first poll, a cancel handle); a bounded wait
    /// that runs out is [`Error::WaitTimedOut`](crate::Error::WaitTimedOut),
    /// as for [`LockClient::lock_with`].
    ///
    /// # Errors
    /// As [`LockClient::lock_with`].
    pub fn lock_with<'a>(
        &'a self,
        name: &'a str,
        options: LockOptions,
    ) -> impl Future<Output = Result<AsyncLockGuard>> + Send + 'a {
        let waited = options.wait_time();
        self.take(
            name,
            &options,
            move || waited.map(deadline_after),
            move |got| or_timed_out(got, name, waited),
        )
    }

    /// As [`lock_with`](Self::lock_with), but `None` when the wait runs
    /// out; without [`LockOptions::wait`] one attempt.
    ///
    /// # Errors
    /// As [`LockClient::try_lock_with`].
    pub fn try_lock_with<'a>(
        &'a self,
        name: &'a str,
        options: LockOptions,
    ) -> impl Future<Output = Result<Option<AsyncLockGuard>>> + Send + 'a {
        let wait = options.wait_time().unwrap_or_default();
        self.take(name, &options, move || Some(deadline_after(wait)), Ok)
    }

    /// Who holds and who waits for the lock `name`:
    /// [`LockClient::inspect`] for a task, errors included.
    pub async fn inspect(&self, name: &str) -> Result<LockInfo> {
        let name = name.to_owned();
        offload(&self.shared, &self.blocking(), move |c| c.inspect(&name)).await
    }

    /// The locks whose names match `pattern` (Redis's glob), at most
    /// `limit`: [`LockClient::list`] for a task, errors included.
    pub async fn list(&self, pattern: &str, limit: usize) -> Result<Vec<LockInfo>> {
        let pattern = pattern.to_owned();
        offload(&self.shared, &self.blocking(), move |c| {
            c.list(&pattern, limit)
        })
        .await
    }

    /// Whether the lock `name` is held by anyone:
    /// [`LockClient::is_locked`] for a task, errors included.
    pub async fn is_locked(&self, name: &str) -> Result<bool> {
        let name = name.to_owned();
        offload(&self.shared, &self.blocking(), move |c| c.is_locked(&name)).await
    }

    /// Deletes the lock `name` whoever holds it, for operators:
    /// [`LockClient::force_unlock`] for a task, errors included.
    pub async fn force_unlock(&self, name: &str) -> Result<bool> {
        let name = name.to_owned();
        offload(&self.shared, &self.blocking(), move |c| {
            c.force_unlock(&name)
        })
        .await
    }

    /// Checks that Redis answers: [`LockClient::ping`] for a task, errors
    /// included.
    pub async fn ping(&self) -> Result<Duration> {
        offload(&self.shared, &self.blocking(), LockClient::ping).await
    }

    /// This client's counters (shared with its blocking face).
    pub fn stats(&self) -> Stats {
        self.shared.stats()
    }

    /// The one acquire of this face: the lock as `options` say, for an
    /// owner of its own, waiting until the deadline `until` gives at the
    /// first poll (`None`: as long as it takes); `finish` says what the
    /// outcome is to the caller (in the one future: no second one around it).
    pub(crate) fn take<'a, T>(
        &'a self,
        name: &'a str,
        options: &LockOptions,
        until: impl FnOnce() -> Option<Instant> + Send + 'a,
        finish: impl FnOnce(Option<AsyncLockGuard>) -> Result<T> + Send + 'a,
    ) -> impl Future<Output = Result<T>> + Send + 'a {
        let want = Want::of(options, true, Park::Task);
        let shared = &self.shared;
        async move {
            let hold = acquire_hold(shared, name, want, until()).await?;
            finish(hold.map(|hold| AsyncLockGuard {
                guard: LockGuard::with(Arc::clone(shared.raw()), hold, DropOn::Task),
            }))
        }
    }
}

/// Runs `call` of a blocking `face` (a client, a semaphore) of `shared`'s
/// client on one of its I/O threads.
async fn offload<F: Clone + Send + 'static, T: Send + 'static>(
    shared: &Shared,
    face: &F,
    call: impl FnOnce(&F) -> Result<T> + Send + 'static,
) -> Result<T> {
    let face = face.clone();
    shared.raw().io(Park::Task, move || call(&face)).await?
}

impl fmt::Debug for AsyncLockClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("AsyncLockClient")
            .field(&self.blocking())
            .finish()
    }
}
