//! `LockGuard`: the RAII handle of one hold. Its owner marker says who owns
//! the hold — the thread that took it (reentrant, not `Send`) or the guard
//! itself ([`OwnedLockGuard`], `Send`). Also what every guard of the raw
//! layer's holds does alike ([`Held`], a lock's or a semaphore's permits):
//! the lease's state, the checked release, and the drop that releases
//! through the raw layer's one release path (`Raw::release`), in the
//! background where it must not block.

use std::fmt;
use std::marker::PhantomData;
use std::sync::{Arc, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use crate::conn::Bound;
use crate::error::{Error, Result};
use crate::park::{block_on, on_executor, Park};
use crate::raw::{Hold, Raw};
use crate::renewal::{LeaseState, LeaseWatch};

/// The owner of a [`LockGuard`] from [`lock`](crate::LockClient::lock) and
/// the other `lock*`/`try_*` calls: the thread that took it, which may
/// re-enter the lock — so the guard is not `Send` (see [`LockGuard`]).
pub struct ThisThread(PhantomData<MutexGuard<'static, ()>>);

/// The owner of an [`OwnedLockGuard`]: the guard itself. Each acquisition has
/// an owner of its own, so the guard can move to any thread, and no thread —
/// not even the one that took it — can re-enter the lock through it.
pub struct Owned(());

/// Who owns a [`LockGuard`]'s hold: [`ThisThread`] or [`Owned`].
pub(crate) trait OwnerKind {
    /// Where its guard's drop releases: `Thread` for the thread that took
    /// it (reentrant on that thread).
    const DROP_ON: DropOn;
}

impl OwnerKind for ThisThread {
    const DROP_ON: DropOn = DropOn::Thread;
}

impl OwnerKind for Owned {
    const DROP_ON: DropOn = DropOn::Owned;
}

/// A hold owned by the guard, not by a thread: `Send`, not reentrant. From
/// [`LockClient::lock_owned`](crate::LockClient::lock_owned) and
/// [`lock_owned_with`](crate::LockClient::lock_owned_with); for work that
/// moves between threads (a thread pool, a blocking task of an async
/// runtime, a channel).
///
/// **Not for async code**: taking it blocks the calling thread, so in a
/// task it stalls the executor — and deadlocks a service whose other task
/// holds the lock. Use [`AsyncLockClient`](crate::AsyncLockClient) there
/// (its guard is `Send` too). With the `tokio` feature a blocking call that
/// may wait on an executor's thread returns
/// [`Error::BlockingInAsync`](crate::Error::BlockingInAsync) instead; the
/// README's *Async* section has the `clippy.toml` setting that flags a
/// blocking guard held across `.await`.
///
/// ```no_run
/// # fn main() -> Result<(), leasehold::Error> {
/// let client = leasehold::LockClient::new("redis://127.0.0.1/")?;
/// let guard = client.lock_owned("shard:7")?;
/// let worker = std::thread::spawn(move || {
///     // … the work, on another thread …
///     guard.unlock()
/// });
/// // This thread does not hold "shard:7": its own `lock` would wait.
/// assert!(client.try_lock("shard:7")?.is_none());
/// worker.join().unwrap()?;
/// # Ok(()) }
/// ```
pub type OwnedLockGuard = LockGuard<Owned>;

/// One hold of a distributed lock; dropping it releases the hold.
///
/// Holds an `Arc` to the client's internals, so it has no lifetime and can be
/// kept in structs. Reentrancy is per OS thread: the hold belongs to the
/// thread that took it (the owner marker [`ThisThread`]), that thread can
/// re-enter the lock, so the guard cannot be sent to another thread — the
/// compiler refuses it:
///
/// ```compile_fail,E0277
/// # fn main() -> Result<(), leasehold::Error> {
/// let client = leasehold::LockClient::new("redis://127.0.0.1/")?;
/// let guard = client.lock("job")?;
/// std::thread::spawn(move || drop(guard)); // error: not `Send`
/// # Ok(()) }
/// ```
///
/// Take an [`OwnedLockGuard`] for a hold that must move.
///
/// [`unlock`](Self::unlock) is the checked release; `Drop` does the same
/// best-effort — it never panics, logs a failure through `tracing`, and is
/// bounded by the client's socket timeout when Redis is unreachable.
///
/// ```no_run
/// # fn main() -> Result<(), leasehold::Error> {
/// let client = leasehold::LockClient::new("redis://127.0.0.1/")?;
/// let outer = client.lock("ledger")?;
/// let inner = client.lock("ledger")?; // same thread: re-enters at once
/// assert_eq!(inner.name(), "ledger");
/// drop(outer);                         // still held through `inner`
/// inner.unlock()?;                     // now free
/// # Ok(()) }
/// ```
#[must_use = "if unused the lock is released at once"]
#[clippy::has_significant_drop]
pub struct LockGuard<O = ThisThread> {
    pub(crate) held: Held<Hold>,
    owner: PhantomData<O>,
}

impl<O> LockGuard<O> {
    pub(crate) fn new(raw: Arc<Raw>, hold: Hold) -> Self
    where
        O: OwnerKind,
    {
        Self::with(raw, hold, O::DROP_ON)
    }

    pub(crate) fn with(raw: Arc<Raw>, hold: Hold, drop_on: DropOn) -> Self {
        LockGuard {
            held: Held::new(raw, Arc::clone(&hold.state), hold, drop_on),
            owner: PhantomData,
        }
    }

    /// The fencing token of this hold, when it was taken with
    /// [`LockOptions::fenced`](crate::LockOptions::fenced); `None` for a
    /// plain lock. Pass it with every write to the protected resource, and
    /// let the resource refuse a token older than one it has seen
    /// ([`FencedStore`](crate::FencedStore) shows how): the one protection
    /// against a holder that was paused past its lease.
    pub fn fence(&self) -> Option<u64> {
        self.held.hold.fence
    }

    /// Whether the lock is still ours, as far as this client knows: false once
    /// renewal found the lease gone or could not renew it before it ran out,
    /// and false once an explicit lease has run out. Never touches the network.
    ///
    /// For a watchdog lease this turns false within one renewal period (a
    /// third of the lease) of the loss, and before Redis expires the lease: a
    /// renewal that cannot be confirmed with two socket timeouts of the lease
    /// to spare makes it lost at once (see
    /// [`watchdog_lease`](crate::LockClientBuilder::watchdog_lease)).
    pub fn is_held(&self) -> bool {
        self.held.is_held()
    }

    /// Until when the lease is known to be ours, as this client knows it
    /// (the last acquire or renewal sent, plus the lease); `None` once it is
    /// not held (lost, or an explicit lease ran out). Never touches the
    /// network.
    pub fn valid_until(&self) -> Option<Instant> {
        self.held.valid_until()
    }

    /// How long the lease is known to last from now (see
    /// [`valid_until`](Self::valid_until)); zero once it is not held. A
    /// watchdog lease is renewed before this runs out.
    pub fn remaining(&self) -> Duration {
        crate::options::left_until(self.valid_until())
    }

    /// The lease-lost signal of this hold (see [`LeaseWatch`]): checked,
    /// waited for by a thread or a task, or selected beside other events,
    /// so a long job can stop without polling. Explicit leases are not
    /// watched: they simply expire (see [`is_held`](Self::is_held)). Here
    /// beside a timer, with the `crossbeam_channel` crate that leasehold
    /// re-exports (no dependency of your own needed):
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use leasehold::crossbeam_channel::{select, tick};
    ///
    /// fn rotate(client: &leasehold::LockClient) -> leasehold::Result<()> {
    ///     let guard = client.lock("keys:rotate")?;
    ///     let lost = guard.lost().receiver();
    ///     let step = tick(Duration::from_millis(100));
    ///     for n in 0..10 {
    ///         select! {
    ///             recv(lost) -> why => {
    ///                 eprintln!("stopping: the lock was lost ({why:?})");
    ///                 return Ok(());
    ///             }
    ///             recv(step) -> _ => { let _ = n; /* … one step of work … */ }
    ///         }
    ///     }
    ///     guard.unlock()
    /// }
    /// ```
    pub fn lost(&self) -> LeaseWatch {
        self.held.lost()
    }

    /// The lock name as given to `lock`.
    pub fn name(&self) -> &str {
        &self.held.hold.name
    }

    /// The Redis key of the lock: the client's key prefix followed by the name.
    pub fn key(&self) -> &str {
        &self.held.hold.key
    }

    /// The lease this hold was taken with.
    pub fn lease(&self) -> Duration {
        self.held.hold.lease
    }

    /// Releases this hold, checking that it was still ours.
    ///
    /// If other guards of the same owner (reentrant holds) remain, the lock
    /// stays held and keeps its lease; otherwise it is freed and waiters are
    /// woken.
    ///
    /// # Errors
    /// [`Error::NotHeld`](crate::Error::NotHeld) when the lock was no longer ours (the lease ran
    /// out, the key was removed): nothing was changed in Redis. Connection
    /// errors when Redis could not be reached; the lock then expires with its
    /// lease.
    pub fn unlock(self) -> Result<()> {
        block_on(self.held.release(Park::Thread))
    }
}

impl<O> fmt::Debug for LockGuard<O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Only the thread (or owned hold's) number of the owner: the client
        // id is not printed.
        let hold = &self.held.hold;
        let field = &hold.field;
        let owner = field.strip_suffix(":write").unwrap_or(field);
        let number = owner.rsplit(':').next().unwrap_or("");
        f.debug_struct("LockGuard")
            .field("name", &hold.name)
            .field("key", &hold.key)
            .field("lease", &hold.lease)
            .field("owner", &number)
            .field("kind", &hold.kind)
            .finish_non_exhaustive()
    }
}

/// A hold of the raw layer a guard keeps — a lock's [`Hold`] or a
/// semaphore's `PermitHold` — and its one release path there.
pub(crate) trait Releasable: Clone + Send + Sync + 'static {
    /// Gives the hold back, for `park`'s caller, within `bound`.
    async fn release(&self, raw: &Arc<Raw>, park: Park, bound: Bound) -> Result<()>;

    /// Logs a release on drop that failed.
    fn drop_failed(&self, e: &Error);

    /// What the counters (`meter`) call its kind.
    fn meter_kind(&self) -> crate::meter::Kind;
}

impl Releasable for Hold {
    async fn release(&self, raw: &Arc<Raw>, park: Park, bound: Bound) -> Result<()> {
        raw.release(park, self, bound).await
    }

    fn meter_kind(&self) -> crate::meter::Kind {
        self.kind.meter_kind()
    }

    fn drop_failed(&self, e: &Error) {
        tracing::warn!(lock = %self.name, error = ?e, "leasehold: releasing a lock on drop failed");
    }
}

/// Where a guard's drop releases its hold: on the dropping thread
/// (`Thread`: a thread's reentrant hold, in order with its next acquisition
/// there); there unless it is an async runtime's (`Owned`: the drop must not
/// stall the thread's tasks for a round trip — seconds, with Redis stopped);
/// always in the background (`Task`: an async face's guard).
#[derive(Clone, Copy)]
pub(crate) enum DropOn {
    Thread,
    Owned,
    Task,
}

/// What every guard does alike over a hold of `raw` (see the module doc);
/// its drop waits for a pooled connection no longer than one reply may take.
pub(crate) struct Held<H: Releasable> {
    raw: Arc<Raw>,
    pub(crate) hold: H,
    /// The hold's lease state, shared with the renewal thread.
    state: Arc<LeaseState>,
    /// Its lost signal, one for the guard (`lost()` hands out clones),
    /// made at the first `lost()`: most guards are never asked.
    watch: OnceLock<LeaseWatch>,
    /// Set by the checked release so that `Drop` does nothing more.
    released: bool,
    drop_on: DropOn,
    /// When the guard got the hold (for the held-time counter).
    since: crate::meter::Since,
}

impl<H: Releasable> Held<H> {
    pub(crate) fn new(raw: Arc<Raw>, state: Arc<LeaseState>, hold: H, drop_on: DropOn) -> Self {
        Held {
            raw,
            hold,
            watch: OnceLock::new(),
            state,
            released: false,
            drop_on,
            since: crate::meter::Since::now(),
        }
    }

    pub(crate) fn is_held(&self) -> bool {
        self.state.is_held()
    }

    pub(crate) fn valid_until(&self) -> Option<Instant> {
        self.state.is_held().then(|| self.state.valid_until())
    }

    pub(crate) fn lost(&self) -> LeaseWatch {
        let watch = || LeaseWatch::of([Arc::clone(&self.state)]);
        self.watch.get_or_init(watch).clone()
    }

    /// The checked release, where `park`'s caller waits (a task: dropped
    /// before the answer, the release goes on in the background).
    pub(crate) async fn release(mut self, park: Park) -> Result<()> {
        self.released = true;
        crate::meter::held(self.hold.meter_kind(), self.since);
        self.hold.release(&self.raw, park, Bound::default()).await
    }
}

impl<H: Releasable> Drop for Held<H> {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        crate::meter::held(self.hold.meter_kind(), self.since);
        let bound = self.raw.give_back();
        let release = move |raw: &Arc<Raw>, hold: &H| {
            if let Err(e) = block_on(hold.release(raw, Park::Thread, bound)) {
                hold.drop_failed(&e);
            }
        };
        let background = match self.drop_on {
            DropOn::Thread => false,
            DropOn::Owned => on_executor(),
            DropOn::Task => true,
        };
        if background {
            let (raw, hold) = (Arc::clone(&self.raw), self.hold.clone());
            self.raw.detach(Park::Task, move || release(&raw, &hold));
        } else {
            release(&self.raw, &self.hold);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_send_sync<T: Send + Sync + 'static>() {}
    fn assert_sync<T: Sync + 'static>() {}

    #[test]
    fn an_owned_guard_is_send_sync_static_and_a_thread_guard_sync() {
        assert_send_sync::<OwnedLockGuard>();
        assert_sync::<LockGuard>();
    }
}
