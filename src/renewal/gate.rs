//! The send gate: the renewal thread's batches in flight, which a release
//! waits out so that no renewal of its lease reaches Redis after it. A
//! renewal landing after the release could lengthen the owner's next hold
//! of the name (an explicit lease stretched to the watchdog's) or a job's
//! lock kept for `lock_at_least_for` (stretched to `lock_at_most_for`). A
//! thread blocks for the batch; a task parks (its executor never waits on
//! Redis).

use crate::park::{Park, Signal};
use crate::sync::Mutex;

/// The batches the renewal thread began and ended (one at a time).
#[derive(Default)]
pub(super) struct Gate {
    batches: Mutex<Batches>,
    ended: Signal,
}

#[derive(Default)]
struct Batches {
    begun: u64,
    ended: u64,
}

/// A batch in flight when a lease was cancelled: its release waits it out
/// with [`Renewer::settled`](super::Renewer::settled) before it is sent.
/// Nothing (the default) when none was: the common case, no wait at all.
#[must_use = "a release waits out the batch in flight first"]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct InFlight(pub(super) Option<u64>);

impl InFlight {
    /// Whether there is a batch to wait for.
    pub(crate) fn is_some(self) -> bool {
        self.0.is_some()
    }
}

impl Gate {
    /// A batch begins (it ends when the returned value is dropped). The
    /// thread looks at which leases are cancelled only after this, so a
    /// cancel that saw no batch in flight is seen by the next one.
    pub(super) fn begin(&self) -> Sending<'_> {
        self.batches.lock().begun += 1;
        Sending(self)
    }

    /// The batch in flight now, if any (to call after the lease's cancel
    /// flag is set).
    pub(super) fn in_flight(&self) -> InFlight {
        let b = self.batches.lock();
        InFlight((b.begun > b.ended).then_some(b.begun))
    }

    /// Waits until batch `in_flight` ended: a thread blocks, a task parks.
    pub(super) async fn ended(&self, park: Park, in_flight: InFlight) {
        let Some(batch) = in_flight.0 else {
            return;
        };
        let ended = |b: &mut Batches| (b.ended >= batch).then_some(());
        self.ended.wait(park, &self.batches, None, ended).await;
    }
}

/// A batch in flight; dropped, it has ended.
pub(super) struct Sending<'g>(&'g Gate);

impl Drop for Sending<'_> {
    fn drop(&mut self) {
        let mut b = self.0.batches.lock();
        b.ended += 1;
        self.0.ended.notify_all();
    }
}
