//! [`Signal`]: what a waiter parks on — a condition variable for threads
//! and a list of wakers for tasks, notified together — and the one wait on
//! it ([`Signal::wait`]) for either.

use std::future::poll_fn;
use std::task::{Poll, Waker};
use std::time::Instant;

use crate::sync::{Condvar, Mutex};

use super::{next_id, Park, Sleep};

/// Wakes threads and tasks waiting for a state behind a mutex. Notify it
/// with that mutex held (as a condition variable): a waiter checks the
/// state and registers under the same mutex, so no wake-up is lost.
#[derive(Default)]
pub(crate) struct Signal {
    cv: Condvar,
    tasks: Mutex<Vec<(u64, Waker)>>,
}

impl Signal {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Wakes every waiting thread and task.
    pub(crate) fn notify_all(&self) {
        self.cv.notify_all();
        let woken = std::mem::take(&mut *self.tasks.lock());
        for (_, waker) in woken {
            waker.wake();
        }
    }

    /// Wakes one waiting thread and the task that waits longest.
    pub(crate) fn notify_one(&self) {
        self.cv.notify_one();
        let woken = {
            let mut tasks = self.tasks.lock();
            (!tasks.is_empty()).then(|| tasks.remove(0))
        };
        if let Some((_, waker)) = woken {
            waker.wake();
        }
    }

    fn register(&self, id: u64, waker: &Waker) {
        let mut tasks = self.tasks.lock();
        match tasks.iter_mut().find(|(i, _)| *i == id) {
            Some((_, w)) => w.clone_from(waker),
            None => {
                // Most signals have one waiter (a queued task's own): no
                // room for four.
                if tasks.capacity() == 0 {
                    tasks.reserve_exact(1);
                }
                tasks.push((id, waker.clone()));
            }
        }
    }

    fn forget(&self, id: u64) {
        self.tasks.lock().retain(|(i, _)| *i != id);
    }

    /// Waits until `check` — on the state behind `lock`, which this signal
    /// is notified under — returns `Some`, or `until` (then a last check's
    /// answer). A thread blocks; a task parks.
    pub(crate) async fn wait<T, R>(
        &self,
        park: Park,
        lock: &Mutex<T>,
        until: Option<Instant>,
        mut check: impl FnMut(&mut T) -> Option<R>,
    ) -> Option<R> {
        if park == Park::Thread {
            let mut state = lock.lock();
            loop {
                if let Some(r) = check(&mut state) {
                    return Some(r);
                }
                match until {
                    Some(until) => {
                        if self.cv.wait_until(&mut state, until).timed_out() {
                            return check(&mut state);
                        }
                    }
                    None => self.cv.wait(&mut state),
                }
            }
        }
        let mut waiting = Waiting {
            signal: self,
            id: next_id(),
            sleep: until.map(Sleep::until),
        };
        poll_fn(|cx| {
            let mut state = lock.lock();
            if let Some(r) = check(&mut state) {
                return Poll::Ready(Some(r));
            }
            if until.is_some_and(|u| u <= Instant::now()) {
                return Poll::Ready(None);
            }
            self.register(waiting.id, cx.waker());
            drop(state);
            if let Some(sleep) = &mut waiting.sleep {
                // Ready means the deadline passed since the check: poll
                // again at once.
                if sleep.register(cx.waker()) {
                    cx.waker().wake_by_ref();
                }
            }
            Poll::Pending
        })
        .await
    }
}

/// A task's wait on a signal: its waker is taken out when it ends or is
/// dropped (a cancelled wait leaves nothing behind).
struct Waiting<'a> {
    signal: &'a Signal,
    id: u64,
    sleep: Option<Sleep>,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.signal.forget(self.id);
    }
}
