//! `PermitGuard`: permits of a semaphore held by one acquisition — owned
//! (`Send`), renewed while it lives, given back on drop; `unlock()` is
//! the checked release.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::conn::Bound;
use crate::error::{Error, Result};
use crate::guard::{Held, Releasable};
use crate::names::hex;
use crate::park::{block_on, Park};
use crate::raw::{PermitHold, Raw};
use crate::renewal::LeaseWatch;

/// Permits of a [`Semaphore`](crate::Semaphore), held until dropped or
/// [`unlock`](Self::unlock)ed.
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
    pub(crate) held: Held<PermitHold>,
}

impl PermitGuard {
    /// The semaphore's name, as given.
    pub fn name(&self) -> &str {
        &self.held.hold.name
    }

    /// The Redis key of the semaphore's counter: the client's key prefix
    /// followed by the name.
    pub fn key(&self) -> &str {
        &self.held.hold.keys.counter
    }

    /// How many permits this guard holds.
    pub fn permits(&self) -> u32 {
        self.held.hold.permits
    }

    /// The permits' ids as Redisson shows them (32 lowercase hex digits
    /// each): a Java service may release or inspect them by these.
    pub fn ids(&self) -> Vec<String> {
        self.held.hold.ids.chunks(16).map(hex).collect()
    }

    /// Whether the permits are still ours as far as this client knows (not
    /// lost, lease not run out). Never touches the network.
    pub fn is_held(&self) -> bool {
        self.held.is_held()
    }

    /// Until when the permits are known to be ours (the last acquire or
    /// renewal sent, plus the lease); `None` once they are not.
    pub fn valid_until(&self) -> Option<Instant> {
        self.held.valid_until()
    }

    /// How long the permits are known to stay ours from now (zero once
    /// they are not).
    pub fn remaining(&self) -> Duration {
        crate::options::left_until(self.valid_until())
    }

    /// The lease the permits were taken with (the watchdog's, renewed while
    /// the guard lives, or the explicit one).
    pub fn lease(&self) -> Duration {
        self.held.hold.lease
    }

    /// The lease-lost signal of the permits (see [`LeaseWatch`]): lost when
    /// the renewal thread finds them taken back. An explicit lease is not
    /// watched.
    pub fn lost(&self) -> LeaseWatch {
        self.held.lost()
    }

    /// Gives the permits back, checking that they were still ours.
    ///
    /// # Errors
    /// [`Error::NotHeld`](crate::Error::NotHeld) when one of them had been
    /// taken back (its lease ran out, or it was removed): the rest were
    /// given back all the same.
    /// [`Error::ReleasePending`](crate::Error::ReleasePending) when Redis
    /// could not be reached, refused the release (`LOADING`, …) or its reply
    /// was lost: it is sent again in the background until Redis answers (or
    /// the permits come back when their lease ends). Other Redis errors: the
    /// permits come back when their lease ends.
    pub fn unlock(self) -> Result<()> {
        block_on(self.held.release(Park::Thread))
    }
}

impl Releasable for PermitHold {
    async fn release(&self, raw: &Arc<Raw>, park: Park, bound: Bound) -> Result<()> {
        raw.release_permits(park, self, bound).await
    }

    fn drop_failed(&self, e: &Error) {
        tracing::warn!(semaphore = %self.name, error = ?e, "leasehold: giving permits back on drop failed");
    }

    fn meter_kind(&self) -> crate::meter::Kind {
        "permits"
    }
}

impl fmt::Debug for PermitGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PermitGuard")
            .field("name", &self.name())
            .field("permits", &self.permits())
            .field("held", &self.is_held())
            .finish_non_exhaustive()
    }
}
