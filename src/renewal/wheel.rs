//! The renewal thread's timer: a single-level hashed wheel of [`SLOTS`]
//! slots of [`TICK`] each (about 41 s). An entry due beyond one turn waits in
//! its slot until its turn comes; a bitmap of non-empty slots finds the next
//! due slot without scanning. Insert is O(1); cancel is O(1) (the entry is
//! dropped from the worker's slab, its slot forgets it when visited). 10 ms
//! precision is plenty for renewals every lease/3 — a coarse single level
//! instead of tokio's six, traded for simplicity.

use std::time::{Duration, Instant};

/// Wheel resolution.
pub(super) const TICK: Duration = Duration::from_millis(10);
/// Wheel size (a power of two; 64 words of bitmap).
const SLOTS: usize = 4096;

/// A single-level hashed timer wheel (see the module docs).
pub(super) struct Wheel {
    origin: Instant,
    /// The next tick to visit; every slot before it has been taken.
    cursor: u64,
    /// Each slot's ids, with the tick each is due at (an id of a later
    /// turn stays in its slot when the slot is visited early).
    slots: Vec<Vec<(u64, u64)>>,
    occupied: [u64; SLOTS / 64],
}

impl Wheel {
    pub(super) fn new(origin: Instant) -> Self {
        Wheel {
            origin,
            cursor: 0,
            slots: (0..SLOTS).map(|_| Vec::new()).collect(),
            occupied: [0; SLOTS / 64],
        }
    }

    fn tick_of(&self, at: Instant) -> u64 {
        let d = at.saturating_duration_since(self.origin);
        (d.as_nanos() / TICK.as_nanos()) as u64
    }

    pub(super) fn insert(&mut self, id: u64, due: Instant) {
        // Round up to the slot boundary; never into a slot already visited.
        let tick = (self.tick_of(due) + 1).max(self.cursor);
        let slot = (tick as usize) % SLOTS;
        self.slots[slot].push((id, tick));
        self.occupied[slot / 64] |= 1 << (slot % 64);
    }

    /// When the next non-empty slot comes due.
    pub(super) fn next_due(&self) -> Option<Instant> {
        let start = (self.cursor as usize) % SLOTS;
        let offset = (0..SLOTS / 64 + 1).find_map(|i| {
            let word_index = (start / 64 + i) % (SLOTS / 64);
            let mut word = self.occupied[word_index];
            if i == 0 {
                word &= !0u64 << (start % 64); // only slots at or after start
            } else if i == SLOTS / 64 {
                word &= (1u64 << (start % 64)).wrapping_sub(1); // wrapped: before start
            }
            (word != 0).then(|| {
                let slot = word_index * 64 + word.trailing_zeros() as usize;
                (slot + SLOTS - start) % SLOTS
            })
        })?;
        let tick = self.cursor + offset as u64;
        let nanos = u64::try_from(TICK.as_nanos()).unwrap_or(u64::MAX);
        Some(self.origin + Duration::from_nanos(nanos.saturating_mul(tick)))
    }

    /// Takes every id due by `horizon` — `now` or a little later, to renew
    /// early what is due soon (the caller's entries have the last word).
    /// Only the slots up to `now` count as visited: an id inserted next,
    /// due before `horizon`, still fires at its own slot (a short lease
    /// renewed again then), not at the end of the horizon; an id of a later
    /// turn stays in its slot, untouched until its turn.
    pub(super) fn take_due(&mut self, now: Instant, horizon: Instant) -> Vec<u64> {
        let until = self.tick_of(horizon.max(now));
        let mut out = Vec::new();
        // At most one full turn per call: every slot is visited once.
        let last = until.min(self.cursor + SLOTS as u64 - 1);
        for tick in self.cursor..=last {
            let slot = (tick as usize) % SLOTS;
            if self.occupied[slot / 64] & (1 << (slot % 64)) == 0 {
                continue;
            }
            self.slots[slot].retain(|&(id, due)| {
                let take = due <= until;
                if take {
                    out.push(id);
                }
                !take
            });
            if self.slots[slot].is_empty() {
                self.occupied[slot / 64] &= !(1 << (slot % 64));
            }
        }
        self.cursor = self.cursor.max(self.tick_of(now) + 1);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wheel_fires_in_order_and_parks_until_the_next_slot() {
        let t0 = Instant::now();
        let mut w = Wheel::new(t0);
        assert_eq!(w.next_due(), None);
        w.insert(1, t0 + Duration::from_millis(100));
        w.insert(2, t0 + Duration::from_millis(35));
        let next = w.next_due().unwrap();
        assert!(next >= t0 + Duration::from_millis(35) && next <= t0 + Duration::from_millis(50));
        let at = |ms| t0 + Duration::from_millis(ms);
        assert!(w.take_due(at(20), at(20)).is_empty());
        assert_eq!(w.take_due(at(60), at(60)), vec![2]);
        assert_eq!(w.take_due(at(200), at(200)), vec![1]);
        assert_eq!(w.next_due(), None);
    }

    /// A tick that renews early what is due within the next second leaves
    /// the slots after `now` unvisited: a short lease renewed at that tick
    /// and due again 300 ms later fires then, not a second later (it was:
    /// a job's lease of 900 ms ran out before its second renewal).
    #[test]
    fn an_early_take_does_not_delay_what_is_inserted_after_it() {
        let t0 = Instant::now();
        let at = |ms| t0 + Duration::from_millis(ms);
        let mut w = Wheel::new(t0);
        w.insert(1, at(300));
        assert_eq!(w.take_due(at(300), at(1_300)), vec![1]);
        w.insert(1, at(600));
        let next = w.next_due().unwrap();
        assert!(next <= at(620), "{:?}", next - t0);
        assert_eq!(w.take_due(next, next + Duration::from_secs(1)), vec![1]);
    }

    #[test]
    fn wheel_handles_entries_beyond_one_turn_and_the_wrap() {
        let t0 = Instant::now();
        let mut w = Wheel::new(t0);
        let turn = TICK * SLOTS as u32;
        // Due after more than one turn: it shares a slot of this turn, and
        // stays in it when the slot is visited, until its turn.
        w.insert(7, t0 + turn + Duration::from_millis(500));
        let first = w.next_due().unwrap();
        assert!(first < t0 + turn);
        assert!(w.take_due(first, first + Duration::from_secs(1)).is_empty());
        let due = t0 + turn + Duration::from_millis(520);
        assert_eq!(w.take_due(due, due), vec![7]);
        // Past the wrap, a short due time is found after the cursor.
        w.insert(8, t0 + turn + Duration::from_millis(540));
        let next = w.next_due().unwrap();
        assert!(
            next >= t0 + turn + Duration::from_millis(540),
            "{:?}",
            next - t0
        );
        assert_eq!(w.take_due(next, next), vec![8]);
    }
}
