//! The plain lock's in-process queue, part of the ledger: one thread per
//! client and lock name talks to Redis at a time.
//!
//! For each plain lock key in use the ledger's entry keeps a slot. The
//! thread that holds the lock — or, while nobody here holds it, the one
//! thread trying to get it (the *representative*) — is the slot's active
//! owner; other threads of the client that want the same name queue here,
//! in arrival order, and send nothing to Redis while they wait. How many
//! guards the active owner has, its token and its latest lease are the
//! ledger's (the entry's holds of that owner). A queued thread leaves at its
//! deadline; the first one also watches the holder's lease and takes over
//! when it ran out. How a release passes the lock on is `handover`.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::slot::{holder_expired, slot_of, Phase, Slot, WaitState, Waiter};
use super::{Added, Entry, Ledger, NewHold};
use crate::notify::Subscription;
use crate::options::Cancel;
use crate::park::Park;
use crate::renewal::LeaseState;

/// What [`Ledger::enter`] decided.
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

impl Ledger {
    /// Takes a place for `owner` on plain lock `key`: the active owner's turn
    /// at once (free slot, or a reentrant hold), or a place in the queue,
    /// waiting until handed the lock, promoted, or `deadline`. A task's wait
    /// dropped while queued leaves the queue; if a release had handed it
    /// the lock meanwhile, the hold goes to the next in the queue here, and
    /// `undo` (made by `forsaken`) undoes it in Redis.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn enter<'a>(
        &'a self,
        park: Park,
        key: &str,
        owner: &str,
        lease: Duration,
        fenced: bool,
        deadline: Option<Instant>,
        cancel: Option<&Cancel>,
        forsaken: impl FnOnce() -> Undo,
    ) -> Enter<'a> {
        // Made only if a queued wait is dropped.
        let waiter = {
            let mut keys = self.keys.lock();
            let entry = keys.entry(key.to_owned()).or_default();
            let (count, fence) = entry.held(owner).map_or((0, None), |h| (h.count, h.fence));
            let Some(slot) = entry.line.as_mut() else {
                entry.line = Some(Slot::new(owner));
                return Enter::Turn(Turn::new(self, key, 0, count, false));
            };
            if slot.active == owner && !matches!(slot.phase, Phase::Releasing | Phase::Handing) {
                // Reentrant, or our own guard is being released elsewhere
                // (not the last: a last one's `Releasing` queues us). A
                // release of the owner's begun while this turn is on is
                // not supported: see `ledger/loom.rs`, the ignored model.
                slot.phase = Phase::Attempting;
                let mut turn = Turn::new(self, key, slot.epoch, count, true);
                turn.fence = if count == 0 { None } else { fence };
                return Enter::Turn(turn);
            }
            if slot.queue.is_empty()
                && slot.phase == Phase::Settled
                && holder_expired(&entry.holds, &slot.active)
            {
                // The holder's lease ran out while it kept its guard (an
                // explicit lease, a lost one): nobody queues behind it —
                // take the slot over now; Redis decides.
                let epoch = slot.take_over(&mut entry.holds, owner);
                return Enter::Turn(Turn::new(self, key, epoch, 0, true));
            }
            if deadline.is_some_and(|d| d <= Instant::now()) {
                return Enter::TimedOut;
            }
            let waiter = Arc::new(Waiter::new(owner, lease, fenced));
            slot.queue.push_back(Arc::clone(&waiter));
            waiter
        };
        let mut queued = Queued {
            locks: self,
            key,
            waiter: &waiter,
            forsaken: Some(forsaken),
            done: false,
        };
        self.queued.fetch_add(1, Ordering::Relaxed);
        // A cancel wakes the wait at once (under the waiter's mutex, which
        // its wait looks at the handle under).
        let _on_cancel = cancel.map(|c| {
            let w = Arc::clone(&waiter);
            c.on_cancel(Arc::new(move || {
                let _state = w.state.lock();
                w.cv.notify_all();
            }))
        });
        // (The queue's wait is written out here, not in a function of its
        // own: a waiting task's future is smaller for it.)
        let waiter = &waiter;
        let entered = loop {
            // Nudges from here on are news: read before what they announce
            // (a new first in the queue, a new lease) is looked at.
            let seen = waiter.nudges.load(Ordering::SeqCst);
            // The first in the queue also watches the holder's lease.
            let lease_end = self.holder_lease_end(key, waiter);
            let due = [deadline, lease_end].into_iter().flatten().min();
            let cancelled = || cancel.is_some_and(Cancel::is_cancelled);
            let woke = waiter
                .cv
                .wait(park, &waiter.state, due, |state| match *state {
                    // An outcome first, cancelled or not: a waiter popped
                    // meanwhile must see it (or it would wait for nothing).
                    WaitState::Queued | WaitState::Handing
                        if waiter.nudges.load(Ordering::SeqCst) == seen =>
                    {
                        cancelled().then_some(None)
                    }
                    state => Some(Some(state)),
                })
                .await;
            match woke.flatten() {
                Some(WaitState::Granted(at, fence)) => break Enter::Granted(at, fence),
                Some(WaitState::Promoted(epoch, yield_to)) => {
                    let mut turn = Turn::new(self, key, epoch, 0, true);
                    turn.yield_to = yield_to;
                    break Enter::Turn(turn);
                }
                Some(WaitState::Abandoned) => break Enter::Abandoned,
                // Nudged: look at the lease again.
                Some(WaitState::Queued | WaitState::Handing) if !cancelled() => continue,
                _ => {}
            }
            let cancelled = cancel.is_some_and(Cancel::is_cancelled);
            let given_up = cancelled || deadline.is_some_and(|d| d <= Instant::now());
            {
                let mut state = waiter.state.lock();
                match *state {
                    WaitState::Handing if given_up => {
                        *state = WaitState::Abandoned;
                        break Enter::Abandoned;
                    }
                    WaitState::Queued => {}
                    _ => continue, // the outcome came meanwhile
                }
            }
            if !cancelled && due.is_none_or(|d| d > Instant::now()) {
                continue; // woken early, nothing else
            }
            if given_up {
                if slot_of(&mut self.keys.lock(), key).is_some_and(|(s, _)| s.remove(waiter)) {
                    break Enter::TimedOut;
                }
                // Popped meanwhile: the releaser's outcome decides.
            } else if let Some(epoch) = self.take_over(key, waiter) {
                break Enter::Turn(Turn::new(self, key, epoch, 0, true));
            }
        };
        queued.done = true;
        entered
    }

    /// A task's wait dropped while `waiter` was queued: leaves the queue —
    /// or, popped already, gives up what the release did for it: a hand-over
    /// in flight is abandoned, a hold handed over goes to the next waiter,
    /// a promotion is passed on. `Some` when the lock may be its owner's in
    /// Redis (to undo there; `true`: the hand-over is still on its way).
    fn forsake(&self, key: &str, waiter: &Arc<Waiter>) -> Option<bool> {
        let mut keys = self.keys.lock();
        let (slot, holds) = slot_of(&mut keys, key)?;
        if slot.remove(waiter) {
            return None;
        }
        let mut state = waiter.state.lock();
        match std::mem::replace(&mut *state, WaitState::Abandoned) {
            // The release's outcome finds it abandoned (see `Handover`).
            WaitState::Handing => Some(true),
            WaitState::Granted(..) => {
                drop(state);
                holds.retain(|h| h.field != waiter.owner);
                let dropped = self.promote(&mut keys, key);
                drop(keys);
                drop(dropped);
                Some(false)
            }
            WaitState::Promoted(epoch, _) => {
                drop(state);
                drop(keys);
                drop(Turn::new(self, key, epoch, 0, true));
                None
            }
            WaitState::Queued | WaitState::Abandoned => None,
        }
    }

    /// When `waiter` is first in the queue: the instant the holder's lease
    /// ends as far as this client knows (now, if already lost).
    fn holder_lease_end(&self, key: &str, waiter: &Arc<Waiter>) -> Option<Instant> {
        let keys = self.keys.lock();
        let entry = keys.get(key)?;
        let slot = entry.line.as_ref()?;
        if !slot.first(waiter) {
            return None;
        }
        let held = entry.held(&slot.active).filter(|h| h.count > 0)?;
        let lease = held.latest.as_ref()?;
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
        let mut keys = self.keys.lock();
        let (slot, holds) = slot_of(&mut keys, key)?;
        if !slot.first(waiter) || !holder_expired(holds, &slot.active) {
            return None;
        }
        slot.queue.pop_front();
        Some(slot.take_over(holds, &waiter.owner))
    }

    /// Takes up the hold a release handed `owner` in-process
    /// ([`Enter::Granted`]): its lease (see [`Entry::add`]; the token is the
    /// handover's), watched by the first queued thread.
    pub(crate) fn take_up(&self, key: &str, owner: &str, new: NewHold<'_>) -> Added {
        let mut keys = self.keys.lock();
        let entry = keys.entry(key.to_owned()).or_default();
        let renewed = new.renewed;
        let added = match entry.holds.iter_mut().find(|h| h.field == owner) {
            // The handover counted the hold; its lease is new.
            Some(h) if h.count == 1 && h.latest.is_none() => {
                let state = (new.new_state)();
                if renewed {
                    h.shared = Some(Arc::clone(&state));
                    h.renewing = 1;
                }
                h.track(&state, renewed);
                Added {
                    state,
                    fence: h.fence,
                    generation: h.generation,
                    replaced: None,
                }
            }
            _ => entry.add(
                owner,
                NewHold {
                    minted: None,
                    ..new
                },
            ),
        };
        if let Some(slot) = &entry.line {
            slot.nudge_first(); // to watch the new lease
        }
        added
    }

    /// The active owner's attempt ended: holding (`acquired`: its hold, as
    /// for [`Entry::add`]) or given up. Returns the hold's lease and token
    /// — counted in the ledger unless the slot was taken over meanwhile.
    fn end_turn(
        &self,
        key: &str,
        epoch: u64,
        acquired: Option<NewHold<'_>>,
        sub: Option<Subscription>,
    ) -> Option<Added> {
        let mut dropped = sub;
        let mut added = None;
        {
            let mut keys = self.keys.lock();
            let slot = keys.get_mut(key).and_then(|e| e.line.as_mut());
            let Some(slot) = slot.filter(|slot| slot.epoch == epoch) else {
                // Gone, or taken over while we tried: someone else's now.
                return acquired.map(NewHold::uncounted);
            };
            slot.end(Phase::Attempting);
            if slot.sub.is_none() {
                slot.sub = dropped.take();
            }
            let active = slot.active.clone();
            let entry = keys.get_mut(key)?; // there: its slot is
            let holding = acquired.is_some();
            if let Some(a) = acquired {
                added = Some(entry.add(&active, a));
                if let Some(slot) = &entry.line {
                    slot.nudge_first(); // to watch the new lease
                }
            }
            if !holding && entry.count(&active) == 0 {
                dropped = dropped.or(self.promote(&mut keys, key));
            }
        }
        drop(dropped); // may write UNSUBSCRIBE: outside the table lock
        added
    }

    /// Nobody here holds `key` any more: the first queued thread becomes the
    /// active owner, or the slot goes (returning its subscription to drop).
    pub(super) fn promote(
        &self,
        keys: &mut HashMap<String, Entry>,
        key: &str,
    ) -> Option<Subscription> {
        let entry = keys.get_mut(key)?;
        let slot = entry.line.as_mut()?;
        slot.streak = 0;
        if slot.phase == Phase::Attempting {
            return None; // that turn decides when it ends
        }
        match slot.queue.pop_front() {
            Some(next) => {
                let epoch = slot.pass_to(&next.owner, Phase::Attempting);
                next.set(WaitState::Promoted(epoch, None));
                None
            }
            None if entry.line.as_ref().is_some_and(|l| l.idle(entry)) => {
                let sub = entry.line.take().and_then(|l| l.sub);
                if entry.holds.is_empty() {
                    keys.remove(key);
                }
                sub
            }
            None => None,
        }
    }
}

/// What undoes a hold in Redis that a dropped task's wait was handed
/// (`true`: the hand-over's script may still be on its way).
pub(crate) type Undo = Box<dyn FnOnce(bool) + Send>;

/// A place in the queue while its wait is pending: dropped before the wait
/// ended (a task's future dropped), it forsakes the place.
struct Queued<'q, F: FnOnce() -> Undo> {
    locks: &'q Ledger,
    key: &'q str,
    waiter: &'q Arc<Waiter>,
    forsaken: Option<F>,
    done: bool,
}

impl<F: FnOnce() -> Undo> Drop for Queued<'_, F> {
    fn drop(&mut self) {
        self.locks.queued.fetch_sub(1, Ordering::Relaxed);
        if self.done {
            return;
        }
        if let Some(in_flight) = self.locks.forsake(self.key, self.waiter) {
            if let Some(forsaken) = self.forsaken.take() {
                forsaken()(in_flight);
            }
        }
    }
}

impl NewHold<'_> {
    /// A hold taken after the slot was taken over: its lease of its own,
    /// counted nowhere (its release changes nothing here).
    fn uncounted(self) -> Added {
        Added {
            state: (self.new_state)(),
            fence: self.minted,
            generation: u64::MAX,
            replaced: None,
        }
    }
}

/// The active owner's turn at Redis; dropping it without
/// [`acquired`](Self::acquired) passes the turn to the next queued thread.
pub(crate) struct Turn<'a> {
    locks: &'a Ledger,
    key: String,
    /// The slot's epoch when this turn began.
    epoch: u64,
    /// Guards of this owner alive here; with none, a hold Redis still shows
    /// for it is stale (a lost lease, an unconfirmed handoff) and counts as
    /// one hold.
    pub(crate) alive: u32,
    sub: Option<Subscription>,
    /// The slot may keep a subscription we have not taken yet.
    slot_sub: bool,
    /// Let other clients take the lock first (see [`YIELD_WAIT`]): the
    /// unlock messages to wait past (see [`WaitState::Promoted`]).
    pub(crate) yield_to: Option<u64>,
    /// The token of this owner's live holds, for a reentrant fenced hold.
    pub(crate) fence: Option<u64>,
    done: bool,
}

impl<'a> Turn<'a> {
    fn new(locks: &'a Ledger, key: &str, epoch: u64, alive: u32, slot_sub: bool) -> Self {
        Turn {
            locks,
            key: key.to_owned(),
            epoch,
            alive,
            sub: None,
            slot_sub,
            yield_to: None,
            fence: None,
            done: false,
        }
    }

    /// Takes the subscription the slot keeps, if any (already confirmed),
    /// for this turn's wait; give it back with
    /// [`keep_subscription`](Self::keep_subscription).
    pub(crate) fn take_subscription(&mut self) -> Option<Subscription> {
        if self.sub.is_none() && self.slot_sub {
            self.slot_sub = false;
            let mut keys = self.locks.keys.lock();
            self.sub = slot_of(&mut keys, &self.key).and_then(|(s, _)| s.sub.take());
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

    /// We hold the lock now (`new`): the hold's lease and token, as the
    /// ledger counts them (see [`Entry::add`]).
    pub(crate) fn acquired(mut self, new: NewHold<'_>) -> Added {
        self.done = true;
        let sub = self.sub.take();
        let added = self.locks.end_turn(&self.key, self.epoch, Some(new), sub);
        added.unwrap_or_else(unreachable_added)
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

/// What `Turn::acquired` gives when `end_turn` — which always answers for
/// an acquired hold — did not (it cannot happen): a lease already over.
fn unreachable_added() -> Added {
    Added {
        state: LeaseState::new(Instant::now()),
        fence: None,
        generation: u64::MAX,
        replaced: None,
    }
}
