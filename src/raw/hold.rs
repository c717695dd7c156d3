//! A guard's hold ([`Hold`]), and the one release path of every kind
//! ([`Raw::release`]): the ledger says whether it is the owner's last hold
//! here (and, for a plain lock, which thread of this client the lock may
//! pass to), renewal of its lease stops when its last guard goes, then the
//! release script — and a last release whose reply was lost is sent again
//! in the background. The one acquire ending is `Waiting::held`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{Orphan, Raw};
use crate::conn::Bound;
use crate::error::{Error, Result};
use crate::ledger::{Outcome, Removed};
use crate::options::Kind;
use crate::protocol::{self, Release, Released};
use crate::renewal::LeaseState;

/// One hold, as a guard keeps it and [`Raw::release`] gives it back.
pub(crate) struct Hold {
    /// The lock name as the caller gave it.
    pub(crate) name: String,
    /// The Redis key (prefix + name).
    pub(crate) key: String,
    /// The hash field of the hold (the owner, or its write field).
    pub(crate) field: String,
    pub(crate) lease: Duration,
    pub(crate) kind: Kind,
    pub(crate) fence: Option<u64>,
    /// Shared with the renewal thread and with reentrant guards of one owner.
    pub(crate) state: Arc<LeaseState>,
    /// Whether the watchdog renews this lease (no explicit lease given).
    pub(crate) renewed: bool,
    /// The generation of the owner's holds it counts in (see `ledger`).
    pub(crate) generation: u64,
    /// Taken through the plain lock's in-process queue (its release may
    /// hand the lock to a thread of this client queued for it).
    pub(crate) in_line: bool,
}

impl Hold {
    /// The owner of the hold (its field, without a write hold's suffix).
    pub(crate) fn owner(&self) -> &str {
        protocol::owner_of_field(self.kind, &self.field)
    }
}

impl Raw {
    /// A hold of `owner` — an owner of one acquisition (a Redlock
    /// attempt's) — on plain lock `key` that an attempt sent at `sent_at`
    /// took with `lease` (renewed by the watchdog when `watchdog`), recorded
    /// in the ledger.
    pub(crate) fn hold_unique(
        &self,
        name: &str,
        key: &str,
        owner: &str,
        lease: Duration,
        watchdog: bool,
        sent_at: Instant,
    ) -> Hold {
        let added = self
            .ledger
            .add(key, owner, watchdog, sent_at + lease, None, &mut || {
                self.new_state(key, owner, lease, watchdog, sent_at, lease, None)
            });
        Hold {
            name: name.to_owned(),
            key: key.to_owned(),
            field: owner.to_owned(),
            lease,
            kind: Kind::Plain,
            fence: None,
            state: added.state,
            renewed: watchdog,
            generation: added.generation,
            in_line: false,
        }
    }

    /// Gives back one hold, within `bound`: the ledger counts it out —
    /// renewal of its lease stops when it was the last guard on it — then
    /// the release script runs: for a plain lock handing it to a thread of
    /// this client queued for it when there is one (unless every acquire
    /// must be acknowledged by replicas), or granting it to the first client
    /// waiting in line. A lost hold sends nothing.
    ///
    /// # Errors
    /// [`Error::NotHeld`] when the hold was no longer ours;
    /// [`Error::ReleasePending`] when the owner's last release was not
    /// answered (it is sent again in the background until Redis answers or
    /// the lease ends); connection errors when Redis could not be reached.
    pub(crate) fn release(self: &Arc<Self>, hold: &Hold, bound: Bound) -> Result<()> {
        let result = self.release_hold(hold, bound);
        // Debug level, no owner: names and the outcome only.
        tracing::debug!(lock = %hold.name, kind = ?hold.kind, ok = result.is_ok(), "leasehold: release");
        result
    }

    fn release_hold(self: &Arc<Self>, hold: &Hold, bound: Bound) -> Result<()> {
        let not_held = || Error::NotHeld {
            name: hold.name.clone(),
            lost: hold.state.lost_why(),
        };
        let mut rel = Release {
            kind: hold.kind,
            key: &hold.key,
            field: &hold.field,
            lease: hold.lease,
            last: true,
            successor: None,
        };
        if !hold.in_line {
            let removed = self
                .ledger
                .remove(&hold.key, &hold.field, hold.generation, hold.renewed);
            // Renewal stops (when this was the last guard on the lease)
            // before the release.
            self.stop(hold, removed);
            if removed.last {
                hold.state.released();
            }
            if hold.state.is_lost() {
                return Err(not_held());
            }
            rel.last = removed.last;
            return match self.release_or_retry(hold, &rel, bound)? {
                Released::NotHeld => Err(not_held()),
                _ => Ok(()),
            };
        }
        // A thread of this client queued for the lock may get it directly.
        let handover = self
            .ledger
            .release(&hold.key, &hold.field, hold.generation, hold.renewed);
        self.stop(
            hold,
            Removed {
                last: handover.last(),
                stop_renewal: handover.stop_renewal(),
            },
        );
        if handover.last() {
            hold.state.released();
        }
        if hold.state.is_lost() {
            // Someone else may hold it now: send nothing at all (dropping the
            // handover lets the next local thread try Redis itself).
            return Err(not_held());
        }
        rel.last = handover.last();
        // With replica acknowledgement every acquire is its own script and
        // WAIT: no handoff inside the release script.
        rel.successor = handover.successor().filter(|_| self.replicas.is_none());
        let sent_at = Instant::now();
        let released = self.release_or_retry(hold, &rel, bound)?;
        let gave_up = handover.finish(match released {
            Released::HandedOver { fence } => Outcome::HandedOver(sent_at, fence),
            Released::FreedForOthers => Outcome::FreedForOthers,
            _ => Outcome::Other,
        });
        if let Some((owner, lease)) = gave_up {
            // Handed to a waiter that gave up while the script was on its
            // way: it holds the lock in Redis with nobody to release it.
            let _ = self.undo_hold(Kind::Plain, &hold.key, &owner, lease, true, bound);
        }
        match released {
            Released::NotHeld => Err(not_held()),
            _ => Ok(()),
        }
    }

    /// Stops what keeps `hold`'s lease alive, as the ledger's `removed`
    /// says: the renewal of a watchdog lease when its last guard went, the
    /// keep-alive of a read hold with an explicit lease always.
    fn stop(&self, hold: &Hold, removed: Removed) {
        if hold.renewed {
            if removed.stop_renewal {
                self.renewer.cancel(&hold.state, true);
            }
        } else if hold.kind == Kind::Read {
            self.renewer.cancel(&hold.state, false);
        }
    }

    /// One release script for `hold`. When the owner's last release was
    /// not answered (or could not be sent: Redis unreachable, failing over),
    /// it is sent again in the background (see [`orphaned`](Self::orphaned))
    /// until Redis answers or the lease would have ended:
    /// [`Error::ReleasePending`].
    fn release_or_retry(
        self: &Arc<Self>,
        hold: &Hold,
        rel: &Release<'_>,
        bound: Bound,
    ) -> Result<Released> {
        let e = match self
            .conns
            .run_sent(rel.key, bound, |con| self.scripts().release(con, rel))
        {
            (Ok(released), _) => return Ok(released),
            // Not answered, or not sent while Redis could not be reached: the
            // owner's last release is sent again until Redis answers.
            (Err(e), _) if rel.last && e.is_transient() => e,
            // An answer, or a reentrant count (the owner's last release
            // settles it).
            (Err(e), _) => return Err(e),
        };
        let until = hold.state.valid_until();
        self.orphaned(Orphan {
            kind: hold.kind,
            key: hold.key.clone(),
            owner: hold.owner().to_owned(),
            lease: hold.lease,
            place: None,
            until,
            permits: None,
        });
        Err(Error::ReleasePending {
            name: hold.name.clone(),
            lease_left: until.saturating_duration_since(Instant::now()),
            source: Box::new(e),
        })
    }

    /// Releases all of the hold of `owner` — an owner of one acquisition
    /// (a Redlock attempt's) that kept no guard — on plain lock `key`,
    /// within `bound`: whether it was ours. When Redis did not answer or
    /// could not be reached, it is sent again in the background until Redis
    /// answers: no later hold can have this owner.
    pub(crate) fn release_unique(
        self: &Arc<Self>,
        key: &str,
        owner: &str,
        lease: Duration,
        bound: Bound,
    ) -> Result<bool> {
        let rel = Release {
            kind: Kind::Plain,
            key,
            field: owner,
            lease,
            last: true,
            successor: None,
        };
        let sent_at = Instant::now();
        let released = self.release_script(&rel, bound.with_pool_wait(self.socket_timeout));
        if released.as_ref().is_err_and(Error::is_transient) {
            self.orphaned(Orphan::lost(Kind::Plain, key, owner, lease, None, sent_at));
        }
        Ok(released? != Released::NotHeld)
    }
}
