//! [`Cancel`]: the handle that cancels waits from another thread or task,
//! and the registration a wait holds on it while it parks.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use crate::sync::atomic::{AtomicBool, Ordering};
use crate::sync::Mutex;

/// Cancels the waits it was given to, from another thread — Redisson's
/// `lockInterruptibly`. Pass it with the `cancel_on` of any face's options
/// ([`LockOptions::cancel_on`](crate::LockOptions::cancel_on)); calling
/// [`cancel`](Self::cancel) wakes every wait holding it at once — a parked
/// thread or task, no polling — and each returns [`Error::Cancelled`](crate::Error::Cancelled),
/// holding nothing and leaving no waiting place in Redis; a wait given it
/// later ends before it starts. A cancelled handle stays cancelled; make a
/// new one for new waits. Clones share the state.
///
/// ```no_run
/// # fn main() -> Result<(), leasehold::Error> {
/// use leasehold::{Cancel, LockOptions};
/// let client = leasehold::LockClient::new("redis://127.0.0.1/")?;
/// let stop = Cancel::new();
/// let waiting = {
///     let (client, stop) = (client.clone(), stop.clone());
///     std::thread::spawn(move || {
///         client.lock_with("batch:shard-7", LockOptions::new().cancel_on(&stop))
///             .map(drop)
///     })
/// };
/// stop.cancel(); // e.g. on shutdown
/// assert!(waiting.join().unwrap().unwrap_err().is_cancelled());
/// # Ok(()) }
/// ```
#[derive(Clone, Default)]
pub struct Cancel {
    inner: Arc<CancelInner>,
}

#[derive(Default)]
struct CancelInner {
    cancelled: AtomicBool,
    /// What wakes each wait holding it now, by registration (see
    /// [`Cancel::on_cancel`]).
    wakers: Mutex<Vec<(u64, Waker)>>,
}

/// Wakes one wait: notifies the signal it parks on, under that signal's
/// mutex (so a wait that looked at the handle just before cannot miss it).
pub(crate) type Waker = Arc<dyn Fn() + Send + Sync>;

impl Cancel {
    /// A handle not cancelled yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Cancels every wait given this handle (or a clone): each one parked
    /// now is woken at once.
    pub fn cancel(&self) {
        if self.inner.cancelled.swap(true, Ordering::SeqCst) {
            return;
        }
        let woken = std::mem::take(&mut *self.inner.wakers.lock());
        for (_, wake) in woken {
            wake();
        }
    }

    /// Whether [`cancel`](Self::cancel) was called.
    pub fn is_cancelled(&self) -> bool {
        self.inner.cancelled.load(Ordering::SeqCst)
    }

    /// Has `wake` run when the handle is cancelled, while the returned
    /// registration lives. The wait looks at [`is_cancelled`] under the
    /// mutex `wake` takes, after registering: a cancel then either is seen
    /// there or wakes it.
    ///
    /// [`is_cancelled`]: Self::is_cancelled
    pub(crate) fn on_cancel(&self, wake: Waker) -> OnCancel {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let id = NEXT.fetch_add(1, Ordering::Relaxed);
        self.inner.wakers.lock().push((id, wake));
        OnCancel {
            cancel: self.clone(),
            id,
        }
    }
}

/// A wait's registration with a [`Cancel`]; taken out when dropped.
pub(crate) struct OnCancel {
    cancel: Cancel,
    id: u64,
}

impl Drop for OnCancel {
    fn drop(&mut self) {
        let mut wakers = self.cancel.inner.wakers.lock();
        wakers.retain(|(id, _)| *id != self.id);
    }
}

impl std::fmt::Debug for Cancel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cancel")
            .field("cancelled", &self.is_cancelled())
            .finish()
    }
}

/// Handles are equal when they are clones of one another.
impl PartialEq for Cancel {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }
}

impl Eq for Cancel {}
