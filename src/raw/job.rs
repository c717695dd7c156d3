//! A scheduled job's lock at the raw layer (ShedLock's layout, see
//! `protocol::job`): the one attempt — a job never waits: busy means this
//! run is skipped — the hold a job guard keeps, renewed by the client's
//! renewal thread while the job runs, and its one release path (the rest
//! of `lock_at_least_for` kept, or the key deleted; owner-checked), and a
//! read of the job's run history.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use super::orphans::LostJob;
use super::{not_a_lock, not_held, Orphan, Raw, Undoing};
use crate::conn::{Bound, MakeForsaken};
use crate::error::{Error, Result};
use crate::options::check_name;
use crate::park::Park;
use crate::protocol::job::{self, Acquired};
use crate::protocol::Reply;
use crate::renewal::LeaseState;

/// What a job's lock is asked for: where it lives and how long it is held.
#[derive(Clone, Debug)]
pub(crate) struct JobSpec {
    /// The job's name, as the caller gave it.
    pub(crate) name: String,
    /// ShedLock's key prefix and environment.
    pub(crate) prefix: String,
    pub(crate) env: String,
    /// The lease: the lock outlives a dead holder by at most this much.
    pub(crate) at_most: Duration,
    /// The lock stays at least this long after the run began.
    pub(crate) at_least: Duration,
    /// The host named in the value (ShedLock's `getHostname`).
    pub(crate) host: String,
}

/// A run's hold of a job's lock, kept by its guard.
#[derive(Clone)]
pub(crate) struct JobHold {
    pub(crate) name: String,
    pub(crate) key: String,
    history: String,
    /// The run's value: its owner, ShedLock's `ADDED:<time>@<host>:<uuid>`.
    pub(crate) value: String,
    /// `lock_at_most_for`: the lease, renewed while the guard lives.
    pub(crate) lease: Duration,
    /// When the run took the lock (this client's clock).
    pub(crate) started: Instant,
    /// Until when the lock is kept at least (the run's start plus
    /// `lock_at_least_for`).
    keep_until: Instant,
    /// Shared with the renewal thread.
    pub(crate) state: Arc<LeaseState>,
}

/// An attempt at a job's lock.
pub(crate) enum JobAttempt {
    /// Taken: this run holds it.
    Taken(JobHold),
    /// Another run holds it (its value: any process, any library).
    Busy(String),
}

impl Raw {
    /// The key of job `spec`.
    pub(crate) fn job_key(&self, spec: &JobSpec) -> String {
        job::job_key(self.key_prefix(), &spec.prefix, &spec.env, &spec.name)
    }

    /// One attempt at the lock of job `spec` (one round trip): taken — and
    /// then renewed every third of `lock_at_most_for` until released — or
    /// busy.
    pub(crate) async fn attempt_job(
        self: &Arc<Self>,
        park: Park,
        spec: &JobSpec,
    ) -> Result<JobAttempt> {
        check_name(&spec.name)?;
        let key = self.job_key(spec);
        let history = job::history_key(&key);
        let value = job::value(SystemTime::now(), &spec.host, &uuid::Uuid::new_v4());
        let call = job::scripts().acquire_call(&key, &history, &value, spec.at_most, &spec.host);
        let started = Instant::now();
        // A take whose caller went away, or whose reply was lost: the lock
        // it may have set is ended (owner-checked) once Redis answers, not
        // left for the whole `lock_at_most_for`.
        let orphan = || {
            let lost = LostJob {
                history: history.clone(),
                keep_until: started,
            };
            Orphan::lost_job(&key, &value, spec.at_most, lost, started)
        };
        let forsaken = || self.forsaken(orphan(), Undoing::Acquire);
        let read = |r: Reply| job::acquire_reply(r.value);
        let (answer, sent) = (self.conns)
            .call(
                park,
                &key,
                Bound::default(),
                call,
                read,
                Some(&forsaken as MakeForsaken<'_>),
            )
            .await;
        let answer = match answer {
            Err(e) if sent => {
                self.forsake(orphan(), true);
                return Err(e);
            }
            answer => answer?,
        };
        match answer {
            Acquired::Taken => {
                let state = self
                    .renewer
                    .register_job(&key, &value, spec.at_most, started);
                Ok(JobAttempt::Taken(JobHold {
                    name: spec.name.clone(),
                    key,
                    history,
                    value,
                    lease: spec.at_most,
                    started,
                    keep_until: started + spec.at_least,
                    state,
                }))
            }
            Acquired::Busy(holder) => Ok(JobAttempt::Busy(holder)),
            Acquired::NotAJobLock => Err(not_a_lock(
                &key,
                "no string (a job's lock is ShedLock's string key)".to_owned(),
            )),
            Acquired::BadHistory => Err(not_a_lock(
                &history,
                "no hash (a job's run history is leasehold's hash)".to_owned(),
            )),
        }
    }

    /// Ends `hold`: renewal stops, then the lock is kept for what is left
    /// of `lock_at_least_for`, or deleted — owner-checked in Redis.
    ///
    /// # Errors
    /// [`Error::NotHeld`] when the lock was no longer this run's (its
    /// `lock_at_most_for` ran out while it could not be renewed, or it was
    /// removed); [`Error::ReleasePending`] when it failed transiently (sent
    /// again in the background until Redis answers); other Redis errors
    /// (the lock then ends at its lease).
    pub(crate) async fn release_job(
        self: &Arc<Self>,
        park: Park,
        hold: &JobHold,
        bound: Bound,
    ) -> Result<()> {
        let in_flight = self.renewer.cancel(&hold.state, true);
        hold.state.released();
        // An end whose caller went away, or whose reply was lost: sent again
        // (owner-checked, keeping the rest of `lock_at_least_for`) until
        // Redis answers.
        let orphan = |sent_at: Instant| {
            let lost = LostJob {
                history: hold.history.clone(),
                keep_until: hold.keep_until,
            };
            let lease = hold.state.valid_until().saturating_duration_since(sent_at);
            Orphan::lost_job(&hold.key, &hold.value, lease, lost, sent_at)
        };
        let settled = || self.forsaken(orphan(Instant::now()), Undoing::Release);
        self.renewal_settled(park, in_flight, Some(&settled as MakeForsaken<'_>))
            .await;
        let sent_at = Instant::now();
        let keep = hold.keep_until.saturating_duration_since(sent_at);
        let call = job::scripts().release_call(&hold.key, &hold.history, &hold.value, keep, false);
        let forsaken = || self.forsaken(orphan(sent_at), Undoing::Release);
        let read = |r: Reply| job::release_reply(r.value);
        let ran = (self.conns)
            .call(
                park,
                &hold.key,
                bound,
                call,
                read,
                Some(&forsaken as MakeForsaken<'_>),
            )
            .await;
        let ours = match ran {
            // Failed transiently (its reply lost, refused, Redis down): sent
            // again in the background until Redis answers or the lease
            // would have ended, as a lock's last release is.
            (Err(e), _) if e.is_transient() => {
                let until = hold.state.valid_until();
                return Err(self.release_pending(&hold.name, orphan(sent_at), until, e));
            }
            (ran, _) => ran?,
        };
        if !ours {
            return Err(not_held(&hold.name, &hold.state));
        }
        Ok(())
    }

    /// The owner-checked end of run `value`'s hold of the job lock `key`,
    /// keeping it `keep` more, for the undo of a call whose reply was lost
    /// (the history left alone).
    pub(super) fn undo_job(
        &self,
        key: &str,
        history: &str,
        value: &str,
        keep: Duration,
        bound: Bound,
    ) -> Result<()> {
        let call = job::scripts().release_call(key, history, value, keep, true);
        self.conns.run(key, bound, |con| call.run(con)).map(drop)
    }

    /// The run history of job `spec` (the hash's fields), and the value of
    /// its lock now (`None`: free).
    pub(crate) fn job_history(
        &self,
        spec: &JobSpec,
    ) -> Result<(HashMap<String, String>, Option<String>)> {
        check_name(&spec.name)?;
        let key = self.job_key(spec);
        let history = job::history_key(&key);
        self.conns
            .run(&key, Bound::default(), |con| {
                let mut pipe = redis::pipe();
                pipe.hgetall(&history).cmd("GET").arg(&key);
                pipe.query::<(HashMap<String, String>, Option<String>)>(con)
            })
            .map_err(|e| match e {
                Error::WrongType { .. } => not_a_lock(&key, "no string".to_owned()),
                other => other,
            })
    }
}
