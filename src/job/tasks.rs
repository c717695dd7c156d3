//! The async face of scheduled jobs: [`AsyncJob`] (the same attempt as the
//! blocking [`Job`], no thread blocked) and [`AsyncJobGuard`] (dropped, the
//! hold ends in the background; `unlock().await` is the checked end).

use std::fmt;
use std::future::Future;
use std::pin::pin;
use std::time::{Duration, Instant};

use super::{Job, JobGuard, JobHistory, JobRun, Running};
use crate::error::Result;
use crate::guard::DropOn;
use crate::park::Park;
use crate::renewal::LeaseWatch;
use crate::task::AsyncLockClient;

/// A [`Job`] for async code: the run's attempt and end park the task, not
/// a thread.
///
/// ```no_run
/// # async fn build_report() -> u32 { 7 }
/// # async fn tick(client: leasehold::AsyncLockClient) -> Result<(), leasehold::Error> {
/// use std::time::Duration;
/// let report = client
///     .job("nightly-report")
///     .lock_at_least_for(Duration::from_secs(30));
/// if let Some(pages) = report.run(build_report()).await?.ran() {
///     println!("ran here: {pages} pages");
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct AsyncJob {
    job: Job,
}

impl AsyncLockClient {
    /// The scheduled job `name` (see [`LockClient::job`](crate::LockClient::job)).
    pub fn job(&self, name: &str) -> AsyncJob {
        AsyncJob {
            job: self.blocking().job(name),
        }
    }
}

impl AsyncJob {
    /// As [`Job::lock_at_most_for`].
    pub fn lock_at_most_for(self, d: Duration) -> Self {
        AsyncJob {
            job: self.job.lock_at_most_for(d),
        }
    }

    /// As [`Job::lock_at_least_for`].
    pub fn lock_at_least_for(self, d: Duration) -> Self {
        AsyncJob {
            job: self.job.lock_at_least_for(d),
        }
    }

    /// As [`Job::key_prefix`].
    pub fn key_prefix(self, prefix: impl Into<String>) -> Self {
        AsyncJob {
            job: self.job.key_prefix(prefix),
        }
    }

    /// As [`Job::environment`].
    pub fn environment(self, env: impl Into<String>) -> Self {
        AsyncJob {
            job: self.job.environment(env),
        }
    }

    /// The job's name, as given.
    pub fn name(&self) -> &str {
        self.job.name()
    }

    /// The Redis key of the job's lock (ShedLock's).
    pub fn key(&self) -> String {
        self.job.key()
    }

    /// The blocking face of this same job.
    pub fn blocking(&self) -> Job {
        self.job.clone()
    }

    /// [`Job::try_lock`] for a task.
    ///
    /// # Errors
    /// As [`Job::try_lock`].
    pub async fn try_lock(&self) -> Result<Option<AsyncJobGuard>> {
        let got = self.job.attempt(Park::Task, DropOn::Task).await?;
        Ok(got.ok().map(|guard| AsyncJobGuard { guard }))
    }

    /// [`Job::run`] for a task: awaits `job` when this replica gets the
    /// lock (inside it — at every poll — [`assert_locked`](crate::assert_locked)
    /// holds), [`JobRun::Skipped`] when another run holds it.
    ///
    /// # Errors
    /// As [`Job::run`].
    pub async fn run<F: Future>(&self, job: F) -> Result<JobRun<F::Output>> {
        let guard = match self.job.attempt(Park::Task, DropOn::Task).await? {
            Ok(guard) => guard,
            Err(skipped) => return Ok(JobRun::Skipped(skipped)),
        };
        let mut job = pin!(job);
        let out = std::future::poll_fn(|cx| {
            let _running = Running::enter(&guard);
            job.as_mut().poll(cx)
        })
        .await;
        Ok(JobRun::ended(out, guard.held.release(Park::Task).await))
    }

    /// [`Job::history`] for a task.
    ///
    /// # Errors
    /// As [`Job::history`].
    pub async fn history(&self) -> Result<JobHistory> {
        let job = self.job.clone();
        self.job
            .shared()
            .raw()
            .io(Park::Task, move || job.history())
            .await?
    }
}

impl fmt::Debug for AsyncJob {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("AsyncJob").field(&self.job).finish()
    }
}

/// A task's hold of a job's lock (see [`JobGuard`]); dropped, the hold ends
/// in the background.
#[must_use = "if unused the job's lock is ended at once"]
pub struct AsyncJobGuard {
    guard: JobGuard,
}

impl AsyncJobGuard {
    /// As [`JobGuard::name`].
    pub fn name(&self) -> &str {
        self.guard.name()
    }

    /// As [`JobGuard::key`].
    pub fn key(&self) -> &str {
        self.guard.key()
    }

    /// As [`JobGuard::value`].
    pub fn value(&self) -> &str {
        self.guard.value()
    }

    /// As [`JobGuard::lease`].
    pub fn lease(&self) -> Duration {
        self.guard.lease()
    }

    /// As [`JobGuard::is_held`].
    pub fn is_held(&self) -> bool {
        self.guard.is_held()
    }

    /// As [`JobGuard::valid_until`].
    pub fn valid_until(&self) -> Option<Instant> {
        self.guard.valid_until()
    }

    /// As [`JobGuard::remaining`].
    pub fn remaining(&self) -> Duration {
        self.guard.remaining()
    }

    /// As [`JobGuard::lost`] (a task awaits it).
    pub fn lost(&self) -> LeaseWatch {
        self.guard.lost()
    }

    /// [`JobGuard::unlock`] for a task.
    ///
    /// # Errors
    /// As [`JobGuard::unlock`].
    pub async fn unlock(self) -> Result<()> {
        self.guard.held.release(Park::Task).await
    }
}

impl fmt::Debug for AsyncJobGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("AsyncJobGuard").field(&self.guard).finish()
    }
}
