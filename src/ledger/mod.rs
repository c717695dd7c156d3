//! The one ledger of holds: for every lock key this client uses, the holds
//! of each owner field — how many guards hold it here (reentrancy), the
//! fencing token of those holds, the lease state its watchdog guards share
//! with the renewal thread (and how many of them do), the lease of its
//! latest hold — and, for a plain lock, the in-process queue of this
//! client's threads: its state (`slot`), the waits in it (`queue`) and the
//! handover of a release to one of them (`handover`). Every decision that depends on "does this
//! owner hold it here" reads it here, under one lock per client: whether an
//! acquire is a first hold or a reentrant one, which token a reentrant
//! fenced hold returns, whether a release is the owner's last, when renewal
//! of a lease stops.
//!
//! A field's holds are counted per *generation*: when a watchdog lease of
//! the field was lost and a new hold of it is taken, the older guards no
//! longer count (their holds are gone in Redis; their release sends
//! nothing), and the new hold is the field's first again.

mod handover;
#[cfg(all(test, loom))]
mod loom;
mod queue;
mod slot;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use crate::protocol::Keep;
use crate::renewal::LeaseState;
use crate::sync::atomic::AtomicU64;
use crate::sync::Mutex;

pub(crate) use handover::{Handover, Outcome, YIELD_WAIT};
pub(crate) use queue::{Enter, Turn, Undo};

/// The holds of one client, by lock key.
#[derive(Default)]
pub(crate) struct Ledger {
    keys: Mutex<HashMap<String, Entry>>,
    /// Threads queued behind another thread of this client right now.
    pub(crate) queued: AtomicU64,
    /// Locks passed from one thread to another of this client by a release.
    pub(crate) handoffs: AtomicU64,
}

/// One lock key's holds here, and its in-process queue (a plain lock).
#[derive(Default)]
struct Entry {
    holds: Vec<Held>,
    /// A plain lock's in-process queue (see `queue`).
    line: Option<slot::Slot>,
}

/// The holds of one owner field on one key.
#[derive(Default)]
struct Held {
    field: String,
    /// The guards of this field alive here (of its current generation).
    count: u32,
    /// New when the field's watchdog lease was lost and a new hold was
    /// taken, and for every new `Held` of the field (see
    /// [`fresh_generation`]): guards of older generations no longer count.
    generation: u64,
    /// The fencing token of its holds, once a fenced hold minted one.
    fence: Option<u64>,
    /// The lease its watchdog guards share (registered with the renewal
    /// thread), and how many of its guards do: renewal stops when the last
    /// of them goes.
    shared: Option<Arc<LeaseState>>,
    renewing: u32,
    /// The leases of its guards with an explicit lease (each its own): what
    /// Redis must keep for the field when another guard of it goes.
    explicit: Vec<Arc<LeaseState>>,
    /// The lease of its latest hold (watched by a plain lock's first queued
    /// thread); `None` while a hold handed over in-process is being taken up.
    latest: Option<Arc<LeaseState>>,
}

/// One hold as the ledger gave it: the lease it runs on, the token of the
/// field's holds, and the generation it counts in.
pub(crate) struct Added {
    pub(crate) state: Arc<LeaseState>,
    pub(crate) fence: Option<u64>,
    pub(crate) generation: u64,
    /// A lost shared lease this hold replaced: done with (its guards count
    /// for nothing any more).
    pub(crate) replaced: Option<Arc<LeaseState>>,
}

/// What a guard's going changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Removed {
    /// It was the field's last guard here: a count Redis still shows for the
    /// owner is stale, and all of it goes.
    pub(crate) last: bool,
    /// Its renewed lease is done with: it was the last guard renewed on the
    /// field's shared lease — or the guard counted for nothing any more.
    pub(crate) stop_renewal: bool,
    /// What Redis keeps for the field's remaining guards (when not `last`).
    pub(crate) keep: Keep,
    /// A newer hold of its owner is counted here (the guard is of an
    /// earlier one: its lease ran out, another thread took the lock over
    /// and handed it back): what Redis has for the owner is that hold's,
    /// and this guard's release sends nothing.
    pub(crate) superseded: bool,
}

impl Removed {
    /// A guard that counted for nothing here any more (a lost generation,
    /// a hold taken over): it changes nothing, and its lease (lost, or
    /// replaced) is done with.
    pub(crate) const STALE: Removed = Removed {
        last: false,
        stop_renewal: true,
        keep: Keep::UNCHANGED,
        superseded: false,
    };
}

/// A new lease state for a hold (registered with the renewal thread for a
/// watchdog lease), made only when the ledger has no live one to share.
pub(crate) type NewState<'a> = &'a mut dyn FnMut() -> Arc<LeaseState>;

/// A hold an acquire took, as the ledger counts it (see [`Entry::add`]).
pub(crate) struct NewHold<'n> {
    /// On the watchdog lease (shared and renewed), not an explicit one.
    pub(crate) renewed: bool,
    /// When the lease the acquire set runs out.
    pub(crate) until: Instant,
    /// The token the acquire minted, if any.
    pub(crate) minted: Option<u64>,
    pub(crate) new_state: NewState<'n>,
}

/// A generation no hold of this process had before. A field's `Held` is
/// made anew after the last one went (its last guard gone, its hold taken
/// over by another thread or handed on), or bumped when its watchdog lease
/// was lost; a guard of an earlier one may still be alive (an explicit
/// lease that ran out), and its going must not count against the new hold
/// — ended in Redis as the owner's last, it would free the lock a live
/// guard holds.
fn fresh_generation() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

impl Held {
    fn new(field: &str) -> Self {
        Held {
            field: field.to_owned(),
            generation: fresh_generation(),
            ..Held::default()
        }
    }

    /// A new guard of the field on `state` (`renewed`: the shared lease).
    fn track(&mut self, state: &Arc<LeaseState>, renewed: bool) {
        if !renewed {
            self.explicit.push(Arc::clone(state));
        }
        self.latest = Some(Arc::clone(state));
    }

    /// What Redis must keep for the field's guards alive here: the longest
    /// lease any of them counts on — exactly that when they all have
    /// explicit leases, at least that while the shared lease is renewed
    /// (a renewal in flight may have set it later than this client knows).
    fn keep(&self) -> Keep {
        let now = Instant::now();
        let left = |s: &Arc<LeaseState>| s.valid_until().saturating_duration_since(now);
        let explicit = self.explicit.iter().map(left).max().unwrap_or_default();
        match (&self.shared, self.renewing) {
            (Some(shared), 1..) => Keep::AtLeast(explicit.max(left(shared))),
            _ => Keep::Exactly(explicit),
        }
    }
}

impl Entry {
    fn held(&self, field: &str) -> Option<&Held> {
        self.holds.iter().find(|h| h.field == field)
    }

    /// The guards of `field` alive here.
    fn count(&self, field: &str) -> u32 {
        self.held(field).map_or(0, |h| h.count)
    }

    /// Whether nothing is held or queued on the key any more.
    fn idle(&self) -> bool {
        self.holds.is_empty() && self.line.as_ref().is_none_or(|l| l.idle(self))
    }

    /// One more hold of `field`: a watchdog hold (`renewed`) shares the
    /// field's live shared lease (extended to `until`: the acquire script
    /// set it) or makes one with `new_state`; an explicit one has a lease of
    /// its own. `minted` (a first fenced hold's token) is kept for the
    /// field's later reentrant holds.
    fn add(&mut self, field: &str, new: NewHold<'_>) -> Added {
        let NewHold {
            renewed,
            until,
            minted,
            new_state,
        } = new;
        let i = self.holds.iter().position(|h| h.field == field);
        let i = i.unwrap_or_else(|| {
            self.holds.push(Held::new(field));
            self.holds.len() - 1
        });
        let h = &mut self.holds[i];
        let mut replaced = None;
        if renewed && h.shared.as_ref().is_some_and(|s| s.is_lost()) {
            // Its watchdog lease was lost: the older guards hold nothing in
            // Redis any more, and this is the field's first hold again.
            h.generation = fresh_generation();
            h.count = 0;
            h.renewing = 0;
            replaced = h.shared.take();
            h.explicit.clear();
            h.fence = None;
        }
        let state = match (&h.shared, renewed) {
            (Some(shared), true) => {
                shared.extend(until);
                Arc::clone(shared)
            }
            (None, true) => {
                let state = new_state();
                h.shared = Some(Arc::clone(&state));
                state
            }
            (_, false) => new_state(),
        };
        h.count += 1;
        h.renewing += u32::from(renewed);
        if minted.is_some() || h.count == 1 {
            h.fence = minted;
        }
        h.track(&state, renewed);
        Added {
            state,
            fence: h.fence,
            generation: h.generation,
            replaced,
        }
    }

    /// One guard of `field` (of `generation`; on `state` — `renewed`: the
    /// shared lease) goes.
    fn remove(
        &mut self,
        field: &str,
        generation: u64,
        state: &Arc<LeaseState>,
        renewed: bool,
    ) -> Removed {
        let counted = |h: &Held| h.field == field && h.generation == generation && h.count > 0;
        let Some(i) = self.holds.iter().position(counted) else {
            return Removed {
                superseded: self.held(field).is_some(),
                ..Removed::STALE
            };
        };
        let h = &mut self.holds[i];
        h.count -= 1;
        let mut stop_renewal = false;
        if renewed && h.renewing > 0 {
            h.renewing -= 1;
            stop_renewal = h.renewing == 0;
            if stop_renewal {
                h.shared = None;
            }
        }
        if !renewed {
            if let Some(j) = h.explicit.iter().position(|s| Arc::ptr_eq(s, state)) {
                h.explicit.swap_remove(j);
            }
        }
        let last = h.count == 0;
        let keep = if last { Keep::UNCHANGED } else { h.keep() };
        if last {
            self.holds.swap_remove(i);
        }
        Removed {
            last,
            stop_renewal,
            keep,
            superseded: false,
        }
    }
}

impl Ledger {
    /// How many guards of `field` hold `key` here, and the token of their
    /// holds: no guard → an acquire is the field's first hold (a count
    /// Redis still shows for it is stale).
    pub(crate) fn holds(&self, key: &str, field: &str) -> (u32, Option<u64>) {
        let keys = self.keys.lock();
        let held = keys.get(key).and_then(|e| e.held(field));
        held.map_or((0, None), |h| (h.count, h.fence))
    }

    /// Records one more hold of `field` on `key` (a kind without the
    /// in-process queue: fair, read, write; or a Redlock node's). See
    /// [`Entry::add`].
    pub(crate) fn add(&self, key: &str, field: &str, new: NewHold<'_>) -> Added {
        let mut keys = self.keys.lock();
        keys.entry(key.to_owned()).or_default().add(field, new)
    }

    /// One guard of `field` on `key` (on `state`) goes (a kind without the
    /// in-process queue). Stale guards (a lost generation) change nothing.
    pub(crate) fn remove(
        &self,
        key: &str,
        field: &str,
        generation: u64,
        state: &Arc<LeaseState>,
        renewed: bool,
    ) -> Removed {
        let mut keys = self.keys.lock();
        let Some(entry) = keys.get_mut(key) else {
            return Removed::STALE;
        };
        let removed = entry.remove(field, generation, state, renewed);
        if entry.idle() {
            keys.remove(key);
        }
        removed
    }
}
