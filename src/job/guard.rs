//! `JobGuard`: a run's hold of a scheduled job's lock — owned (`Send`),
//! renewed while it lives, ended on drop as the job says (kept for the
//! rest of `lock_at_least_for`, or deleted); `unlock()` is the checked end.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::conn::Bound;
use crate::error::{Error, Result};
use crate::guard::{Held, Releasable};
use crate::meter::JobEvent;
use crate::park::{block_on, Park};
use crate::raw::{JobHold, Raw};
use crate::renewal::{LeaseState, LeaseWatch};

/// A run's hold of a [`Job`](crate::Job)'s lock, until dropped or
/// [`unlock`](Self::unlock)ed: the lock is then kept for what is left of
/// `lock_at_least_for`, or deleted. Owned by the guard, not a thread:
/// `Send` and `Sync`.
#[must_use = "if unused the job's lock is ended at once"]
#[clippy::has_significant_drop]
pub struct JobGuard {
    pub(crate) held: Held<JobHold>,
}

impl JobGuard {
    /// The job's name, as given.
    pub fn name(&self) -> &str {
        &self.held.hold.name
    }

    /// The Redis key of the job's lock (ShedLock's).
    pub fn key(&self) -> &str {
        &self.held.hold.key
    }

    /// The lock's value: this run's owner, ShedLock's
    /// `ADDED:<time>@<host>:<uuid>`.
    pub fn value(&self) -> &str {
        &self.held.hold.value
    }

    /// The lease: `lock_at_most_for`, renewed while the guard lives.
    pub fn lease(&self) -> Duration {
        self.held.hold.lease
    }

    /// Whether the lock is still this run's as far as this client knows.
    /// Never touches the network.
    pub fn is_held(&self) -> bool {
        self.held.is_held()
    }

    /// Until when the lock is known to be this run's (the last acquire or
    /// renewal sent, plus the lease); `None` once it is not.
    pub fn valid_until(&self) -> Option<Instant> {
        self.held.valid_until()
    }

    /// How long the lock is known to stay this run's from now (zero once
    /// it is not).
    pub fn remaining(&self) -> Duration {
        crate::options::left_until(self.valid_until())
    }

    /// The lease-lost signal of the run's lock (see [`LeaseWatch`]): lost
    /// when the renewal thread finds it no longer this run's, or could not
    /// renew it in time — another replica may run the job now.
    pub fn lost(&self) -> LeaseWatch {
        self.held.lost()
    }

    /// Ends the hold, checking the lock was still this run's: kept for the
    /// rest of `lock_at_least_for`, or deleted.
    ///
    /// # Errors
    /// [`Error::NotHeld`](crate::Error::NotHeld) when it was no longer this
    /// run's; [`Error::ReleasePending`](crate::Error::ReleasePending) when
    /// Redis could not be reached, refused the end (`LOADING`, …) or its
    /// reply was lost: it is sent again in the background until Redis
    /// answers, or the lock ends at its lease; other Redis errors (the lock
    /// then ends at its lease).
    pub fn unlock(self) -> Result<()> {
        block_on(self.held.release(Park::Thread))
    }

    pub(crate) fn state(&self) -> Arc<LeaseState> {
        Arc::clone(&self.held.hold.state)
    }
}

impl Releasable for JobHold {
    async fn release(&self, raw: &Arc<Raw>, park: Park, bound: Bound) -> Result<()> {
        crate::meter::job_held(&self.name, self.started.elapsed());
        let ended = raw.release_job(park, self, bound).await;
        if let Err(Error::NotHeld { .. }) = ended {
            crate::meter::job(&self.name, JobEvent::Lost);
        }
        ended
    }

    fn meter_kind(&self) -> crate::meter::Kind {
        "job"
    }

    fn drop_failed(&self, e: &Error) {
        tracing::warn!(job = %self.name, error = ?e, "leasehold: ending a job's lock on drop failed");
    }
}

impl fmt::Debug for JobGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JobGuard")
            .field("name", &self.name())
            .field("value", &self.value())
            .field("held", &self.is_held())
            .finish_non_exhaustive()
    }
}
