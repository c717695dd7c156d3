//! A release of the plain lock in-process ([`Handover`]): when the holder
//! releases its last hold and a thread of this client is queued, the
//! release script hands the lock straight to that thread (one round trip:
//! the owner field is replaced and the lease set for the new owner), unless
//! other processes wait for it too — then a client keeps the lock for at
//! most [`HANDOFFS_WHILE_OTHERS_WAIT`] handoffs in a row before the release
//! grants it to the first client waiting in line (or, for other libraries'
//! waiters, publishes it). Whether others wait is read inside the script
//! (the line, and `PUBSUB NUMSUB` of the unlock channel, which leasehold's
//! waiters hear only while another library holds the lock), so the decision
//! and the handoff are one atomic step.
//!
//! When the lock is not handed over (released publicly, lost, or the
//! release failed), the first queued thread becomes the representative and
//! tries Redis itself, waking on pub/sub like any other waiter.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::slot::{slot_of, Phase, WaitState, Waiter};
use super::{Held, Ledger, Removed};
use crate::protocol::Successor;
use crate::renewal::LeaseState;

/// Consecutive in-process handoffs allowed while other clients wait for the
/// same lock; then the lock is released publicly and the queued thread here
/// lets the others take it first. Keeps one busy process from keeping a lock
/// for itself while waiters elsewhere starve.
pub(crate) const HANDOFFS_WHILE_OTHERS_WAIT: u32 = 2;

/// After a release that went public because other clients waited, the
/// thread queued here lets them take the lock first: it waits for the next
/// unlock message (someone else's release) before it tries, at most this long
/// (in case those waiters gave up meanwhile).
pub(crate) const YIELD_WAIT: Duration = Duration::from_millis(10);

/// Consecutive in-process handoffs allowed when Redis sees no other waiter:
/// a bound for waiters Redis cannot see (e.g. polling clients of another
/// library), which still get a chance every this many turns.
pub(crate) const HANDOFFS_MAX: u32 = 64;

/// How a release ended, for [`Handover::finish`].
pub(crate) enum Outcome {
    /// The lock passed to the successor; its lease counts from this instant;
    /// the token minted for it, if it asked for one.
    HandedOver(Instant, Option<u64>),
    /// Released publicly while other clients waited for it.
    FreedForOthers,
    /// Anything else: freed, still held by other holds, not ours.
    Other,
}

impl Ledger {
    /// Starts releasing one hold of `owner` on plain lock `key` (a guard of
    /// `generation`; `renewed`: on the shared lease). When it was the last
    /// hold here and a thread is queued, the returned handover names it.
    pub(crate) fn release<'a>(
        &'a self,
        key: &'a str,
        owner: &str,
        generation: u64,
        state: &Arc<LeaseState>,
        renewed: bool,
    ) -> Handover<'a> {
        // Finished at once (nothing to report) unless it goes on below.
        let mut handover = Handover {
            locks: self,
            key,
            next: None,
            force: false,
            own_subscriptions: 0,
            messages_before: 0,
            // Counted out here (taken over, or nothing of the owner's
            // left): its shared lease goes on being renewed for the owner's
            // other guards, alive with it in Redis.
            removed: Removed {
                stop_renewal: false,
                ..Removed::STALE
            },
            finished: true,
        };
        let mut keys = self.keys.lock();
        let Some(entry) = keys.get_mut(key) else {
            return handover;
        };
        if entry.line.as_ref().is_none_or(|slot| slot.active != owner) {
            return handover;
        }
        let removed = entry.remove(owner, generation, state, renewed);
        handover.removed = Removed {
            last: false,
            ..removed
        };
        let Some(slot) = entry.line.as_mut() else {
            return handover;
        };
        if !removed.last || slot.phase == Phase::Attempting {
            return handover;
        }
        (handover.removed.last, handover.finished) = (true, false);
        if slot.streak >= HANDOFFS_MAX {
            // Release publicly; `finish` promotes the first in the queue.
            slot.phase = Phase::Releasing;
            return handover;
        }
        if let Some(next) = slot.queue.pop_front() {
            next.set(WaitState::Handing);
            slot.pass_to(&next.owner, Phase::Handing);
            handover.force = slot.streak < HANDOFFS_WHILE_OTHERS_WAIT;
            if let Some(sub) = &slot.sub {
                handover.own_subscriptions = u32::from(sub.confirmed());
                handover.messages_before = sub.messages();
            }
            handover.next = Some(next);
        } else {
            slot.phase = Phase::Releasing;
        }
        handover
    }
}

/// A release in progress; [`finish`](Self::finish) reports what Redis did.
/// Dropped unfinished (an error), the next queued thread is promoted.
pub(crate) struct Handover<'a> {
    locks: &'a Ledger,
    key: &'a str,
    next: Option<Arc<Waiter>>,
    force: bool,
    own_subscriptions: u32,
    /// Unlock messages our subscription had seen before the release.
    messages_before: u64,
    /// What the guard's going changed: whether this releases the owner's
    /// last hold in this client (`last`: no other guard of the owner is alive
    /// here, and none is being taken), whether renewal of its shared lease
    /// stops, what Redis keeps for its remaining guards.
    pub(crate) removed: Removed,
    finished: bool,
}

impl Handover<'_> {
    /// The queued thread the lock may go to directly.
    pub(crate) fn successor(&self) -> Option<Successor<'_>> {
        self.next.as_ref().map(|w| Successor {
            owner: &w.owner,
            lease: w.lease,
            force: self.force,
            fenced: w.fenced,
        })
    }

    /// What Redis did with the release. Unless the lock was handed over,
    /// the next queued thread tries Redis itself (after the other clients
    /// woken by this release, when there were some).
    ///
    /// Returns the owner of a waiter the lock was handed to in
    /// Redis after it had given up (its deadline, a task's dropped future):
    /// the caller, who knows the script ran, undoes that hold.
    pub(crate) fn finish(mut self, outcome: Outcome) -> Option<String> {
        if self.finished {
            return None;
        }
        self.finished = true;
        self.complete(outcome)
    }

    fn complete(&mut self, outcome: Outcome) -> Option<String> {
        let mut keys = self.locks.keys.lock();
        let phase = self
            .next
            .as_ref()
            .map_or(Phase::Releasing, |_| Phase::Handing);
        if let Some((slot, _)) = slot_of(&mut keys, self.key) {
            slot.end(phase);
        }
        match (self.next.take(), outcome) {
            (Some(next), Outcome::HandedOver(at, fence)) => {
                if next.set(WaitState::Granted(at, fence)) {
                    if let Some((slot, holds)) = slot_of(&mut keys, self.key) {
                        // The hold is the successor's now; it takes up its
                        // lease when it wakes (`take_up`).
                        slot.streak += 1;
                        holds.retain(|h| h.field != next.owner);
                        let mut held = Held::new(&next.owner);
                        held.count = 1;
                        held.fence = fence;
                        holds.push(held);
                    }
                    self.locks.handoffs.fetch_add(1, Ordering::Relaxed);
                } else {
                    // It gave up meanwhile: the lock is its owner's in Redis
                    // (the releaser undoes that); nobody holds it here.
                    let dropped = self.locks.promote(&mut keys, self.key);
                    drop(keys);
                    drop(dropped);
                    return Some(next.owner.clone());
                }
            }
            (Some(next), outcome) => {
                // Not handed over: the popped waiter tries Redis first.
                let mut epoch = 0;
                if let Some((slot, _)) = slot_of(&mut keys, self.key) {
                    slot.streak = 0;
                    slot.phase = Phase::Attempting;
                    epoch = slot.epoch;
                }
                // Our own subscription receives our own unlock message.
                let messages = self.messages_before + u64::from(self.own_subscriptions);
                let yield_to = matches!(outcome, Outcome::FreedForOthers).then_some(messages);
                if !next.set(WaitState::Promoted(epoch, yield_to)) {
                    // It gave up meanwhile: the next one tries instead.
                    if let Some((slot, _)) = slot_of(&mut keys, self.key) {
                        slot.end(Phase::Attempting);
                    }
                    let dropped = self.locks.promote(&mut keys, self.key);
                    drop(keys);
                    drop(dropped);
                }
            }
            (None, _) => {
                let dropped = self.locks.promote(&mut keys, self.key);
                drop(keys);
                drop(dropped);
            }
        }
        None
    }
}

impl Drop for Handover<'_> {
    fn drop(&mut self) {
        if !self.finished {
            self.finished = true;
            let _ = self.complete(Outcome::Other);
        }
    }
}
