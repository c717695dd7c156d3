//! The semaphore's face: [`Semaphore`] (a handle on one semaphore of a
//! client: set or add permits, the ladder of acquires, an operator's read).
//! Thin: acquires go through the one driver (`acquire`), the raw layer
//! knows the scripts.

mod guard;
mod info;

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub use guard::PermitGuard;
pub use info::{PermitInfo, SemaphoreInfo, SemaphoreWaiter};

use crate::acquire::acquire_permits;
use crate::client::{or_timed_out, LockClient};
use crate::error::Result;
use crate::guard::{DropOn, Held};
use crate::options::{deadline_after, SemaphoreOptions};
use crate::park::{block_on, blocking_wait_allowed, Park};
use crate::raw::Want;
use crate::shared::Shared;

/// A distributed semaphore: at most N permits out at a time, across
/// processes — N exports, N calls to a rate-limited API.
///
/// Made by [`LockClient::semaphore`]; cheap to clone. Its permits are
/// leased, as locks are: a permit guard's lease is renewed by the client's
/// renewal thread while it lives, so a holder that works longer than a
/// lease keeps its permits, and a holder that died gives them back within
/// one lease. [`PermitGuard::lost`] tells a holder whose permits were taken
/// back. Waiting acquisitions stand in one line across processes: each
/// released permit is granted to the first in line (one waiter woken, no
/// polling).
///
/// The layout is Redisson's `RPermitExpirableSemaphore` (the counter
/// `<name>`, the lease table `{<name>}:timeout`, the channel
/// `redisson_sc:{<name>}`, 16-byte permit ids), so a Java service and a
/// Rust service can share one semaphore; see the README's *Interoperating with Redisson* and
/// `docs/design.md`, *Sharing a semaphore with Redisson*, in the repository.
///
/// ```no_run
/// # fn export() {}
/// # fn main() -> Result<(), leasehold::Error> {
/// let client = leasehold::LockClient::new("redis://127.0.0.1/")?;
/// let exports = client.semaphore("exports");
/// exports.try_set_permits(3)?;         // once; later calls change nothing
/// let permit = exports.acquire()?;     // blocks while 3 are out
/// export();
/// permit.unlock()?;                    // or drop it
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Semaphore {
    shared: Arc<Shared>,
    name: Arc<str>,
}

impl LockClient {
    /// The semaphore `name` (under the client's key prefix). Nothing is
    /// sent until it is used; [`Semaphore::try_set_permits`] or
    /// [`Semaphore::set_permits`] give it its permits.
    pub fn semaphore(&self, name: &str) -> Semaphore {
        Semaphore::new(Arc::clone(self.shared()), name)
    }
}

impl Semaphore {
    pub(crate) fn new(shared: Arc<Shared>, name: &str) -> Self {
        Semaphore {
            shared,
            name: Arc::from(name),
        }
    }

    /// The semaphore's name, as given.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Gives the semaphore `permits` permits if it has none set yet (as
    /// Redisson's `trySetPermits`): true when this call set them. Safe to
    /// call from every process at start-up.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a bad
    /// name; Redis errors.
    pub fn try_set_permits(&self, permits: u32) -> Result<bool> {
        self.shared.raw().set_permits(&self.name, permits, true)
    }

    /// Sets the semaphore's total to `permits`, counting the permits out
    /// now (as Redisson's `setPermits`): with 5 out and a new total of 3,
    /// nobody gets one until 3 more came back. More permits go to the
    /// waiters first in line at once.
    ///
    /// # Errors
    /// As [`try_set_permits`](Self::try_set_permits).
    pub fn set_permits(&self, permits: u32) -> Result<()> {
        self.shared.raw().set_permits(&self.name, permits, false)?;
        Ok(())
    }

    /// Adds `permits` to the total; permits that came free this way go to
    /// the waiters first in line at once (tokio's `add_permits`,
    /// Redisson's `addPermits`).
    ///
    /// # Errors
    /// As [`try_set_permits`](Self::try_set_permits).
    pub fn add_permits(&self, permits: u32) -> Result<()> {
        self.shared
            .raw()
            .add_permits(&self.name, i64::from(permits))?;
        Ok(())
    }

    /// Takes `permits` away from the total, also below what is out now:
    /// then nobody gets one until enough came back (Redisson's
    /// `reducePermits`, tokio's `forget_permits`).
    ///
    /// # Errors
    /// As [`try_set_permits`](Self::try_set_permits).
    pub fn reduce_permits(&self, permits: u32) -> Result<()> {
        self.shared
            .raw()
            .add_permits(&self.name, -i64::from(permits))?;
        Ok(())
    }

    /// The permits one could take now (expired ones counted back first):
    /// 0 when none are free — also when the semaphore has no permits set,
    /// or [`reduce_permits`](Self::reduce_permits) took away more than were
    /// free; [`inspect`](Self::inspect) tells those apart (tokio's
    /// `available_permits`).
    ///
    /// # Errors
    /// As [`try_set_permits`](Self::try_set_permits).
    pub fn available_permits(&self) -> Result<u32> {
        let count = self.shared.raw().available_permits(&self.name)?;
        Ok(count.map_or(0, |n| u32::try_from(n.max(0)).unwrap_or(u32::MAX)))
    }

    /// Takes one permit, waiting as long as it takes.
    ///
    /// # Errors
    /// [`Error::Unavailable`](crate::Error::Unavailable) when Redis stays
    /// unreachable for longer than a wait rides out (the connect timeout);
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a bad
    /// name.
    pub fn acquire(&self) -> Result<PermitGuard> {
        self.acquire_with(1, SemaphoreOptions::new())
    }

    /// Takes `permits` permits at once (all or none), waiting as long as it
    /// takes.
    ///
    /// # Errors
    /// As [`acquire`](Self::acquire), and
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for 0 or
    /// more than 1,000 permits.
    pub fn acquire_many(&self, permits: u32) -> Result<PermitGuard> {
        self.acquire_with(permits, SemaphoreOptions::new())
    }

    /// Takes one permit if one is free now and nobody waits before us;
    /// `None` otherwise. One round trip.
    ///
    /// # Errors
    /// As [`acquire`](Self::acquire), and Redis errors at once.
    pub fn try_acquire(&self) -> Result<Option<PermitGuard>> {
        self.try_acquire_with(1, SemaphoreOptions::new())
    }

    /// Takes one permit, waiting at most `wait`; `None` when it runs out.
    ///
    /// # Errors
    /// As [`acquire`](Self::acquire).
    pub fn try_acquire_for(&self, wait: Duration) -> Result<Option<PermitGuard>> {
        self.try_acquire_with(1, SemaphoreOptions::new().wait(wait))
    }

    /// One permit, waiting until `deadline`: `None` when it passed.
    ///
    /// # Errors
    /// As [`acquire`](Self::acquire).
    pub fn try_acquire_until(&self, deadline: Instant) -> Result<Option<PermitGuard>> {
        self.take(1, SemaphoreOptions::new(), Some(deadline))
    }

    /// One attempt at `permits` permits together: `None` when fewer are
    /// free.
    ///
    /// # Errors
    /// As [`acquire_many`](Self::acquire_many).
    pub fn try_acquire_many(&self, permits: u32) -> Result<Option<PermitGuard>> {
        self.try_acquire_with(permits, SemaphoreOptions::new())
    }

    /// `permits` permits together, waiting up to `wait`: `None` when the
    /// wait ran out.
    ///
    /// # Errors
    /// As [`acquire_many`](Self::acquire_many).
    pub fn try_acquire_many_for(
        &self,
        permits: u32,
        wait: Duration,
    ) -> Result<Option<PermitGuard>> {
        self.try_acquire_with(permits, SemaphoreOptions::new().wait(wait))
    }

    /// `permits` permits together, waiting until `deadline`: `None` when it
    /// passed.
    ///
    /// # Errors
    /// As [`acquire_many`](Self::acquire_many).
    pub fn try_acquire_many_until(
        &self,
        permits: u32,
        deadline: Instant,
    ) -> Result<Option<PermitGuard>> {
        self.take(permits, SemaphoreOptions::new(), Some(deadline))
    }

    /// Takes `permits` permits as `options` say: an explicit lease (not
    /// renewed: the permits go back when it ends), a bounded wait
    /// ([`Error::WaitTimedOut`](crate::Error::WaitTimedOut) when it runs
    /// out), a [`Cancel`](crate::Cancel) handle.
    ///
    /// # Errors
    /// As [`acquire_many`](Self::acquire_many), plus
    /// [`Error::WaitTimedOut`](crate::Error::WaitTimedOut) and
    /// [`Error::Cancelled`](crate::Error::Cancelled).
    pub fn acquire_with(&self, permits: u32, options: SemaphoreOptions) -> Result<PermitGuard> {
        let wait = options.wait_time();
        let got = self.take(permits, options, wait.map(deadline_after))?;
        or_timed_out(got, &self.name, wait)
    }

    /// Like [`acquire_with`](Self::acquire_with) but `None` when the wait
    /// runs out; without [`SemaphoreOptions::wait`] it makes one attempt.
    ///
    /// # Errors
    /// As [`acquire_with`](Self::acquire_with), without `WaitTimedOut`.
    pub fn try_acquire_with(
        &self,
        permits: u32,
        options: SemaphoreOptions,
    ) -> Result<Option<PermitGuard>> {
        let deadline = deadline_after(options.wait_time().unwrap_or_default());
        self.take(permits, options, Some(deadline))
    }

    /// What is in Redis: permits available, each permit out (its id, the
    /// client that took it when it is a leasehold client, when its lease
    /// ends) and the line of waiting acquisitions. An operator's read.
    ///
    /// # Errors
    /// As [`try_set_permits`](Self::try_set_permits).
    pub fn inspect(&self) -> Result<SemaphoreInfo> {
        let raw = self.shared.raw();
        let state = raw.inspect_semaphore(&self.name)?;
        Ok(SemaphoreInfo::of(&self.name, raw.id(), state))
    }

    fn take(
        &self,
        permits: u32,
        options: SemaphoreOptions,
        deadline: Option<Instant>,
    ) -> Result<Option<PermitGuard>> {
        blocking_wait_allowed(
            &self.name,
            deadline,
            false,
            "leasehold::AsyncSemaphore (AsyncLockClient::semaphore) and .await its acquire",
        )?;
        let want = Want::of_permits(&options, Park::Thread);
        block_on(self.take_as(permits, want, deadline, DropOn::Owned))
    }

    /// The one acquire of permits of both faces: `permits` as `want` says,
    /// until `deadline`, for a guard that releases on drop as `drop_on` says.
    pub(crate) async fn take_as(
        &self,
        permits: u32,
        want: Want,
        deadline: Option<Instant>,
        drop_on: DropOn,
    ) -> Result<Option<PermitGuard>> {
        let hold = acquire_permits(&self.shared, &self.name, permits, want, deadline).await?;
        let raw = Arc::clone(self.shared.raw());
        Ok(hold.map(|hold| PermitGuard {
            held: Held::new(raw, Arc::clone(&hold.state), hold, drop_on),
        }))
    }

    /// The client this semaphore is of (for the async face).
    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }
}

impl fmt::Debug for Semaphore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Semaphore")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}
