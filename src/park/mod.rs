//! How a wait parks — a thread (the blocking API) or a task (the async
//! API) — so that one acquire path serves both. Only waiting: where a round
//! trip runs is the connections' business (`conn::transport`).
//!
//! Every wait of the lock path is an `async fn` taking a [`Park`]. With
//! [`Park::Thread`] nothing in it ever returns `Pending`: a wait blocks the
//! calling thread on a condition variable, and [`block_on`] returns after
//! one poll. With [`Park::Task`] a wait registers the task's waker with the
//! same [`Signal`] the condition variable hangs on (and with the timer
//! thread for its deadline): no executor thread ever blocks.
//!
//! Runtime-agnostic: nothing here needs or starts an executor.

#[cfg(all(test, loom))]
mod loom;
mod pending;
mod signal;
mod timer;

use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::thread::Thread;
use std::time::Instant;

use crate::sync::Mutex;

pub(crate) use pending::Pending;
pub(crate) use signal::Signal;
pub(crate) use timer::Sleep;

use crate::error::{Error, Result};
use crate::options::Cancel;

/// Who waits: the calling thread, or an async task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Park {
    /// The blocking API: waits block the thread (and its round trips run
    /// inline).
    Thread,
    /// The async API: waits park the task (and its round trips never run on
    /// the executor's thread).
    Task,
}

impl Park {
    /// Sleeps until `until` — or, given a handle, until it is cancelled
    /// (it wakes the sleep at once).
    pub(crate) async fn sleep_until(self, until: Instant, cancel: Option<&Cancel>) {
        let sleep = Arc::new((Mutex::new(()), Signal::new()));
        let _on_cancel = cancel.map(|cancel| {
            let sleep = Arc::clone(&sleep);
            cancel.on_cancel(Arc::new(move || {
                let _lock = sleep.0.lock();
                sleep.1.notify_all();
            }))
        });
        let cancelled = || cancel.is_some_and(Cancel::is_cancelled);
        let _ = sleep
            .1
            .wait(self, &sleep.0, Some(until), |_| cancelled().then_some(()))
            .await;
    }
}

/// A new id for a wait: a task's in a [`Signal`] (its waker replaced on a
/// later poll, taken out when the wait ends), a [`Sleep`]'s with the timer.
fn next_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

struct Unpark(Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
}

/// Runs `future` to completion on this thread (ready at its first poll
/// with [`Park::Thread`]; should it not be, the thread parks until woken).
pub(crate) fn block_on<F: Future>(future: F) -> F::Output {
    let mut future = pin!(future);
    // Ready at once on the blocking path: no waker to make.
    let noop = Waker::noop();
    if let Poll::Ready(out) = future.as_mut().poll(&mut Context::from_waker(noop)) {
        return out;
    }
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    loop {
        if let Poll::Ready(out) = future.as_mut().poll(&mut cx) {
            return out;
        }
        std::thread::park();
    }
}

/// Whether this thread is polling an async runtime's task right now (a
/// worker of a tokio runtime, or the thread in its `block_on`), where a
/// blocking wait would stall every task of the thread — and deadlock when
/// one of them holds what it waits for. Not inside `spawn_blocking` or
/// `block_in_place`, where blocking is the point.
///
/// With the `tokio` feature, read off tokio's cooperative budget: tokio
/// gives every poll of a task (and of `block_on`'s future) a budget of
/// operations and lifts it in its blocking sections, so a constrained
/// budget means "inside a scheduler's poll". The probe spends the budget
/// down to empty and gives every unit back (each `RestoreOnPending`
/// restores what it took, newest first): nothing changes for the task.
/// A future wrapped in `tokio::task::unconstrained` is not seen, nor any
/// other executor: without the feature this is always false.
pub(crate) fn on_executor() -> bool {
    #[cfg(feature = "tokio")]
    {
        use tokio::task::coop::poll_proceed;
        // Outside any runtime's context (most blocking callers): at once.
        if tokio::runtime::Handle::try_current().is_err() {
            return false;
        }
        /// More than tokio's budget per poll (128).
        const PROBE: usize = 256;
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let mut taken = Vec::with_capacity(PROBE);
        let constrained = loop {
            match poll_proceed(&mut cx) {
                Poll::Pending => break true,
                Poll::Ready(unit) => taken.push(unit),
            }
            if taken.len() == PROBE {
                break false;
            }
        };
        taken.into_iter().rev().for_each(drop);
        constrained
    }
    #[cfg(not(feature = "tokio"))]
    false
}

/// Refuses, on an async runtime's thread ([`on_executor`]), a blocking
/// acquisition of `name` that may wait (no deadline, or one still ahead) or
/// whose guard the thread would own (`thread_owned`: reentrant, so every
/// task of the thread would share it), with the error that names
/// `instead`, the async face to use.
pub(crate) fn blocking_wait_allowed(
    name: &str,
    deadline: Option<Instant>,
    thread_owned: bool,
    instead: &'static str,
) -> Result<()> {
    let may_wait = deadline.is_none_or(|d| d > Instant::now());
    if (may_wait || thread_owned) && on_executor() {
        return Err(Error::BlockingInAsync {
            name: name.to_owned(),
            thread_owned: thread_owned && !may_wait,
            instead,
        });
    }
    Ok(())
}
