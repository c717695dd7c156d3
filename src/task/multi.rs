//! `AsyncLockClient::lock_all`: several names at once for a task, in the
//! one canonical order of `multi` (every one or none; one deadline for all);
//! dropping the future mid-way gives back the names already taken.

use std::fmt;
use std::time::{Duration, Instant};

use super::{AsyncLockClient, AsyncLockGuard};
use crate::error::Result;
use crate::multi::{canonical, complete, timed_out, Set};
use crate::options::{deadline_after, LockOptions};
use crate::renewal::LeaseWatch;

/// The holds of several names taken together by a task
/// ([`AsyncLockClient::lock_all`]); dropping it releases every one in the
/// background.
#[must_use = "if unused the locks are released at once"]
#[clippy::has_significant_drop]
pub struct AsyncMultiLockGuard {
    guards: Vec<AsyncLockGuard>,
    /// The lost signal of every hold, made at the first `lost()`.
    watch: std::sync::OnceLock<LeaseWatch>,
}

impl AsyncMultiLockGuard {
    /// The names held, in the order they were taken (sorted).
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.guards.iter().map(AsyncLockGuard::name)
    }

    /// The Redis key of each name, in the same order.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.guards.iter().map(AsyncLockGuard::key)
    }

    /// Until when every lease is known to be ours: the earliest of the
    /// holds' [`valid_until`](AsyncLockGuard::valid_until); `None` once one is not
    /// held.
    pub fn valid_until(&self) -> Option<Instant> {
        let ends = self.guards.iter().map(AsyncLockGuard::valid_until);
        ends.min().flatten().filter(|_| self.is_held())
    }

    /// How long every lease is known to last from now (see
    /// [`valid_until`](Self::valid_until)); zero once one is not held.
    pub fn remaining(&self) -> Duration {
        crate::options::left_until(self.valid_until())
    }

    /// The guard of each name, in the order they were taken.
    pub fn guards(&self) -> &[AsyncLockGuard] {
        &self.guards
    }

    /// The lease-lost signal of every hold (see [`LeaseWatch`]; a task
    /// awaits it): lost when any of them is.
    pub fn lost(&self) -> LeaseWatch {
        let all = || LeaseWatch::all(self.guards.iter().map(AsyncLockGuard::lost));
        self.watch.get_or_init(all).clone()
    }

    /// Whether every lease is still ours, as far as this client knows.
    pub fn is_held(&self) -> bool {
        self.guards.iter().all(AsyncLockGuard::is_held)
    }

    /// Releases every hold (in the reverse order), checking each.
    ///
    /// # Errors
    /// The first error of a release; the others are released all the same.
    pub async fn unlock(mut self) -> Result<()> {
        let mut first = Ok(());
        while let Some(guard) = self.guards.pop() {
            first = first.and(guard.unlock().await);
        }
        first
    }
}

impl fmt::Debug for AsyncMultiLockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AsyncMultiLockGuard")
            .field("names", &self.names().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl AsyncLockClient {
    /// Takes every lock in `names` or none, in one order whatever order
    /// they are given in (see [`LockClient::lock_all`](crate::LockClient::lock_all)).
    ///
    /// # Errors
    /// As [`LockClient::lock_all`](crate::LockClient::lock_all).
    pub async fn lock_all<S: AsRef<str>>(&self, names: &[S]) -> Result<AsyncMultiLockGuard> {
        self.lock_all_with(names, LockOptions::new()).await
    }

    /// [`lock_all`](Self::lock_all) waiting at most `wait` for all of them:
    /// `None` when it ran out, and then none of them is held.
    ///
    /// # Errors
    /// As [`lock_all`](Self::lock_all).
    pub async fn try_lock_all_for<S: AsRef<str>>(
        &self,
        names: &[S],
        wait: Duration,
    ) -> Result<Option<AsyncMultiLockGuard>> {
        self.take_all(names, LockOptions::new(), Some(deadline_after(wait)))
            .await
    }

    /// One attempt at every name: `None` when one of them is held
    /// elsewhere — those it took are then given back (in the background, as
    /// a dropped [`AsyncLockGuard`]'s).
    ///
    /// # Errors
    /// As [`lock_all`](Self::lock_all).
    pub async fn try_lock_all<S: AsRef<str>>(
        &self,
        names: &[S],
    ) -> Result<Option<AsyncMultiLockGuard>> {
        self.take_all(names, LockOptions::new(), Some(Instant::now()))
            .await
    }

    /// [`lock_all`](Self::lock_all) waiting until `deadline` for all of
    /// them: `None` when it passed — those it took are then given back (in
    /// the background).
    ///
    /// # Errors
    /// As [`lock_all`](Self::lock_all).
    pub async fn try_lock_all_until<S: AsRef<str>>(
        &self,
        names: &[S],
        deadline: Instant,
    ) -> Result<Option<AsyncMultiLockGuard>> {
        self.take_all(names, LockOptions::new(), Some(deadline))
            .await
    }

    /// [`lock_all_with`](Self::lock_all_with), but `None` when the wait
    /// runs out; without [`LockOptions::wait`] one attempt at every name.
    ///
    /// # Errors
    /// As [`lock_all_with`](Self::lock_all_with).
    pub async fn try_lock_all_with<S: AsRef<str>>(
        &self,
        names: &[S],
        options: LockOptions,
    ) -> Result<Option<AsyncMultiLockGuard>> {
        let wait = options.wait_time().unwrap_or_default();
        self.take_all(names, options, Some(deadline_after(wait)))
            .await
    }

    /// [`lock_all`](Self::lock_all) with options for every name (a bounded
    /// wait for all together: running out is [`Error::WaitTimedOut`](crate::Error::WaitTimedOut)).
    ///
    /// # Errors
    /// As [`LockClient::lock_all_with`](crate::LockClient::lock_all_with).
    pub async fn lock_all_with<S: AsRef<str>>(
        &self,
        names: &[S],
        options: LockOptions,
    ) -> Result<AsyncMultiLockGuard> {
        let waited = options.wait_time();
        self.take_all(names, options, waited.map(deadline_after))
            .await?
            .ok_or_else(|| timed_out(names, waited))
    }

    async fn take_all<S: AsRef<str>>(
        &self,
        names: &[S],
        options: LockOptions,
        deadline: Option<Instant>,
    ) -> Result<Option<AsyncMultiLockGuard>> {
        let names = canonical(names)?;
        // As the blocking face's: a hold that ran out meanwhile is never
        // returned; everything is given back and taken again, while
        // `complete` allows.
        for tries in 1.. {
            let started = Instant::now();
            let mut all = AsyncMultiLockGuard {
                watch: std::sync::OnceLock::new(),
                guards: Vec::with_capacity(names.len()),
            };
            for name in &names {
                match self.take(name, &options, move || deadline, Ok).await? {
                    Some(guard) => all.guards.push(guard),
                    None => return Ok(None),
                }
            }
            let holds = all.guards.iter().map(|g| (g.name(), g.is_held()));
            match complete(holds, &options, started, tries, deadline)? {
                Set::Held => return Ok(Some(all)),
                Set::TimedOut => return Ok(None),
                Set::Again => {}
            }
        }
        Ok(None)
    }
}
