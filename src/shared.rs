//! What a client and its clones share ([`Shared`]): the parts of a client
//! assembled — its raw lock engine (identity, connections, scripts, the
//! ledger of holds, the renewal thread, lost replies; see `raw`) and its
//! subscriber (`notify`) — and the counters of both, for `stats()`. Guards
//! hold the raw engine only.

use std::sync::Arc;

use crate::notify::Notifier;
use crate::park::{block_on, Park};
use crate::raw::Raw;
use crate::stats::Stats;

/// The state every clone of a client shares.
pub(crate) struct Shared {
    raw: Arc<Raw>,
    notifier: Notifier,
}

/// The last handle of a client goes (every clone of `LockClient`,
/// `AsyncLockClient`, `Semaphore` …; guards keep the raw engine only): what
/// it started in the background — a dropped guard's release — is seen
/// through first, bounded by the socket timeout, so a program whose guard
/// went as `main` returned leaves nothing held behind it.
impl Drop for Shared {
    fn drop(&mut self) {
        let within = self.raw.socket_timeout();
        let _ = block_on(self.raw.flush(Park::Thread, within));
        self.notifier.close();
    }
}

impl Shared {
    pub(crate) fn new(raw: Raw, notifier: Notifier) -> Self {
        Shared {
            raw: Arc::new(raw),
            notifier,
        }
    }

    /// The raw lock engine.
    pub(crate) fn raw(&self) -> &Arc<Raw> {
        &self.raw
    }

    /// The subscriber that wakes waiters.
    pub(crate) fn notifier(&self) -> &Notifier {
        &self.notifier
    }

    /// This client's counters (see `LockClient::stats`).
    pub(crate) fn stats(&self) -> Stats {
        let mut stats = self.raw.counters().snapshot();
        let (queued, handoffs) = self.raw.queue_counts();
        stats.waiters_queued = queued;
        stats.waiters_parked += queued;
        stats.handoffs = handoffs;
        (
            stats.subscriber_connected,
            stats.subscriber_connects,
            stats.subscriber_error,
        ) = self.notifier.health();
        stats
    }
}
