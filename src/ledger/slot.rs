//! The in-process queue's state for one plain lock key ([`Slot`]): who is
//! the active owner, in which [`Phase`], and who waits behind it — every
//! change of hands through [`Slot::pass_to`]. The waits (`queue`) and the
//! releases (`handover`) both move it only through the methods here.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{Entry, Held};
use crate::notify::Subscription;
use crate::park::Signal;
use crate::sync::atomic::{AtomicU64, Ordering};
use crate::sync::Mutex;

/// What the active owner is doing with Redis right now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Phase {
    /// Nothing in flight: it holds the lock here, or nobody does.
    Settled,
    /// It is running an acquire attempt.
    Attempting,
    /// Its last hold is being released (the script is in flight): the same
    /// owner must not start a fresh hold meanwhile, or Redis could run the
    /// new hold before the release deletes the field.
    Releasing,
    /// A release is handing the lock to it, the popped waiter (the script
    /// is in flight). It may give up meanwhile (its deadline): its owner
    /// then queues like anyone else until the handover is resolved, instead
    /// of re-entering a hold that may never be its own.
    Handing,
}

pub(super) struct Slot {
    /// The owner holding the lock (a guard of it in the ledger) or trying
    /// to get it.
    pub(super) active: String,
    /// Bumped whenever `active` changes hands, so that a turn that lost its
    /// place (taken over meanwhile) cannot update the new owner's counts.
    pub(super) epoch: u64,
    pub(super) phase: Phase,
    /// In-process handoffs in a row (reset by a public release).
    pub(super) streak: u32,
    pub(super) queue: VecDeque<Arc<Waiter>>,
    /// The client's subscription to the unlock channel, kept while the slot
    /// lives so that handoffs cost no SUBSCRIBE/UNSUBSCRIBE churn.
    pub(super) sub: Option<Subscription>,
}

impl Slot {
    /// A slot whose first owner, `owner`, is attempting.
    pub(super) fn new(owner: &str) -> Self {
        Slot {
            active: owner.to_owned(),
            epoch: 0,
            phase: Phase::Attempting,
            streak: 0,
            queue: VecDeque::new(),
            sub: None,
        }
    }

    /// The one change of hands: `owner` is the active owner now, in
    /// `phase`; the new epoch.
    pub(super) fn pass_to(&mut self, owner: &str, phase: Phase) -> u64 {
        owner.clone_into(&mut self.active);
        self.epoch += 1;
        self.phase = phase;
        self.epoch
    }

    /// The active owner's hold ran out while it kept its guards (`holds`:
    /// the slot's entry's): they count for nothing here any more (its
    /// release changes nothing; Redis decides), and `owner` tries Redis.
    pub(super) fn take_over(&mut self, holds: &mut Vec<Held>, owner: &str) -> u64 {
        holds.retain(|h| h.field != self.active);
        self.streak = 0;
        self.pass_to(owner, Phase::Attempting)
    }

    /// Ends `phase` (nothing when the slot moved on to another meanwhile).
    pub(super) fn end(&mut self, phase: Phase) {
        if self.phase == phase {
            self.phase = Phase::Settled;
        }
    }

    /// Nothing held, tried, released or queued here any more (`entry`: the
    /// slot's ledger entry).
    pub(super) fn idle(&self, entry: &Entry) -> bool {
        entry.count(&self.active) == 0 && self.phase == Phase::Settled && self.queue.is_empty()
    }

    /// Whether `waiter` is first in the queue.
    pub(super) fn first(&self, waiter: &Arc<Waiter>) -> bool {
        self.queue.front().is_some_and(|w| Arc::ptr_eq(w, waiter))
    }

    /// Makes the first in the queue look again (a new lease to watch, or
    /// first now).
    pub(super) fn nudge_first(&self) {
        if let Some(first) = self.queue.front() {
            let _state = first.state.lock();
            first.nudges.fetch_add(1, Ordering::SeqCst);
            first.cv.notify_one();
        }
    }

    /// Takes `waiter` out of the queue; whether it was in it.
    pub(super) fn remove(&mut self, waiter: &Arc<Waiter>) -> bool {
        let before = self.queue.len();
        self.queue.retain(|w| !Arc::ptr_eq(w, waiter));
        self.nudge_first();
        self.queue.len() < before
    }
}

/// The slot of `key` in `keys` with its ledger entry's holds.
pub(super) fn slot_of<'e>(
    keys: &'e mut HashMap<String, Entry>,
    key: &str,
) -> Option<(&'e mut Slot, &'e mut Vec<Held>)> {
    let entry = keys.get_mut(key)?;
    let Entry { holds, line } = entry;
    Some((line.as_mut()?, holds))
}

/// Whether the active owner `active` holds guards here on a lease that is
/// no longer held (ran out, or lost).
pub(super) fn holder_expired(holds: &[Held], active: &str) -> bool {
    holds.iter().any(|h| {
        h.field == active && h.count > 0 && h.latest.as_ref().is_some_and(|l| !l.is_held())
    })
}

/// A thread queued behind the active owner.
pub(super) struct Waiter {
    pub(super) owner: String,
    pub(super) lease: Duration,
    pub(super) fenced: bool,
    pub(super) state: Mutex<WaitState>,
    pub(super) cv: Signal,
    /// Bumped (under `state`) to make the waiter look again without a new
    /// state: a new lease to watch, first in the queue now.
    pub(super) nudges: AtomicU64,
}

#[derive(Clone, Copy)]
pub(super) enum WaitState {
    Queued,
    /// Popped by a releasing holder that is running the handoff script: the
    /// waiter waits for the outcome, as the lock may already be its own —
    /// until its deadline.
    Handing,
    /// It gave up while being handed the lock (its deadline passed): what
    /// the handoff may have given it in Redis is its caller's to undo.
    Abandoned,
    /// The lock is ours; the lease counts from this instant; the token
    /// minted for us when we asked for one.
    Granted(Instant, Option<u64>),
    /// We are the active owner now (of the slot's `epoch`) and must try Redis
    /// ourselves — first letting other clients go when they were woken by
    /// our release (`Some`: wait until the unlock channel has delivered more
    /// than that many messages, ours included, before trying).
    Promoted(u64, Option<u64>),
}

impl Waiter {
    pub(super) fn new(owner: &str, lease: Duration, fenced: bool) -> Self {
        Waiter {
            owner: owner.to_owned(),
            lease,
            fenced,
            state: Mutex::new(WaitState::Queued),
            cv: Signal::new(),
            nudges: AtomicU64::new(0),
        }
    }

    /// Moves the waiter to `state`; false when it had given up meanwhile
    /// ([`WaitState::Abandoned`]), and nothing changed.
    pub(super) fn set(&self, state: WaitState) -> bool {
        let mut current = self.state.lock();
        if matches!(*current, WaitState::Abandoned) {
            return false;
        }
        *current = state;
        self.cv.notify_one();
        true
    }
}
