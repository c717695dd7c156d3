//! A guard's hold ([`Hold`]), and the one release path of every kind
//! ([`Raw::release`]): the ledger says whether it is the owner's last hold
//! here (and, for a plain lock, which thread of this client the lock may
//! pass to), renewal of its lease stops when its last guard goes, then the
//! release script — and a last release whose reply was lost is sent again
//! in the background. The one acquire ending is `Waiting::held`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{not_held, Orphan, Raw, Undoing};
use crate::conn::{Bound, MakeForsaken};
use crate::error::{Error, Result};
use crate::ledger::{Handover, NewHold, Outcome, Removed};
use crate::options::Kind;
use crate::park::Park;
use crate::protocol::{self, Release, Released, Reply, Scripts};
use crate::renewal::{InFlight, LeaseState};

/// One hold, as a guard keeps it and [`Raw::release`] gives it back
/// (cloned only to be released elsewhere, by a guard that is gone).
#[derive(Clone)]
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

/// The undo of `hold`'s release whose answer was lost: its owner-checked
/// release, sent until Redis answers or its lease would have ended.
fn release_orphan(hold: &Hold) -> Orphan {
    let (key, owner, now) = (&hold.key, hold.owner(), Instant::now());
    let lost = Orphan::lost(hold.kind, key, owner, Duration::ZERO, None, now);
    Orphan {
        until: hold.state.valid_until(),
        ..lost
    }
}

/// A release under way (see `Raw::release_begin`): whether it is the
/// owner's last hold here and what Redis keeps for its remaining guards,
/// and the hand-over to a queued thread the ledger allows (plain locks, in
/// line).
struct Releasing<'a> {
    removed: Removed,
    handover: Option<Handover<'a>>,
    /// The renewal batch in flight as its renewal stopped, to wait out.
    in_flight: InFlight,
}

impl Releasing<'_> {
    /// The release to send for `hold`; a successor named only when
    /// `hand_over` (not with replica acknowledgement: a hand-over is not
    /// acknowledged).
    fn release<'h>(&'h self, hold: &'h Hold, hand_over: bool) -> Release<'h> {
        Release {
            kind: hold.kind,
            key: &hold.key,
            field: &hold.field,
            keep: self.removed.keep,
            last: self.removed.last,
            successor: self
                .handover
                .as_ref()
                .and_then(Handover::successor)
                .filter(|_| hand_over),
        }
    }

    /// Tells the hand-over how the release (sent at `sent_at`) went; the
    /// hold to undo when the queued thread it went to had given up.
    fn end(self, released: Released, sent_at: Instant) -> Option<String> {
        self.handover?.finish(match released {
            Released::HandedOver { fence } => Outcome::HandedOver(sent_at, fence),
            Released::FreedForOthers => Outcome::FreedForOthers,
            _ => Outcome::Other,
        })
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
        let new_state =
            &mut || self.new_state(key, owner, lease, watchdog, sent_at, lease, None, "redlock");
        let new = NewHold {
            renewed: watchdog,
            until: sent_at + lease,
            minted: None,
            new_state,
        };
        let added = self.ledger.add(key, owner, new);
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

    /// Gives back one hold, for `park`'s caller, within `bound`: the ledger
    /// counts it out — renewal of its lease stops when it was the last
    /// guard on it — then the release script runs: for a plain lock handing
    /// it to a thread of this client queued for it when there is one
    /// (unless every acquire must be acknowledged by replicas), or granting
    /// it to the first client waiting in line. A lost hold sends nothing. A
    /// task's future dropped before the answer came leaves the owner's last
    /// release to the background, as nobody else will send it (the hold
    /// has left the ledger and the renewal): see [`forsaken`](Self::forsaken).
    ///
    /// # Errors
    /// [`Error::NotHeld`] when the hold was no longer ours;
    /// [`Error::ReleasePending`] when the owner's last release was not
    /// answered (it is sent again in the background until Redis answers or
    /// the lease ends); connection errors when Redis could not be reached.
    pub(crate) async fn release(
        self: &Arc<Self>,
        park: Park,
        hold: &Hold,
        bound: Bound,
    ) -> Result<()> {
        let result = self.release_hold(park, hold, bound).await;
        // Debug level, no owner: names and the outcome only.
        tracing::debug!(lock = %hold.name, kind = ?hold.kind, ok = result.is_ok(), "leasehold: release");
        result
    }

    async fn release_hold(self: &Arc<Self>, park: Park, hold: &Hold, bound: Bound) -> Result<()> {
        let Some(releasing) = self.release_begin(hold) else {
            return Err(not_held(&hold.name, &hold.state));
        };
        let rel = releasing.release(hold, self.replicas.is_none());
        let call = self.scripts().release_call(&rel);
        let forsaken = || self.forsaken(release_orphan(hold), Undoing::Release);
        let forsaken = rel.last.then_some(&forsaken as MakeForsaken<'_>);
        self.renewal_settled(park, releasing.in_flight, forsaken)
            .await;
        let kind = rel.kind;
        let read = move |r: Reply| Scripts::release_reply(kind, r.value);
        let sent_at = Instant::now();
        let ran = self
            .conns
            .call(park, rel.key, bound, call, read, forsaken)
            .await
            .0;
        let released = match ran {
            // A last release that failed transiently (its reply lost, Redis
            // down) is sent again in the background until Redis answers or
            // the lease would have ended.
            Err(e) if rel.last && e.is_transient() => {
                let (orphan, until) = (release_orphan(hold), hold.state.valid_until());
                return Err(self.release_pending(&hold.name, orphan, until, e));
            }
            ran => ran?,
        };
        if let Some(owner) = releasing.end(released, sent_at) {
            // Handed to a waiter that had given up: given back.
            self.undo_detached(park, Kind::Plain, &hold.key, &owner, true, bound);
        }
        match released {
            Released::NotHeld => Err(not_held(&hold.name, &hold.state)),
            _ => Ok(()),
        }
    }

    /// The ledger's part of releasing `hold`, before its script: whether it
    /// is the owner's last hold here, renewal stopped when its last guard
    /// goes, and (in line) the hand-over to a queued thread it allows.
    /// `None` when no script is to be sent (the lease was lost).
    fn release_begin<'a>(&'a self, hold: &'a Hold) -> Option<Releasing<'a>> {
        let (key, field, state) = (&hold.key, &hold.field, &hold.state);
        let (removed, handover) = if hold.in_line {
            let handover = self
                .ledger
                .release(key, field, hold.generation, state, hold.renewed);
            (handover.removed, Some(handover))
        } else {
            let removed = self
                .ledger
                .remove(key, field, hold.generation, state, hold.renewed);
            (removed, None)
        };
        let in_flight = if hold.renewed {
            match removed.stop_renewal {
                true => self.renewer.cancel(state, true),
                false => InFlight::default(),
            }
        } else if hold.kind == Kind::Read {
            self.renewer.cancel(state, false)
        } else {
            InFlight::default()
        };
        if removed.last {
            state.released();
        }
        // A guard of an earlier hold of an owner that holds the lock again
        // here sends nothing: what Redis has for the owner is the new
        // hold's. (One merely counted out — its hold taken over, Redis
        // deciding — is sent, owner-checked.)
        (!state.is_lost() && !removed.superseded).then_some(Releasing {
            removed,
            handover,
            in_flight,
        })
    }

    /// A release sent and not answered, sent again in the background as
    /// `orphan` until Redis answers: [`Error::ReleasePending`] of `name`,
    /// whose lease ends at `until`.
    pub(super) fn release_pending(
        self: &Arc<Self>,
        name: &str,
        orphan: Orphan,
        until: Instant,
        e: Error,
    ) -> Error {
        self.orphaned(orphan);
        Error::ReleasePending {
            name: name.to_owned(),
            lease_left: until.saturating_duration_since(Instant::now()),
            source: Box::new(e),
        }
    }

    /// Releases all of the hold of `owner` — an owner of one acquisition
    /// (a Redlock attempt's) that kept no guard — on plain lock `key`,
    /// within [`give_back`](Self::give_back): whether it was ours. When Redis did not answer or
    /// could not be reached, it is sent again in the background until Redis
    /// answers: no later hold can have this owner.
    pub(crate) fn release_unique(
        self: &Arc<Self>,
        key: &str,
        owner: &str,
        lease: Duration,
    ) -> Result<bool> {
        let sent_at = Instant::now();
        let released = self.undo_hold(Kind::Plain, key, owner, true, self.give_back());
        if released.as_ref().is_err_and(Error::is_transient) {
            self.orphaned(Orphan::lost(Kind::Plain, key, owner, lease, None, sent_at));
        }
        Ok(released? != Released::NotHeld)
    }
}
