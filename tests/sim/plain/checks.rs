//! The invariants of the exclusive-lock simulation, checked after every
//! step, and the wind-down at the end of a run: every client stops, what is
//! in flight lands, and nothing of the lock may be left once the leases ran
//! out.

use super::*;
use crate::sim::store::{Entry, Val};

impl Sim {
    /// The invariants, now.
    pub(super) fn check(&mut self) -> Result<(), String> {
        let now = self.w.now();
        // Every guard's view: the first, and a re-entered one.
        let views = |c: usize| -> Vec<u64> {
            let cl = &self.clients[c];
            let mut v = Vec::new();
            if let State::Holding { until, .. } = cl.state {
                v.push(until);
                v.extend(cl.inner.map(|i| i.until));
            }
            v.retain(|&u| u > now);
            v
        };
        let holders: Vec<usize> = (0..self.clients.len())
            .filter(|&c| !views(c).is_empty())
            .collect();
        if holders.len() > 1 {
            return Err(format!("two holders at once: {holders:?}"));
        }
        for &c in &holders {
            let until = views(c).into_iter().max().unwrap_or(now);
            let owner = self.clients[c].owner.clone();
            let mut store = self.w.engine.store.borrow_mut();
            let ours =
                store.call(&[b"hexists".to_vec(), KEY.into(), owner.into_bytes()]) == Reply::Int(1);
            let pttl = match store.call(&[b"pttl".to_vec(), KEY.into()]) {
                Reply::Int(n) => n,
                _ => -2,
            };
            if !ours || (pttl >= 0 && (pttl as u64) < until - now) {
                return Err(format!(
                    "c{c} counts on {} ms more, Redis keeps {pttl} ms (ours: {ours})",
                    until - now
                ));
            }
        }
        // One element per place in the line (`<until>|<place>`): a place in
        // twice would be granted twice — the second time to a wait that
        // ended, holding the lock for nobody.
        if self.cfg.lock == Lock::Plain {
            if let Reply::Array(line) = self.w.redis(&[b"lrange", LINE.as_bytes(), b"0", b"-1"]) {
                let mut places: Vec<&[u8]> = line
                    .iter()
                    .filter_map(|el| match el {
                        Reply::Bulk(b) => Some(b.splitn(2, |&c| c == b'|').last().unwrap_or(b)),
                        _ => None,
                    })
                    .collect();
                places.sort_unstable();
                if let Some(w) = places.windows(2).find(|w| w[0] == w[1]) {
                    return Err(format!(
                        "a place is in line twice: {}",
                        String::from_utf8_lossy(w[0])
                    ));
                }
            }
        }
        // Liveness: a free lock with a live, unpaused waiter is taken
        // within two place leases (a dead place first in line costs one)
        // and the longest lease (a grantee that died holds its grant).
        // (A waiter cut off — paused, or its call held up on the network —
        // is not counted. Nor is Redisson's in the fair queue: it sleeps
        // until its message or the timeout of the place before it, in
        // Redisson's 300 s steps — behind a dead leasehold place too, whose
        // waiter can no longer purge it, as behind a dead Redisson waiter:
        // Redisson's protocol, not leasehold's bound.)
        let fair = self.cfg.lock == Lock::Fair;
        let waiting = (0..self.clients.len()).any(|c| {
            let cl = &self.clients[c];
            matches!(cl.state, State::Waiting { .. })
                && cl.paused_until <= now
                && !self.w.held_up(c)
                && !(fair && cl.redisson)
        });
        let free = !self.w.exists(KEY) && !self.redisson_first();
        if waiting && free {
            let since = *self.free_since.get_or_insert(now);
            if now - since > 3 * self.cfg.lock.place_lease() + 10_000 {
                return Err(format!(
                    "the lock has been free for {} ms while clients wait",
                    now - since
                ));
            }
        } else {
            self.free_since = None;
        }
        Ok(())
    }

    /// Every client stops acquiring: what is in flight lands, holders
    /// release, waiters leave; then the leases run out and nothing of the
    /// lock may be left.
    pub(super) fn wind_down(&mut self) -> Result<(), String> {
        for _ in 0..100_000 {
            let busy = self.clients.iter().any(|cl| {
                !matches!(cl.state, State::Crashed)
                    && (cl.inflight.is_some()
                        || cl.unsettled.is_some()
                        || matches!(cl.state, State::Holding { .. } | State::Waiting { .. }))
            });
            if !busy && self.w.transit.is_empty() {
                break;
            }
            world::tick(self)?;
            let now = self.w.now();
            for c in 0..self.clients.len() {
                let cl = &self.clients[c];
                if cl.inflight.is_some() || cl.paused_until > now {
                    continue;
                }
                match cl.state.clone() {
                    State::Waiting { place, .. } => {
                        // Redisson's waiter has no place to leave.
                        self.clients[c].state = State::Idle;
                        if !self.clients[c].redisson {
                            self.send(c, Op::Leave { place });
                        }
                    }
                    State::Holding { .. } => self.send_release(c),
                    State::Idle if cl.unsettled.is_some() => self.act(c)?,
                    _ => {}
                }
            }
            self.check()?;
        }
        // The marks live a minute; the fair queue's places up to
        // Redisson's step (5 minutes) each, chained, and the queue a step
        // after its last.
        self.w.advance(
            match self.cfg.lock {
                Lock::Plain => 60_000,
                Lock::Fair => 300_000 * (self.clients.len() as u64 + 3),
            } + self.w.stepped_back_ms,
        );
        // The fencing counter stays on purpose: tokens keep growing across
        // holds (`mint`); nothing else may — but Redisson's fair queue,
        // which its scripts never give an expiry: a Redisson waiter gone
        // from it (crashed, or given up: its own clean-up is not played
        // here) stays in it until the next acquire drops it as stale. Kept
        // only when nothing but Redisson's waiters is in it and it has no
        // expiry (leasehold's scripts set one on every queue they touch).
        let redisson: Vec<&[u8]> = (self.clients.iter())
            .filter(|cl| cl.redisson)
            .map(|cl| cl.owner.as_bytes())
            .collect();
        let redissons_own = |k: &[u8], e: &Entry| {
            let members: Vec<&[u8]> = match &e.val {
                Val::List(items) if k == QUEUE.as_bytes() => {
                    items.iter().map(|m| m.as_slice()).collect()
                }
                Val::ZSet(items) if k == TIMEOUTS.as_bytes() => {
                    items.keys().map(|m| m.as_slice()).collect()
                }
                _ => return false,
            };
            e.expires_at.is_none() && members.iter().all(|m| redisson.contains(m))
        };
        let left: Vec<_> = self
            .w
            .engine
            .store
            .borrow_mut()
            .dump()
            .into_iter()
            .filter(|(k, e)| k != TOKENS.as_bytes() && !redissons_own(k, e))
            .collect();
        if !left.is_empty() {
            let keys: Vec<String> = left
                .iter()
                .map(|(k, _)| String::from_utf8_lossy(k).into_owned())
                .collect();
            return Err(format!("left in Redis after every lease ran out: {keys:?}"));
        }
        Ok(())
    }
}
