//! In-process queueing and handoff: one thread per client and lock name talks
//! to Redis at a time.
//!
//! Every client keeps a small slot per lock name it is using. The thread that
//! holds the lock — or, while nobody here holds it, the one thread trying to
//! get it (the *representative*) — is the slot's active owner; other threads
//! of the client that want the same name queue here, in arrival order, and
//! send nothing to Redis while they wait.
//!
//! When the holder releases its last hold and a thread is queued, the release
//! script hands the lock straight to that thread (one round trip: the owner
//! field is replaced and the lease set for the new owner), unless other
//! processes wait for it too — then a client keeps the lock for at most
//! [`HANDOFFS_WHILE_OTHERS_WAIT`] handoffs in a row before the release grants
//! it to the first client waiting in line (or, for other libraries' waiters,
//! publishes it). Whether others wait is read inside the script (the line,
//! and `PUBSUB NUMSUB` of the unlock channel, which leasehold's waiters hear
//! only while another library holds the lock), so the decision and the
//! handoff are one atomic step.
//!
//! When the lock is not handed over (released publicly, lost, or the release
//! failed), the first queued thread becomes the representative and tries
//! Redis itself, waking on pub/sub like any other waiter.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::notify::Subscription;
use crate::options::Cancel;
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

/// The per-client table of lock names in use.
#[derive(Default)]
pub(crate) struct LocalLocks {
    slots: Mutex<HashMap<String, Slot>>,
    /// Threads queued behind another thread of this client right now.
    pub(crate) queued: AtomicU64,
    /// Locks passed from one thread to another of this client by a release.
    pub(crate) handoffs: AtomicU64,
}

struct Slot {
    /// The owner holding the lock (`holds > 0`) or trying to get it.
    active: String,
    /// Bumped whenever `active` changes hands, so that a turn that lost its
    /// place (taken over meanwhile) cannot update the new owner's counts.
    epoch: u64,
    /// Live guards of `active` in this client.
    holds: u32,
    /// The active owner is running an acquire attempt right now.
    attempting: bool,
    /// The active owner's last hold is being released (its script is in
    /// flight): the same owner must not start a fresh hold meanwhile, or
    /// Redis could run the new hold before the release deletes the field.
    releasing: bool,
    /// A release is handing the lock to the popped waiter `active` (its
    /// script is in flight). That waiter may give up meanwhile (its
    /// deadline): its owner then queues like anyone else until the handover
    /// is resolved, instead of re-entering a hold that may never be its own.
    handing: bool,
    /// In-process handoffs in a row (reset by a public release).
    streak: u32,
    queue: VecDeque<Arc<Waiter>>,
    /// The client's subscription to the unlock channel, kept while the slot
    /// lives so that handoffs cost no SUBSCRIBE/UNSUBSCRIBE churn.
    sub: Option<Subscription>,
    /// The lease of the latest hold of `active`, watched by the first queued
    /// thread: if it runs out (or is lost) while the holder keeps its guard,
    /// that thread stops waiting for the guard and tries Redis itself.
    lease: Option<Arc<LeaseState>>,
    /// The fencing token of the active owner's holds, once a fenced hold
    /// minted one; reentrant fenced holds return it again.
    fence: Option<u64>,
}

impl Slot {
    fn idle(&self) -> bool {
        self.holds == 0
            && !self.attempting
            && !self.releasing
            && !self.handing
            && self.queue.is_empty()
    }
}

/// A thread queued behind the active owner.
struct Waiter {
    owner: String,
    lease: Duration,
    fenced: bool,
    state: Mutex<WaitState>,
    cv: Condvar,
}

#[derive(Clone, Copy)]
enum WaitState {
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
    /// ourselves — first letting other clients go when `yield_to` says they
    /// were woken for it.
    Promoted(u64, Option<YieldTo>),
}

/// Other clients were woken by our release: wait until the unlock channel
/// has delivered more than `messages` messages (ours included) before trying.
#[derive(Clone, Copy)]
pub(crate) struct YieldTo {
    pub(crate) messages: u64,
}

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

impl Waiter {
    /// Moves the waiter to `state`; false when it had given up meanwhile
    /// ([`WaitState::Abandoned`]), and nothing changed.
    fn set(&self, state: WaitState) -> bool {
        let mut current = self.state.lock();
        if matches!(*current, WaitState::Abandoned) {
            return false;
        }
        *current = state;
        self.cv.notify_one();
        true
    }
}

/// What [`LocalLocks::enter`] decided.
pub(crate) enum Enter<'a> {
    /// We are the active owner: try Redis.
    Turn(Turn<'a>),
    /// The previous holder handed the lock to us; its lease counts from the
    /// instant given (when the handoff was sent); the fencing token minted
    /// for us, when we asked for one.
    Granted(Instant, Option<u64>),
    /// The deadline passed while another thread here had the lock.
    TimedOut,
    /// The deadline passed while a release was handing the lock to us: it
    /// may be ours in Redis now, with nobody to hold it — the caller undoes
    /// that (owner-checked, before this owner's next acquire of the key).
    Abandoned,
}

impl LocalLocks {
    /// Takes a place for `owner` on `key`: the active owner's turn at once
    /// (free slot, or a reentrant hold), or a place in the queue, waiting until
    /// handed the lock, promoted, or `deadline`.
    pub(crate) fn enter<'a>(
        &'a self,
        key: &str,
        owner: &str,
        lease: Duration,
        fenced: bool,
        deadline: Option<Instant>,
        cancel: Option<&Cancel>,
    ) -> Enter<'a> {
        let waiter = {
            let mut slots = self.slots.lock();
            let slot = match slots.get_mut(key) {
                None => {
                    slots.insert(
                        key.to_owned(),
                        Slot {
                            active: owner.to_owned(),
                            epoch: 0,
                            holds: 0,
                            attempting: true,
                            releasing: false,
                            handing: false,
                            streak: 0,
                            queue: VecDeque::new(),
                            sub: None,
                            lease: None,
                            fence: None,
                        },
                    );
                    return Enter::Turn(Turn::new(self, key, 0, true, false));
                }
                Some(slot) => slot,
            };
            if slot.active == owner && !slot.releasing && !slot.handing {
                // Reentrant, or our own guard is being released elsewhere.
                let fresh = slot.holds == 0;
                slot.attempting = true;
                let mut turn = Turn::new(self, key, slot.epoch, fresh, true);
                turn.fence = if fresh { None } else { slot.fence };
                return Enter::Turn(turn);
            }
            if deadline.is_some_and(|d| d <= Instant::now()) {
                return Enter::TimedOut;
            }
            let waiter = Arc::new(Waiter {
                owner: owner.to_owned(),
                lease,
                fenced,
                state: Mutex::new(WaitState::Queued),
                cv: Condvar::new(),
            });
            slot.queue.push_back(Arc::clone(&waiter));
            waiter
        };
        self.queued.fetch_add(1, Ordering::Relaxed);
        let entered = self.wait_in_queue(key, &waiter, deadline, cancel);
        self.queued.fetch_sub(1, Ordering::Relaxed);
        entered
    }

    fn wait_in_queue<'a>(
        &'a self,
        key: &str,
        waiter: &Arc<Waiter>,
        deadline: Option<Instant>,
        cancel: Option<&Cancel>,
    ) -> Enter<'a> {
        loop {
            // The first in the queue also watches the holder's lease.
            let lease_end = self.holder_lease_end(key, waiter);
            let due = match (deadline, lease_end) {
                (Some(d), Some(l)) => Some(d.min(l)),
                (d, l) => d.or(l),
            };
            // A cancellable wait looks at its handle every so often.
            let wake_at = match cancel {
                Some(_) => {
                    let slice = Instant::now() + Cancel::RESPONSE;
                    Some(due.map_or(slice, |d| d.min(slice)))
                }
                None => due,
            };
            let mut state = waiter.state.lock();
            let timed_out = match *state {
                WaitState::Granted(at, fence) => return Enter::Granted(at, fence),
                WaitState::Promoted(epoch, yield_to) => {
                    let mut turn = Turn::new(self, key, epoch, true, true);
                    turn.yield_to = yield_to;
                    return Enter::Turn(turn);
                }
                WaitState::Handing => {
                    let timed_out = match wake_at {
                        Some(at) => waiter.cv.wait_until(&mut state, at).timed_out(),
                        None => {
                            waiter.cv.wait(&mut state);
                            false
                        }
                    };
                    let given_up = cancel.is_some_and(Cancel::is_cancelled)
                        || deadline.is_some_and(|d| d <= Instant::now());
                    if timed_out && given_up && matches!(*state, WaitState::Handing) {
                        *state = WaitState::Abandoned;
                        return Enter::Abandoned;
                    }
                    continue;
                }
                WaitState::Abandoned => return Enter::Abandoned,
                WaitState::Queued => match wake_at {
                    Some(at) => waiter.cv.wait_until(&mut state, at).timed_out(),
                    None => {
                        waiter.cv.wait(&mut state);
                        false
                    }
                },
            };
            if !timed_out || !matches!(*state, WaitState::Queued) {
                continue;
            }
            drop(state);
            let cancelled = cancel.is_some_and(Cancel::is_cancelled);
            if !cancelled && due.is_none_or(|d| d > Instant::now()) {
                continue; // a slice ended, nothing else
            }
            if cancelled || deadline.is_some_and(|d| d <= Instant::now()) {
                if self.leave_queue(key, waiter) {
                    return Enter::TimedOut;
                }
                // Popped meanwhile: the releaser's outcome decides.
            } else if let Some(epoch) = self.take_over(key, waiter) {
                return Enter::Turn(Turn::new(self, key, epoch, true, true));
            }
        }
    }

    /// When `waiter` is first in the queue: the instant the holder's lease
    /// ends as far as this client knows (now, if already lost).
    fn holder_lease_end(&self, key: &str, waiter: &Arc<Waiter>) -> Option<Instant> {
        let slots = self.slots.lock();
        let slot = slots.get(key)?;
        if !slot.queue.front().is_some_and(|w| Arc::ptr_eq(w, waiter)) || slot.holds == 0 {
            return None;
        }
        let lease = slot.lease.as_ref()?;
        Some(if lease.is_lost() {
            Instant::now()
        } else {
            lease.valid_until()
        })
    }

    /// The holder's lease ran out while it kept its guard: the first queued
    /// thread becomes the active owner and tries Redis (which decides; the old
    /// holder's release then changes nothing here).
    fn take_over(&self, key: &str, waiter: &Arc<Waiter>) -> Option<u64> {
        let mut slots = self.slots.lock();
        let slot = slots.get_mut(key)?;
        let first = slot.queue.front().is_some_and(|w| Arc::ptr_eq(w, waiter));
        let expired = slot.holds > 0 && slot.lease.as_ref().is_some_and(|l| !l.is_held());
        if !first || !expired {
            return None;
        }
        slot.queue.pop_front();
        slot.active = waiter.owner.clone();
        slot.epoch += 1;
        slot.holds = 0;
        slot.attempting = true;
        slot.streak = 0;
        slot.lease = None;
        slot.fence = None;
        Some(slot.epoch)
    }

    /// Records the lease of a new hold (watched by the first queued thread).
    pub(crate) fn holding(
        &self,
        key: &str,
        owner: &str,
        lease: &Arc<LeaseState>,
        fence: Option<u64>,
    ) {
        let mut slots = self.slots.lock();
        if let Some(slot) = slots.get_mut(key) {
            if slot.active == owner {
                slot.lease = Some(Arc::clone(lease));
                if fence.is_some() {
                    slot.fence = fence;
                }
                if let Some(first) = slot.queue.front() {
                    first.cv.notify_one(); // to watch the new lease
                }
            }
        }
    }

    /// Removes a timed-out waiter; false if a releaser popped it first.
    fn leave_queue(&self, key: &str, waiter: &Arc<Waiter>) -> bool {
        let mut slots = self.slots.lock();
        let Some(slot) = slots.get_mut(key) else {
            return false;
        };
        let before = slot.queue.len();
        slot.queue.retain(|w| !Arc::ptr_eq(w, waiter));
        if let Some(first) = slot.queue.front() {
            first.cv.notify_one(); // it may be first now: watch the lease
        }
        slot.queue.len() < before
    }

    /// Starts releasing one hold of `owner` on `key`. When it was the last
    /// local hold and a thread is queued, the returned handover names it.
    pub(crate) fn release<'a>(&'a self, key: &'a str, owner: &str) -> Handover<'a> {
        let mut handover = Handover {
            locks: self,
            key,
            next: None,
            force: false,
            own_subscriptions: 0,
            messages_before: 0,
            last: false,
            finished: false,
        };
        let mut slots = self.slots.lock();
        let Some(slot) = slots.get_mut(key) else {
            handover.finished = true;
            return handover;
        };
        if slot.active != owner {
            handover.finished = true;
            return handover;
        }
        slot.holds = slot.holds.saturating_sub(1);
        if slot.holds == 0 {
            slot.lease = None;
            slot.fence = None;
        }
        if slot.holds > 0 || slot.attempting {
            handover.finished = true;
            return handover;
        }
        handover.last = true;
        if slot.streak >= HANDOFFS_MAX {
            // Release publicly; `finish` promotes the first in the queue.
            slot.releasing = true;
            return handover;
        }
        if let Some(next) = slot.queue.pop_front() {
            next.set(WaitState::Handing);
            slot.active = next.owner.clone();
            slot.epoch += 1;
            slot.handing = true;
            handover.force = slot.streak < HANDOFFS_WHILE_OTHERS_WAIT;
            if let Some(sub) = &slot.sub {
                handover.own_subscriptions = u32::from(sub.confirmed());
                handover.messages_before = sub.messages();
            }
            handover.next = Some(next);
        } else {
            slot.releasing = true;
        }
        handover
    }

    /// The active owner's attempt ended: holding (`acquired`) or given up.
    fn end_turn(
        &self,
        key: &str,
        epoch: u64,
        acquired: Option<(&Arc<LeaseState>, Option<u64>)>,
        sub: Option<Subscription>,
    ) {
        let mut dropped = sub;
        {
            let mut slots = self.slots.lock();
            let Some(slot) = slots.get_mut(key) else {
                return;
            };
            if slot.epoch != epoch {
                // Taken over while we tried: the slot is someone else's now.
                return;
            }
            slot.attempting = false;
            if let Some((lease, fence)) = acquired {
                slot.holds += 1;
                slot.lease = Some(Arc::clone(lease));
                if fence.is_some() {
                    slot.fence = fence;
                }
                if let Some(first) = slot.queue.front() {
                    first.cv.notify_one(); // to watch the new lease
                }
            }
            if slot.sub.is_none() {
                slot.sub = dropped.take();
            }
            if acquired.is_none() && slot.holds == 0 {
                dropped = dropped.or(self.promote(&mut slots, key));
            }
        }
        drop(dropped); // may write UNSUBSCRIBE: outside the table lock
    }

    /// Nobody here holds `key` any more: the first queued thread becomes the
    /// active owner, or the slot goes (returning its subscription to drop).
    fn promote(&self, slots: &mut HashMap<String, Slot>, key: &str) -> Option<Subscription> {
        let slot = slots.get_mut(key)?;
        slot.streak = 0;
        if slot.attempting {
            return None; // that turn decides when it ends
        }
        match slot.queue.pop_front() {
            Some(next) => {
                slot.active = next.owner.clone();
                slot.epoch += 1;
                slot.attempting = true;
                next.set(WaitState::Promoted(slot.epoch, None));
                None
            }
            None if slot.idle() => slots.remove(key).and_then(|s| s.sub),
            None => None,
        }
    }

    /// Takes the slot's subscription for the active owner's wait.
    fn take_subscription(&self, key: &str) -> Option<Subscription> {
        self.slots.lock().get_mut(key).and_then(|s| s.sub.take())
    }
}

/// The active owner's turn at Redis; dropping it without
/// [`acquired`](Self::acquired) passes the turn to the next queued thread.
pub(crate) struct Turn<'a> {
    locks: &'a LocalLocks,
    key: String,
    /// The slot's epoch when this turn began.
    epoch: u64,
    fresh: bool,
    sub: Option<Subscription>,
    /// The slot may keep a subscription we have not taken yet.
    slot_sub: bool,
    /// Let other clients take the lock first (see [`YIELD_WAIT`]).
    pub(crate) yield_to: Option<YieldTo>,
    /// The token of this owner's live holds, for a reentrant fenced hold.
    fence: Option<u64>,
    done: bool,
}

impl<'a> Turn<'a> {
    fn new(locks: &'a LocalLocks, key: &str, epoch: u64, fresh: bool, slot_sub: bool) -> Self {
        Turn {
            locks,
            key: key.to_owned(),
            epoch,
            fresh,
            sub: None,
            slot_sub,
            yield_to: None,
            fence: None,
            done: false,
        }
    }

    /// No guard of this owner is alive here: a hold Redis still shows for it
    /// is stale (a lost lease, an unconfirmed handoff) and counts as one hold.
    pub(crate) fn fresh(&self) -> bool {
        self.fresh
    }

    /// Takes the subscription the slot keeps, if any (already confirmed),
    /// for this turn's wait; give it back with
    /// [`keep_subscription`](Self::keep_subscription).
    pub(crate) fn take_subscription(&mut self) -> Option<Subscription> {
        if self.sub.is_none() && self.slot_sub {
            self.slot_sub = false;
            self.sub = self.locks.take_subscription(&self.key);
        }
        self.sub.take()
    }

    /// Keeps `sub` as this turn's subscription; the slot keeps it when the
    /// turn ends.
    pub(crate) fn keep_subscription(&mut self, sub: Option<Subscription>) {
        if sub.is_some() {
            self.sub = sub;
        }
    }

    /// We hold the lock now, with `lease` (and `fence`, if fenced).
    pub(crate) fn acquired(mut self, lease: &Arc<LeaseState>, fence: Option<u64>) {
        self.done = true;
        self.locks
            .end_turn(&self.key, self.epoch, Some((lease, fence)), self.sub.take());
    }

    /// The fencing token this owner's holds already have (reentry), if any.
    pub(crate) fn fence(&self) -> Option<u64> {
        self.fence
    }
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.locks
                .end_turn(&self.key, self.epoch, None, self.sub.take());
        }
    }
}

/// A release in progress; [`finish`](Self::finish) reports what Redis did.
/// Dropped unfinished (an error), the next queued thread is promoted.
pub(crate) struct Handover<'a> {
    locks: &'a LocalLocks,
    key: &'a str,
    next: Option<Arc<Waiter>>,
    force: bool,
    own_subscriptions: u32,
    /// Unlock messages our subscription had seen before the release.
    messages_before: u64,
    /// No other guard of the owner is alive here (and none is being taken).
    last: bool,
    finished: bool,
}

impl Handover<'_> {
    /// Whether this releases the owner's last hold in this client.
    pub(crate) fn last(&self) -> bool {
        self.last
    }

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
    pub(crate) fn finish(mut self, outcome: Outcome) {
        if !self.finished {
            self.finished = true;
            self.complete(outcome);
        }
    }

    fn complete(&mut self, outcome: Outcome) {
        let mut slots = self.locks.slots.lock();
        if self.next.is_some() {
            if let Some(slot) = slots.get_mut(self.key) {
                slot.handing = false;
            }
        }
        match (self.next.take(), outcome) {
            (Some(next), Outcome::HandedOver(at, fence)) => {
                if next.set(WaitState::Granted(at, fence)) {
                    if let Some(slot) = slots.get_mut(self.key) {
                        slot.holds = 1;
                        slot.streak += 1;
                    }
                    self.locks.handoffs.fetch_add(1, Ordering::Relaxed);
                } else {
                    // It gave up meanwhile: the lock is its owner's in Redis
                    // (its caller undoes that); nobody holds it here.
                    let dropped = self.locks.promote(&mut slots, self.key);
                    drop(slots);
                    drop(dropped);
                }
            }
            (Some(next), outcome) => {
                // Not handed over: the popped waiter tries Redis first.
                let mut epoch = 0;
                if let Some(slot) = slots.get_mut(self.key) {
                    slot.streak = 0;
                    slot.attempting = true;
                    epoch = slot.epoch;
                }
                let yield_to = matches!(outcome, Outcome::FreedForOthers).then_some(YieldTo {
                    // Our own subscription receives our own unlock message.
                    messages: self.messages_before + u64::from(self.own_subscriptions),
                });
                if !next.set(WaitState::Promoted(epoch, yield_to)) {
                    // It gave up meanwhile: the next one tries instead.
                    if let Some(slot) = slots.get_mut(self.key) {
                        slot.attempting = false;
                    }
                    let dropped = self.locks.promote(&mut slots, self.key);
                    drop(slots);
                    drop(dropped);
                }
            }
            (None, _) => {
                if let Some(slot) = slots.get_mut(self.key) {
                    slot.releasing = false;
                }
                let dropped = self.locks.promote(&mut slots, self.key);
                drop(slots);
                drop(dropped);
            }
        }
    }
}

impl Drop for Handover<'_> {
    fn drop(&mut self) {
        if !self.finished {
            self.finished = true;
            self.complete(Outcome::Other);
        }
    }
}

#[cfg(test)]
mod tests;
