//! Scheduled jobs, at most once per window across replicas: [`Job`] (a
//! job's lock in ShedLock's Redis layout: take it without waiting — busy
//! means this run is skipped — hold it at least `lock_at_least_for`, at most
//! `lock_at_most_for` past a dead holder, renewed while the job runs), its
//! guard ([`JobGuard`], in `guard`), the async face ([`AsyncJob`], in
//! `tasks`), the run history, and the assertion a job's code makes that it
//! runs under its lock. Thin: the raw layer knows the scripts.

mod guard;
mod tasks;

use std::cell::RefCell;
use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub use guard::JobGuard;
pub use tasks::{AsyncJob, AsyncJobGuard};

use crate::client::LockClient;
use crate::error::{Error, Result};
use crate::guard::{DropOn, Held};
use crate::meter::{self, JobEvent};
use crate::options::{check_lease, check_renewable};
use crate::park::{block_on, blocking_wait_allowed, Park};
use crate::protocol::job::{value_host, DEFAULT_ENV, DEFAULT_PREFIX};
use crate::raw::{JobAttempt, JobSpec};
use crate::renewal::LeaseState;
use crate::shared::Shared;

/// A scheduled job's lock: run the job at most once per window across all
/// replicas of a service — ShedLock's model, and its Redis layout, so a Java
/// service with ShedLock's Redis provider and a Rust service share one job.
///
/// A run takes the lock **without waiting**: when another replica holds it,
/// this run is skipped ([`JobRun::Skipped`] says by whom; not an error). The
/// lock is held while the job runs — renewed by the client's renewal thread
/// every third of [`lock_at_most_for`](Self::lock_at_most_for), so a job
/// longer than that is not run twice — and after the job ends it is kept
/// until [`lock_at_least_for`](Self::lock_at_least_for) has passed since it
/// began, so a job shorter than the clock skew between replicas still runs
/// once per window. A replica that dies (or pauses) while it runs holds the
/// lock at most `lock_at_most_for` more: the next schedule after that runs.
///
/// Keep-alive is **not capped**: a job that still runs keeps its lock. A cap
/// would mean either stopping the job (nothing can stop a Rust thread from
/// outside) or letting a second replica start while the first still runs —
/// what the lock is for. A job that must end by a deadline checks
/// [`JobGuard::remaining`] or its own clock; one that lost its lock anyway
/// (Redis unreachable for longer than the lease) is told by
/// [`JobGuard::lost`].
///
/// ```no_run
/// # fn build_report() -> u32 { 7 }
/// # fn main() -> Result<(), leasehold::Error> {
/// use std::time::Duration;
/// use leasehold::JobRun;
///
/// let client = leasehold::LockClient::connect("redis://127.0.0.1/")?;
/// let report = client
///     .job("nightly-report")
///     .lock_at_most_for(Duration::from_secs(60))   // a dead replica's lock goes within a minute
///     .lock_at_least_for(Duration::from_secs(30)); // longer than the replicas' clock skew
/// // On every replica, from its scheduler (cron, tokio-cron-scheduler, a loop):
/// match report.run(build_report)? {
///     JobRun::Ran(pages) => println!("ran: {pages} pages"),
///     JobRun::RanUnconfirmed { output, error } => println!("ran: {output} pages, but {error}"),
///     JobRun::Skipped(skip) => println!("skipped: {skip}"),
/// }
/// # Ok(()) }
/// ```
///
/// The layout (ShedLock's `InternalRedisLockProvider`): the key
/// `<client key prefix><prefix>:<environment>:<name>` — `job-lock:default:<name>`
/// by default, see [`key_prefix`](Self::key_prefix) and
/// [`environment`](Self::environment); the value
/// `ADDED:<ISO-8601 time>@<host>:<uuid>`, taken with `SET NX PX`; the end
/// owner-checked (ShedLock's `safeUpdate` scripts). A run history is kept
/// beside it (`{<key>}:leasehold_job_history`): see [`history`](Self::history).
#[derive(Clone)]
pub struct Job {
    shared: Arc<Shared>,
    spec: JobSpec,
}

impl LockClient {
    /// The scheduled job `name` (see [`Job`]); nothing is sent until it
    /// runs. Defaults: `lock_at_most_for` the client's watchdog lease,
    /// `lock_at_least_for` zero, ShedLock's key prefix `job-lock` and
    /// environment `default`.
    pub fn job(&self, name: &str) -> Job {
        Job::new(Arc::clone(self.shared()), name)
    }
}

impl Job {
    pub(crate) fn new(shared: Arc<Shared>, name: &str) -> Self {
        let spec = JobSpec {
            name: name.to_owned(),
            prefix: DEFAULT_PREFIX.to_owned(),
            env: DEFAULT_ENV.to_owned(),
            at_most: shared.raw().watchdog_lease(),
            at_least: Duration::ZERO,
            host: crate::renewal::registration::host_name().to_owned(),
        };
        Job { shared, spec }
    }

    /// How long the lock outlives a replica that died (or paused) while the
    /// job ran: its lease, renewed every third of it while the job runs
    /// (ShedLock's `lockAtMostFor`, with its keep-alive). Must be longer
    /// than twice the client's socket timeout.
    pub fn lock_at_most_for(mut self, d: Duration) -> Self {
        self.spec.at_most = d;
        self
    }

    /// How long after a run began the lock is kept at least, also when the
    /// job ended sooner (ShedLock's `lockAtLeastFor`): longer than the clock
    /// skew between the replicas and shorter than the period of the
    /// schedule. Zero (the default): released when the job ends.
    pub fn lock_at_least_for(mut self, d: Duration) -> Self {
        self.spec.at_least = d;
        self
    }

    /// ShedLock's key prefix (its `keyPrefix`, default `job-lock`).
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.spec.prefix = prefix.into();
        self
    }

    /// ShedLock's environment (its `environment`, default `default`).
    pub fn environment(mut self, env: impl Into<String>) -> Self {
        self.spec.env = env.into();
        self
    }

    /// The job's name, as given.
    pub fn name(&self) -> &str {
        &self.spec.name
    }

    /// The Redis key of the job's lock (ShedLock's).
    pub fn key(&self) -> String {
        self.shared.raw().job_key(&self.spec)
    }

    /// One attempt at the job's lock: its guard, or `None` when another run
    /// holds it (this run is to be skipped). The guard keeps the lock
    /// renewed while it lives; dropping it (or [`JobGuard::unlock`]) ends
    /// the hold as [`Job`] says.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a bad name or durations;
    /// [`Error::NotALock`] when the key holds something else; Redis errors.
    pub fn try_lock(&self) -> Result<Option<JobGuard>> {
        Ok(self.attempt_blocking()?.ok())
    }

    /// Runs `job` when this replica gets the job's lock, holding it while
    /// `job` runs (see [`Job`]); [`JobRun::Skipped`] when another run holds
    /// it. Inside `job`, [`assert_locked`] holds. A panic in `job` ends the
    /// hold as a return does, and goes on. Once the job ran, its output is
    /// never lost: an end of the hold that failed is
    /// [`JobRun::RanUnconfirmed`], with the output.
    ///
    /// # Errors
    /// As [`try_lock`](Self::try_lock): the job did not run.
    pub fn run<T>(&self, job: impl FnOnce() -> T) -> Result<JobRun<T>> {
        let guard = match self.attempt_blocking()? {
            Ok(guard) => guard,
            Err(skipped) => return Ok(JobRun::Skipped(skipped)),
        };
        let output = {
            let _running = Running::enter(&guard);
            job()
        };
        Ok(JobRun::ended(output, guard.unlock()))
    }

    /// What Redis keeps of the job: its lock now, its last run and the
    /// counts of runs, skips and losses (of leasehold's runs; ShedLock's
    /// own runs are seen only as the lock).
    ///
    /// # Errors
    /// As [`try_lock`](Self::try_lock).
    pub fn history(&self) -> Result<JobHistory> {
        let (fields, holder) = self.shared.raw().job_history(&self.spec)?;
        Ok(JobHistory::of(&self.spec.name, self.key(), &fields, holder))
    }

    fn attempt_blocking(&self) -> Result<std::result::Result<JobGuard, Skipped>> {
        blocking_wait_allowed(
            &self.spec.name,
            None,
            false,
            "leasehold::AsyncJob (AsyncLockClient::job) and .await its run",
        )?;
        block_on(self.attempt(Park::Thread, DropOn::Owned))
    }

    /// The one attempt of both faces.
    pub(crate) async fn attempt(
        &self,
        park: Park,
        drop_on: DropOn,
    ) -> Result<std::result::Result<JobGuard, Skipped>> {
        self.check()?;
        let raw = self.shared.raw();
        let name = &self.spec.name;
        meter::attempt("job");
        meter::job(name, JobEvent::Attempt);
        let attempt = raw.attempt_job(park, &self.spec).await?;
        if let JobAttempt::Taken(_) = attempt {
            meter::acquired("job");
            meter::job(name, JobEvent::Acquired);
        } else {
            meter::busy("job");
            meter::job(name, JobEvent::Skipped);
        }
        match attempt {
            JobAttempt::Taken(hold) => {
                let state = Arc::clone(&hold.state);
                let held = Held::new(Arc::clone(raw), state, hold, drop_on);
                Ok(Ok(JobGuard { held }))
            }
            JobAttempt::Busy(holder) => Ok(Err(Skipped { holder })),
        }
    }

    /// Refuses durations that cannot work.
    fn check(&self) -> Result<()> {
        let (at_most, at_least) = (self.spec.at_most, self.spec.at_least);
        check_lease("lock_at_most_for", at_most)?;
        let io = self.shared.raw().socket_timeout();
        check_renewable("lock_at_most_for", at_most, io)?;
        if at_least > at_most {
            return Err(Error::invalid(format_args!(
                "lock_at_least_for ({at_least:?}) must not be longer than lock_at_most_for ({at_most:?}): \
                 a replica that died mid-run would free the job before its minimum (ShedLock refuses it too)"
            )));
        }
        Ok(())
    }

    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }
}

impl fmt::Debug for Job {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Job")
            .field("name", &self.spec.name)
            .field("key", &self.key())
            .field("lock_at_most_for", &self.spec.at_most)
            .field("lock_at_least_for", &self.spec.at_least)
            .finish_non_exhaustive()
    }
}

/// What a [`Job::run`] did.
#[derive(Debug)]
#[must_use]
pub enum JobRun<T> {
    /// This replica ran the job, holding its lock throughout: what it
    /// returned.
    Ran(T),
    /// This replica ran the job, but the end of its hold failed:
    /// [`Error::NotHeld`] — the lock was no longer this run's (lost while
    /// Redis was unreachable past `lock_at_most_for`, or removed): another
    /// replica may have run it meanwhile — or a Redis error (ended once
    /// Redis answers when it failed transiently,
    /// [`Error::ReleasePending`]; else the lock ends at its lease). Not an
    /// `Err`: the job did run, and a caller that retried on errors would
    /// run it twice.
    RanUnconfirmed {
        /// What the job returned.
        output: T,
        /// Why its end failed.
        error: Error,
    },
    /// Another run held the job's lock: this one was skipped.
    Skipped(Skipped),
}

impl<T> JobRun<T> {
    /// The run's outcome once its hold ended with `ended`.
    pub(crate) fn ended(output: T, ended: Result<()>) -> Self {
        match ended {
            Ok(()) => JobRun::Ran(output),
            Err(error) => {
                tracing::warn!(error = %error, "leasehold: a job ran, but the end of its lock failed");
                JobRun::RanUnconfirmed { output, error }
            }
        }
    }

    /// What the job returned, if it ran here (confirmed or not).
    pub fn ran(self) -> Option<T> {
        match self {
            JobRun::Ran(output) | JobRun::RanUnconfirmed { output, .. } => Some(output),
            JobRun::Skipped(_) => None,
        }
    }

    /// Whether this run was skipped.
    pub fn is_skipped(&self) -> bool {
        matches!(self, JobRun::Skipped(_))
    }
}

/// A skipped run: who held the job's lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    holder: String,
}

impl Skipped {
    /// The lock's value: ShedLock's `ADDED:<time>@<host>:<uuid>` (of a
    /// leasehold or a ShedLock run).
    pub fn holder(&self) -> &str {
        &self.holder
    }

    /// The host of the run that held it, when the value names one.
    pub fn host(&self) -> Option<&str> {
        value_host(&self.holder)
    }
}

impl fmt::Display for Skipped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.host() {
            Some(host) => write!(f, "held by a run on {host} ({})", self.holder),
            None => write!(f, "held by {:?}", self.holder),
        }
    }
}

/// What Redis keeps of a job ([`Job::history`]): its lock now, its last
/// run (times by the server's clock) and counts.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct JobHistory {
    /// The job's name.
    pub name: String,
    /// Its lock's Redis key.
    pub key: String,
    /// The lock's value now (`None`: free): a run holds it, or the rest of
    /// its `lock_at_least_for` runs.
    pub holder: Option<String>,
    /// When the last run began (server's clock).
    pub last_started: Option<SystemTime>,
    /// When it ended (`None`: running, or it never ended — its replica died).
    pub last_ended: Option<SystemTime>,
    /// How long it ran.
    pub last_duration: Option<Duration>,
    /// The host it ran on.
    pub last_host: Option<String>,
    /// Runs that took the lock.
    pub runs: u64,
    /// Runs skipped because another held it.
    pub skipped: u64,
    /// Runs whose lock was no longer theirs at the end.
    pub lost: u64,
}

impl JobHistory {
    fn of(
        name: &str,
        key: String,
        fields: &HashMap<String, String>,
        holder: Option<String>,
    ) -> Self {
        let ms = |f: &str| fields.get(f).and_then(|v| v.parse::<u64>().ok());
        let at = |f: &str| ms(f).map(|ms| UNIX_EPOCH + Duration::from_millis(ms));
        JobHistory {
            name: name.to_owned(),
            key,
            holder,
            last_started: at("last_started"),
            last_ended: at("last_ended"),
            last_duration: ms("last_duration").map(Duration::from_millis),
            last_host: fields.get("last_host").cloned(),
            runs: ms("runs").unwrap_or(0),
            skipped: ms("skipped").unwrap_or(0),
            lost: ms("lost").unwrap_or(0),
        }
    }
}

thread_local! {
    /// The holds of the jobs this thread runs now (innermost last): what
    /// [`assert_locked`] asks.
    static RUNNING: RefCell<Vec<(String, Arc<LeaseState>)>> = const { RefCell::new(Vec::new()) };
}

/// A job's hold entered on this thread for as long as it lives (a run, or
/// one poll of an async run).
pub(crate) struct Running;

impl Running {
    pub(crate) fn enter(guard: &JobGuard) -> Running {
        let entry = (guard.name().to_owned(), guard.state());
        RUNNING.with(|r| r.borrow_mut().push(entry));
        Running
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        RUNNING.with(|r| r.borrow_mut().pop());
    }
}

/// The name of the job this code runs under, inside [`Job::run`] or
/// [`AsyncJob::run`], while its lock is held (not lost): `None` outside a
/// run, or when its lock was lost.
pub fn running_job() -> Option<String> {
    RUNNING.with(|r| {
        let r = r.borrow();
        let (name, state) = r.last()?;
        state.is_held().then(|| name.clone())
    })
}

/// Asserts that this code runs inside a job's run with its lock held —
/// ShedLock's `LockAssert.assertLocked()`, for a job's code that must never
/// run unlocked (called by hand, or from a scheduler without the lock).
///
/// The run is known to the thread running it (at every poll of an async
/// run): code that the run's thread runs for others while it waits — a
/// work-stealing pool's tasks (`rayon::join` inside the job), a local
/// executor driven inside an async run — passes the assertion too.
///
/// # Panics
/// Outside [`Job::run`] / [`AsyncJob::run`], or when the run's lock was
/// lost: it is an assertion.
#[track_caller]
pub fn assert_locked() {
    // The one panic of the library, by contract: an assertion the caller
    // asked for (as `assert!`), documented above; `running_job()` is the
    // form that does not panic.
    if running_job().is_none() {
        panic!("leasehold::assert_locked: this code does not run under a job's lock (not inside Job::run or AsyncJob::run, or its lock was lost)");
    }
}
