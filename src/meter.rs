//! Counters a dashboard reads, through the `metrics` facade (feature
//! `metrics`; the application installs the recorder — Prometheus, StatsD,
//! anything): for every hold, by kind — attempts, acquired, busy (a wait
//! or a try that ended without it), lost, and how long holds were held —
//! and for scheduled jobs, by job name. Without the feature every call is
//! empty. Lock names are no label (an application may lock `order:<id>`
//! for every order: unbounded series); job names are (a service has few).

use std::time::Duration;
#[cfg(feature = "metrics")]
use std::time::Instant;

/// What a count is of: `plain`, `fair`, `read`, `write`, `permits`, `job`,
/// `redlock` (one acquisition per call, however many rounds it took).
pub(crate) type Kind = &'static str;

/// An acquisition began (one call, however many round trips).
pub(crate) fn attempt(kind: Kind) {
    count("leasehold_lock_attempts_total", kind);
}

/// An acquisition ended holding.
pub(crate) fn acquired(kind: Kind) {
    count("leasehold_lock_acquired_total", kind);
}

/// An acquisition ended without it: busy until its bound.
pub(crate) fn busy(kind: Kind) {
    count("leasehold_lock_busy_total", kind);
}

/// A hold's lease was lost (the renewal found it gone, or could not
/// confirm it in time); a Redlock's once its quorum is.
pub(crate) fn lost(kind: Kind) {
    count("leasehold_lock_lost_total", kind);
}

/// When a hold began, for [`held`]: read from the clock only with the
/// feature (nothing, and no clock read, on the lock path without it).
#[derive(Clone, Copy)]
pub(crate) struct Since {
    #[cfg(feature = "metrics")]
    at: Instant,
}

impl Since {
    /// Now.
    pub(crate) fn now() -> Self {
        Since {
            #[cfg(feature = "metrics")]
            at: Instant::now(),
        }
    }
}

/// A hold that began at `since` ended.
pub(crate) fn held(kind: Kind, since: Since) {
    #[cfg(feature = "metrics")]
    metrics::histogram!("leasehold_lock_held_seconds", "kind" => kind)
        .record(since.at.elapsed().as_secs_f64());
    #[cfg(not(feature = "metrics"))]
    let _ = (kind, since);
}

/// What happened to a scheduled job's run.
#[derive(Clone, Copy)]
pub(crate) enum JobEvent {
    /// A run tried to take the job's lock.
    Attempt,
    /// It took it.
    Acquired,
    /// Another run held it: skipped.
    Skipped,
    /// Its lock was no longer its own at the end.
    Lost,
}

/// A scheduled job's event, labelled with the job's name.
pub(crate) fn job(name: &str, event: JobEvent) {
    #[cfg(feature = "metrics")]
    {
        let metric = match event {
            JobEvent::Attempt => "leasehold_job_attempts_total",
            JobEvent::Acquired => "leasehold_job_acquired_total",
            JobEvent::Skipped => "leasehold_job_skipped_total",
            JobEvent::Lost => "leasehold_job_lost_total",
        };
        metrics::counter!(metric, "job" => name.to_owned()).increment(1);
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (name, event);
}

/// A scheduled job's run held its lock for `held`.
pub(crate) fn job_held(name: &str, held: Duration) {
    #[cfg(feature = "metrics")]
    metrics::histogram!("leasehold_job_held_seconds", "job" => name.to_owned())
        .record(held.as_secs_f64());
    #[cfg(not(feature = "metrics"))]
    let _ = (name, held);
}

fn count(metric: &'static str, kind: Kind) {
    #[cfg(feature = "metrics")]
    metrics::counter!(metric, "kind" => kind).increment(1);
    #[cfg(not(feature = "metrics"))]
    let _ = (metric, kind);
}
