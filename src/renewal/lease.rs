//! One lease's state, shared by its guards and the renewal thread: whether it
//! is held, until when it is known to be ours, and the lost signal; and the
//! quorum that turns node leases into one Redlock hold.

use std::sync::atomic::{AtomicIsize, AtomicU64};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// Redis counts an expiry from its clock's last whole millisecond: a lease
/// set at server time `t` may end at `t + lease − 1 ms`, so a guard's view
/// ends that much sooner than its request's send time and the lease.
const REDIS_CLOCK_STEP: Duration = Duration::from_millis(1);

use crossbeam_channel::Sender;

pub use crate::error::LeaseLost;
use crate::park::{Park, Signal};
use crate::sync::atomic::{AtomicBool, Ordering};
use crate::sync::Mutex;

/// The state one lease shares between its guards and the renewal thread.
pub(crate) struct LeaseState {
    pub(super) lost: AtomicBool,
    /// Set at unlock, checked by the thread under the send gate.
    pub(super) cancelled: AtomicBool,
    /// Until when the lease is known to be alive: when the last successful
    /// acquire or renewal was *sent*, plus the lease.
    pub(super) valid_until: Mutex<Instant>,
    /// Why it was lost, and the channel of `lost()` (made only when asked
    /// for: most guards never do).
    signal: Mutex<LostSignal>,
    /// Wakes the tasks waiting for the loss (notified under `signal`).
    wake: Signal,
    /// A Redlock hold this lease is one node's part of.
    pub(super) quorum: OnceLock<Arc<Quorum>>,
}

/// A Redlock hold over several nodes' leases: lost once more of them are
/// lost than the majority can spare.
pub(crate) struct Quorum {
    /// Node leases that may still be lost before the hold is.
    spare: AtomicIsize,
    /// The hold's own state (its lost signal).
    pub(crate) state: Arc<LeaseState>,
    lost_count: Arc<AtomicU64>,
}

impl Quorum {
    /// A hold on `held` nodes that needs `majority` of them.
    pub(crate) fn new(
        held: usize,
        majority: usize,
        state: Arc<LeaseState>,
        lost_count: Arc<AtomicU64>,
    ) -> Arc<Self> {
        let spare = isize::try_from(held.saturating_sub(majority)).unwrap_or(isize::MAX);
        Arc::new(Quorum {
            spare: AtomicIsize::new(spare),
            state,
            lost_count,
        })
    }

    /// One more node lease was lost.
    fn node_lost(&self, why: LeaseLost) {
        if self.spare.fetch_sub(1, Ordering::AcqRel) <= 0
            && self.state.mark_lost(why, &self.lost_count)
        {
            crate::meter::lost("redlock");
        }
    }
}

#[derive(Default)]
struct LostSignal {
    why: Option<LeaseLost>,
    /// The hold's last guard released it: nothing more to watch.
    released: bool,
    /// The channels of `LeaseWatch::receiver` (each made only when asked
    /// for: most guards never are): told the reason once, dropped at the
    /// release.
    senders: Vec<Sender<LeaseLost>>,
}

impl LeaseState {
    pub(crate) fn new(valid_until: Instant) -> Arc<Self> {
        Arc::new(LeaseState {
            lost: AtomicBool::new(false),
            cancelled: AtomicBool::new(false),
            valid_until: Mutex::new(valid_until),
            signal: Mutex::new(LostSignal::default()),
            wake: Signal::new(),
            quorum: OnceLock::new(),
        })
    }

    /// Makes this lease one node's part of a Redlock hold. Called right
    /// after the lease was registered: the renewal thread first looks at it
    /// a third of the lease later, so it cannot have been lost yet.
    /// Whether it is a Redlock node's lease (of a quorum).
    pub(crate) fn in_quorum(&self) -> bool {
        self.quorum.get().is_some()
    }

    pub(crate) fn join(&self, quorum: &Arc<Quorum>) {
        let _ = self.quorum.set(Arc::clone(quorum));
    }

    pub(crate) fn is_held(&self) -> bool {
        !self.lost.load(Ordering::Acquire) && Instant::now() < self.valid_until()
    }

    /// Until when the lease is known to be ours (extended by each renewal):
    /// its lease from the request that set it, less [`REDIS_CLOCK_STEP`].
    pub(crate) fn valid_until(&self) -> Instant {
        let until = *self.valid_until.lock();
        until.checked_sub(REDIS_CLOCK_STEP).unwrap_or(until)
    }

    /// An acquire set the lease again (a reentrant hold): it is known to be
    /// ours until `until`.
    pub(crate) fn extend(&self, until: Instant) {
        *self.valid_until.lock() = until;
    }

    /// Its last guard let it go (checked by the thread under the send gate).
    pub(super) fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::Acquire)
    }

    pub(crate) fn is_lost(&self) -> bool {
        self.lost.load(Ordering::Acquire)
    }

    /// Why the lease was lost, once it was.
    pub(crate) fn lost_why(&self) -> Option<LeaseLost> {
        self.is_lost()
            .then(|| self.signal.lock().why.clone())
            .flatten()
    }

    /// `tx` is told the reason once the lease is lost (at once if it was),
    /// and dropped at the release (if it was, at once).
    pub(super) fn tell(&self, tx: &Sender<LeaseLost>) {
        let mut signal = self.signal.lock();
        match (&signal.why, signal.released) {
            (Some(why), _) => {
                let _ = tx.try_send(why.clone());
            }
            (None, true) => {}
            (None, false) => signal.senders.push(tx.clone()),
        }
    }

    /// How many channels the lost signal will tell (for tests).
    #[cfg(test)]
    pub(super) fn senders(&self) -> usize {
        self.signal.lock().senders.len()
    }

    /// Waits (a thread blocks, a task parks) until the lease is lost
    /// (`Some(Some(why))`), its hold was released (`Some(None)`), or
    /// `until` passed (`None`).
    pub(super) async fn lost_until(
        &self,
        park: Park,
        until: Option<Instant>,
    ) -> Option<Option<LeaseLost>> {
        self.wake
            .wait(park, &self.signal, until, |s| match &s.why {
                Some(why) => Some(Some(why.clone())),
                None => s.released.then_some(None),
            })
            .await
    }

    /// The hold's last guard released it: tasks waiting for a loss stop.
    pub(crate) fn released(&self) {
        let mut signal = self.signal.lock();
        signal.released = true;
        signal.senders.clear();
        self.wake.notify_all();
    }

    /// Marks the lease lost once, counting it in `lost_count` before anyone
    /// is told (a holder woken by the signal sees the counter already up);
    /// returns whether this call did it.
    pub(crate) fn mark_lost(&self, why: LeaseLost, lost_count: &AtomicU64) -> bool {
        if self.lost.swap(true, Ordering::AcqRel) {
            return false;
        }
        lost_count.fetch_add(1, Ordering::Relaxed);
        let mut signal = self.signal.lock();
        for tx in signal.senders.drain(..) {
            let _ = tx.try_send(why.clone());
        }
        signal.why = Some(why.clone());
        self.wake.notify_all();
        drop(signal);
        if let Some(quorum) = self.quorum.get() {
            quorum.node_lost(why);
        }
        true
    }
}
