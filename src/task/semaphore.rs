//! The async face of semaphores: [`AsyncSemaphore`] (the same acquire of
//! permits as the blocking [`Semaphore`], its waits parking the task) and
//! [`AsyncPermitGuard`] (drop gives the permits back in the background;
//! `release().await` is the checked one).

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{offload, AsyncLockClient};
use crate::client::or_timed_out;
use crate::error::Result;
use crate::guard::DropOn;
use crate::options::{deadline_after, SemaphoreOptions};
use crate::park::Park;
use crate::raw::Want;
use crate::renewal::LeaseWatch;
use crate::semaphore::{PermitGuard, Semaphore, SemaphoreInfo};

/// A [`Semaphore`] for async code: waiting parks the task, not a thread.
/// Dropping an acquire's future cancels its wait at once (its place in line
/// is left; permits granted meanwhile are given back).
///
/// ```no_run
/// # async fn call_partner() {}
/// # async fn handler(client: leasehold::AsyncLockClient) -> Result<(), leasehold::Error> {
/// let partner = client.semaphore("partner-api");
/// let permit = partner.acquire().await?; // at most N of these at a time
/// call_partner().await;
/// permit.unlock().await?;                // or drop: given back in the background
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct AsyncSemaphore {
    sem: Semaphore,
}

impl AsyncLockClient {
    /// The semaphore `name` (see [`LockClient::semaphore`](crate::LockClient::semaphore)).
    pub fn semaphore(&self, name: &str) -> AsyncSemaphore {
        AsyncSemaphore {
            sem: Semaphore::new(Arc::clone(&self.shared), name),
        }
    }
}

impl AsyncSemaphore {
    /// The semaphore's name, as given.
    pub fn name(&self) -> &str {
        self.sem.name()
    }

    /// The blocking face of this same semaphore.
    pub fn blocking(&self) -> Semaphore {
        self.sem.clone()
    }

    /// Takes one permit, waiting as long as it takes.
    ///
    /// # Errors
    /// As [`Semaphore::acquire`].
    pub fn acquire(&self) -> impl Future<Output = Result<AsyncPermitGuard>> + Send + '_ {
        self.acquire_with(1, SemaphoreOptions::new())
    }

    /// Takes `permits` permits at once, waiting as long as it takes.
    ///
    /// # Errors
    /// As [`Semaphore::acquire_many`].
    pub fn acquire_many(
        &self,
        permits: u32,
    ) -> impl Future<Output = Result<AsyncPermitGuard>> + Send + '_ {
        self.acquire_with(permits, SemaphoreOptions::new())
    }

    /// One attempt: a permit, or `None` when none is free for us now.
    ///
    /// # Errors
    /// As [`Semaphore::try_acquire`].
    pub fn try_acquire(
        &self,
    ) -> impl Future<Output = Result<Option<AsyncPermitGuard>>> + Send + '_ {
        self.try_acquire_with(1, SemaphoreOptions::new())
    }

    /// Waits up to `wait` (counted from the first poll) for one permit.
    ///
    /// # Errors
    /// As [`Semaphore::try_acquire_for`].
    pub fn try_acquire_for(
        &self,
        wait: Duration,
    ) -> impl Future<Output = Result<Option<AsyncPermitGuard>>> + Send + '_ {
        self.try_acquire_with(1, SemaphoreOptions::new().wait(wait))
    }

    /// One permit, waiting until `deadline`: `None` when it passed.
    ///
    /// # Errors
    /// As [`acquire`](Self::acquire).
    pub fn try_acquire_until(
        &self,
        deadline: Instant,
    ) -> impl Future<Output = Result<Option<AsyncPermitGuard>>> + Send + '_ {
        self.take(1, SemaphoreOptions::new(), move || Some(deadline))
    }

    /// One attempt at `permits` permits together: `None` when fewer are
    /// free.
    ///
    /// # Errors
    /// As [`acquire_many`](Self::acquire_many).
    pub fn try_acquire_many(
        &self,
        permits: u32,
    ) -> impl Future<Output = Result<Option<AsyncPermitGuard>>> + Send + '_ {
        self.try_acquire_with(permits, SemaphoreOptions::new())
    }

    /// `permits` permits together, waiting up to `wait` (counted from the
    /// first poll): `None` when the wait ran out.
    ///
    /// # Errors
    /// As [`acquire_many`](Self::acquire_many).
    pub fn try_acquire_many_for(
        &self,
        permits: u32,
        wait: Duration,
    ) -> impl Future<Output = Result<Option<AsyncPermitGuard>>> + Send + '_ {
        self.try_acquire_with(permits, SemaphoreOptions::new().wait(wait))
    }

    /// `permits` permits together, waiting until `deadline`: `None` when it
    /// passed.
    ///
    /// # Errors
    /// As [`acquire_many`](Self::acquire_many).
    pub fn try_acquire_many_until(
        &self,
        permits: u32,
        deadline: Instant,
    ) -> impl Future<Output = Result<Option<AsyncPermitGuard>>> + Send + '_ {
        self.take(permits, SemaphoreOptions::new(), move || Some(deadline))
    }

    /// Takes `permits` permits as `options` say; a bounded wait that runs
    /// out is [`Error::WaitTimedOut`](crate::Error::WaitTimedOut).
    ///
    /// # Errors
    /// As [`Semaphore::acquire_with`].
    pub fn acquire_with(
        &self,
        permits: u32,
        options: SemaphoreOptions,
    ) -> impl Future<Output = Result<AsyncPermitGuard>> + Send + '_ {
        let wait = options.wait_time();
        let take = self.take(permits, options, move || wait.map(deadline_after));
        async move { or_timed_out(take.await?, self.name(), wait) }
    }

    /// As [`acquire_with`](Self::acquire_with), but `None` when the wait
    /// runs out; without [`SemaphoreOptions::wait`] one attempt.
    ///
    /// # Errors
    /// As [`Semaphore::try_acquire_with`].
    pub fn try_acquire_with(
        &self,
        permits: u32,
        options: SemaphoreOptions,
    ) -> impl Future<Output = Result<Option<AsyncPermitGuard>>> + Send + '_ {
        let wait = options.wait_time().unwrap_or_default();
        self.take(permits, options, move || Some(deadline_after(wait)))
    }

    fn take(
        &self,
        permits: u32,
        options: SemaphoreOptions,
        until: impl FnOnce() -> Option<Instant> + Send + 'static,
    ) -> impl Future<Output = Result<Option<AsyncPermitGuard>>> + Send + '_ {
        let want = Want::of_permits(&options, Park::Task);
        async move {
            let got = self.sem.take_as(permits, want, until(), DropOn::Task);
            Ok(got.await?.map(|guard| AsyncPermitGuard { guard }))
        }
    }

    /// [`Semaphore::try_set_permits`] for a task, errors included.
    pub async fn try_set_permits(&self, permits: u32) -> Result<bool> {
        offload(self.sem.shared(), &self.sem, move |s| {
            s.try_set_permits(permits)
        })
        .await
    }

    /// [`Semaphore::set_permits`] for a task, errors included.
    pub async fn set_permits(&self, permits: u32) -> Result<()> {
        offload(self.sem.shared(), &self.sem, move |s| {
            s.set_permits(permits)
        })
        .await
    }

    /// [`Semaphore::add_permits`] for a task, errors included.
    pub async fn add_permits(&self, permits: u32) -> Result<()> {
        offload(self.sem.shared(), &self.sem, move |s| {
            s.add_permits(permits)
        })
        .await
    }

    /// [`Semaphore::reduce_permits`] for a task, errors included.
    pub async fn reduce_permits(&self, permits: u32) -> Result<()> {
        offload(self.sem.shared(), &self.sem, move |s| {
            s.reduce_permits(permits)
        })
        .await
    }

    /// [`Semaphore::available_permits`] for a task, errors included.
    pub async fn available_permits(&self) -> Result<u32> {
        offload(self.sem.shared(), &self.sem, Semaphore::available_permits).await
    }

    /// [`Semaphore::inspect`] for a task, errors included.
    pub async fn inspect(&self) -> Result<SemaphoreInfo> {
        offload(self.sem.shared(), &self.sem, Semaphore::inspect).await
    }
}

/// Permits taken by an async task; dropping the guard gives them back in
/// the background (never blocking the task). `Send` and `Sync`.
#[must_use = "if unused the permits are given back at once"]
#[clippy::has_significant_drop]
#[derive(Debug)]
pub struct AsyncPermitGuard {
    /// Made to release in the background (`DropOn::Task`).
    guard: PermitGuard,
}

impl AsyncPermitGuard {
    /// The semaphore's name, as given.
    pub fn name(&self) -> &str {
        self.guard.name()
    }

    /// The Redis key of the semaphore's counter (as [`PermitGuard::key`]).
    pub fn key(&self) -> &str {
        self.guard.key()
    }

    /// Until when the permits are known to be ours (the last acquire or
    /// renewal sent, plus the lease); `None` once they are not.
    pub fn valid_until(&self) -> Option<Instant> {
        self.guard.valid_until()
    }

    /// How long the permits are known to stay ours from now (zero once
    /// they are not).
    pub fn remaining(&self) -> Duration {
        self.guard.remaining()
    }

    /// The lease the permits were taken with.
    pub fn lease(&self) -> Duration {
        self.guard.lease()
    }

    /// How many permits this guard holds.
    pub fn permits(&self) -> u32 {
        self.guard.permits()
    }

    /// The permits' ids as Redisson shows them.
    pub fn ids(&self) -> Vec<String> {
        self.guard.ids()
    }

    /// Whether the permits are still ours as far as this client knows.
    pub fn is_held(&self) -> bool {
        self.guard.is_held()
    }

    /// The lease-lost signal of the permits (see [`LeaseWatch`]; a task
    /// awaits it): lost when the renewal thread finds
    /// them taken back.
    pub fn lost(&self) -> LeaseWatch {
        self.guard.held.lost()
    }

    /// Gives the permits back, checking that they were still ours, the way
    /// [`AsyncLockGuard::unlock`](crate::AsyncLockGuard::unlock) releases a
    /// lock (dropped before it completes: the permits come back all the
    /// same, by id).
    ///
    /// # Errors
    /// As [`PermitGuard::unlock`].
    pub async fn unlock(self) -> Result<()> {
        self.guard.held.release(Park::Task).await
    }
}
