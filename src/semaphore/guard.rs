//! `PermitGuard`: permits of a semaphore held by one acquisition — owned
//! (`Send`), renewed while it lives, given back on drop; `release()` is
//! the checked release.

use std::fmt;
use std::sync::Arc;
use std::time::Instant;

use crossbeam_channel::Receiver;

use crate::conn::Bound;
use crate::error::Result;
use crate::names::hex;
use crate::park::{block_on, on_executor, Park};
use crate::raw::{PermitHold, Raw};
use crate::renewal::{LeaseLost, LeaseState};

/// Permits of a [`Semaphore`](crate::Semaphore), held until dropped or
/// [`release`](Self::release)d.
///
/// Owned by the guard, not a thread: `Send` and `Sync`, so it can move to
/// another thread or be kept in a struct. Without an explicit lease the
/// client's renewal thread renews the permits while the guard lives;
/// [`lost`](Self::lost) tells when they were taken back anyway (removed by
/// hand, expired while Redis was unreachable).
///
/// Dropping it gives the permits back, waiting for a pooled connection no
/// longer than one reply may take; a failure is logged through `tracing`
/// and the permits come back when their lease ends.
#[must_use = "if unused the permits are given back at once"]
#[clippy::has_significant_drop]
pub struct PermitGuard {
    raw: Arc<Raw>,
    hold: PermitHold,
    released: bool,
}

impl PermitGuard {
    pub(crate) fn new(raw: Arc<Raw>, hold: PermitHold) -> Self {
        PermitGuard {
            raw,
            hold,
            released: false,
        }
    }

    /// The semaphore's name, as given.
    pub fn name(&self) -> &str {
        &self.hold.name
    }

    /// How many permits this guard holds.
    pub fn permits(&self) -> u32 {
        self.hold.permits
    }

    /// The permits' ids as Redisson shows them (32 lowercase hex digits
    /// each): a Java service may release or inspect them by these.
    pub fn ids(&self) -> Vec<String> {
        self.hold.ids.chunks(16).map(hex).collect()
    }

    /// Whether the permits are still ours as far as this client knows (not
    /// lost, lease not run out). Never touches the network.
    pub fn is_held(&self) -> bool {
        self.hold.state.is_held()
    }

    /// Until when the permits are known to be ours (the last acquire or
    /// renewal sent, plus the lease); `None` once they are not.
    pub fn valid_until(&self) -> Option<Instant> {
        let state = &self.hold.state;
        state.is_held().then(|| state.valid_until())
    }

    /// A channel that receives why, once, when the renewal thread finds
    /// the permits taken back (see [`LockGuard::lost`](crate::LockGuard::lost)).
    /// An explicit lease is not watched.
    pub fn lost(&self) -> Receiver<LeaseLost> {
        self.hold.state.lost_receiver()
    }

    /// The client's raw engine the permits are of (for the async guard's
    /// background release).
    pub(crate) fn raw(&self) -> &Arc<Raw> {
        &self.raw
    }

    /// The permits' lease state (for the async guard's `lost()`).
    pub(crate) fn lease_state(&self) -> &Arc<LeaseState> {
        &self.hold.state
    }

    /// Gives the permits back, checking that they were still ours.
    ///
    /// # Errors
    /// [`Error::NotHeld`](crate::Error::NotHeld) when one of them had been
    /// taken back (its lease ran out, or it was removed): the rest were
    /// given back all the same. Redis errors: the permits come back when
    /// their lease ends.
    pub fn release(self) -> Result<()> {
        block_on(self.release_as(Park::Thread))
    }

    /// [`release`](Self::release) where `park`'s caller waits (a task:
    /// dropped before the answer, the release goes on in the background).
    pub(crate) async fn release_as(mut self, park: Park) -> Result<()> {
        self.released = true;
        self.raw
            .release_permits(park, &self.hold, Bound::default())
            .await
    }
}

impl Drop for PermitGuard {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        self.released = true;
        let bound = Bound::pool_wait(self.raw.socket_timeout());
        let release = move |raw: &Arc<Raw>, hold: &PermitHold| {
            if let Err(e) = block_on(raw.release_permits(Park::Thread, hold, bound)) {
                tracing::warn!(semaphore = %hold.name, error = ?e, "leasehold: giving permits back on drop failed");
            }
        };
        // On an async runtime's thread: in the background, never stalling
        // the thread's tasks for a round trip.
        if on_executor() {
            let (raw, hold) = (Arc::clone(&self.raw), self.hold.clone());
            self.raw.detach(Park::Task, move || release(&raw, &hold));
            return;
        }
        release(&self.raw, &self.hold);
    }
}

impl fmt::Debug for PermitGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PermitGuard")
            .field("name", &self.hold.name)
            .field("permits", &self.hold.permits)
            .field("held", &self.is_held())
            .finish_non_exhaustive()
    }
}
