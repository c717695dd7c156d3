//! The I/O threads of waiting tasks: round trips of the async API run here,
//! never on an executor's thread. One pool for the process, started with
//! the first job, growing while every thread is busy up to [`THREADS_MAX`];
//! a job's result goes to its task through a one-shot slot, or — the task's
//! future dropped meanwhile — to the job's `lost` hook, which undoes it.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll, Waker};

use crossbeam_channel::{unbounded, Receiver, Sender};
use parking_lot::Mutex;

use super::thread_error;
use crate::error::Result;

/// How many I/O threads at most: round trips are short, and a waiting task
/// holds none (only a few more threads than the blocking API's, however
/// many tasks wait).
pub(crate) const THREADS_MAX: usize = 4;

type Job = Box<dyn FnOnce() + Send>;

/// How long an I/O thread looks for the next job before it parks.
const LINGER: std::time::Duration = std::time::Duration::from_micros(50);

struct Pool {
    jobs: Sender<Job>,
    queue: Receiver<Job>,
    threads: AtomicUsize,
    idle: AtomicUsize,
}

fn pool() -> &'static Pool {
    static POOL: OnceLock<Pool> = OnceLock::new();
    POOL.get_or_init(|| {
        let (jobs, queue) = unbounded();
        Pool {
            jobs,
            queue,
            threads: AtomicUsize::new(0),
            idle: AtomicUsize::new(0),
        }
    })
}

impl Pool {
    fn work(&self) {
        loop {
            self.idle.fetch_add(1, Ordering::SeqCst);
            // A task's next round trip usually follows its last at once
            // (an unlock after a lock): look for it a little while, giving
            // the CPU away, before parking.
            let mut job = None;
            let look = std::time::Instant::now();
            while look.elapsed() < LINGER {
                if let Ok(j) = self.queue.try_recv() {
                    job = Some(j);
                    break;
                }
                std::thread::yield_now();
            }
            let job = match job {
                Some(j) => Ok(j),
                None => self.queue.recv(),
            };
            self.idle.fetch_sub(1, Ordering::SeqCst);
            match job {
                // A panicking job (a bug) must not take the thread with it:
                // its task learns of it through the slot's sender going.
                Ok(job) => {
                    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
                }
                Err(_) => return,
            }
        }
    }
}

/// Hands `job` to an I/O thread, starting one when none is idle (up to
/// [`THREADS_MAX`]); gives it back when there is no thread at all.
pub(super) fn spawn(job: Job) -> std::result::Result<(), Job> {
    let p = pool();
    if p.idle.load(Ordering::SeqCst) == 0 {
        let started = p.threads.fetch_add(1, Ordering::SeqCst);
        if started < THREADS_MAX {
            let spawned = std::thread::Builder::new()
                .name("leasehold-io".into())
                .spawn(|| pool().work());
            if let Err(e) = spawned {
                p.threads.fetch_sub(1, Ordering::SeqCst);
                tracing::warn!(error = %e, "leasehold: could not start an I/O thread");
                if started == 0 {
                    return Err(job);
                }
            }
        } else {
            p.threads.fetch_sub(1, Ordering::SeqCst);
        }
    }
    p.jobs.send(job).map_err(|e| e.into_inner())
}

/// Where a job's result waits for its task.
struct Slot<T> {
    value: Option<T>,
    waker: Option<Waker>,
    /// The task's future was dropped: the result is the `lost` hook's.
    gone: bool,
    /// The job ended without a result (it panicked).
    failed: bool,
    lost: Option<Box<dyn FnOnce(T) + Send>>,
}

/// Sends the job's result to its slot — or, dropped without one, says so.
struct Reply<T> {
    slot: Arc<Mutex<Slot<T>>>,
    sent: bool,
}

impl<T> Reply<T> {
    fn send(mut self, value: T) {
        self.sent = true;
        let mut slot = self.slot.lock();
        if slot.gone {
            let lost = slot.lost.take();
            drop(slot);
            if let Some(lost) = lost {
                lost(value);
            }
            return;
        }
        slot.value = Some(value);
        if let Some(waker) = slot.waker.take() {
            drop(slot);
            waker.wake();
        }
    }
}

impl<T> Drop for Reply<T> {
    fn drop(&mut self) {
        if !self.sent {
            let mut slot = self.slot.lock();
            slot.failed = true;
            if let Some(waker) = slot.waker.take() {
                drop(slot);
                waker.wake();
            }
        }
    }
}

/// The task's end of a job: dropped before the result came, it leaves the
/// result to the `lost` hook.
pub(crate) struct Awaiting<T> {
    slot: Arc<Mutex<Slot<T>>>,
}

impl<T> Drop for Awaiting<T> {
    fn drop(&mut self) {
        let mut slot = self.slot.lock();
        slot.gone = true;
        slot.waker = None;
        // Arrived but not taken: the hook undoes it here. (Not arrived: the
        // hook stays for the I/O thread.)
        let Some(value) = slot.value.take() else {
            return;
        };
        if let Some(lost) = slot.lost.take() {
            drop(slot);
            lost(value);
        }
    }
}

/// Hands `job` to an I/O thread; its result comes through the returned end.
pub(super) fn start<T: Send + 'static>(
    job: impl FnOnce() -> T + Send + 'static,
    lost: impl FnOnce(T) + Send + 'static,
) -> Result<Awaiting<T>> {
    let slot = Arc::new(Mutex::new(Slot {
        value: None,
        waker: None,
        gone: false,
        failed: false,
        lost: Some(Box::new(lost)),
    }));
    let reply = Reply {
        slot: Arc::clone(&slot),
        sent: false,
    };
    let awaiting = Awaiting { slot };
    spawn(Box::new(move || reply.send(job())))
        .map_err(|_| thread_error("no leasehold I/O thread could be started"))?;
    Ok(awaiting)
}

impl<T> Awaiting<T> {
    /// The result, once the job ended.
    pub(super) fn poll(&mut self, cx: &mut Context<'_>) -> Poll<Result<T>> {
        let mut slot = self.slot.lock();
        if let Some(value) = slot.value.take() {
            slot.lost = None;
            return Poll::Ready(Ok(value));
        }
        if slot.failed {
            return Poll::Ready(Err(thread_error(
                "a leasehold I/O thread stopped without an answer (a bug: please report it)",
            )));
        }
        match &mut slot.waker {
            Some(w) => w.clone_from(cx.waker()),
            None => slot.waker = Some(cx.waker().clone()),
        }
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;
    use std::time::{Duration, Instant};

    fn lost_to(seen: &Arc<AtomicU64>) -> impl FnOnce(u64) + Send + 'static {
        let seen = Arc::clone(seen);
        move |v| seen.store(v, Ordering::SeqCst)
    }

    fn eventually(mut cond: impl FnMut() -> bool) -> bool {
        let end = Instant::now() + Duration::from_secs(5);
        while !cond() {
            if Instant::now() > end {
                return false;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        true
    }

    #[test]
    fn a_result_that_arrives_after_its_future_was_dropped_goes_to_the_lost_hook() {
        let seen = Arc::new(AtomicU64::new(0));
        let job = || {
            std::thread::sleep(Duration::from_millis(50));
            7
        };
        drop(start(job, lost_to(&seen)).unwrap());
        assert!(eventually(|| seen.load(Ordering::SeqCst) == 7));
    }

    #[test]
    fn a_result_that_arrived_before_its_future_was_dropped_goes_to_the_lost_hook() {
        let seen = Arc::new(AtomicU64::new(0));
        let awaiting = start(|| 9, lost_to(&seen)).unwrap();
        assert!(eventually(|| awaiting.slot.lock().value.is_some()));
        drop(awaiting);
        assert_eq!(seen.load(Ordering::SeqCst), 9);
    }

    #[test]
    fn a_result_taken_by_its_task_never_reaches_the_lost_hook() {
        let seen = Arc::new(AtomicU64::new(0));
        let mut awaiting = start(|| 5, lost_to(&seen)).unwrap();
        let waker = std::task::Waker::noop();
        let mut cx = Context::from_waker(waker);
        let got = loop {
            if let Poll::Ready(v) = awaiting.poll(&mut cx) {
                break v.unwrap();
            }
            std::thread::sleep(Duration::from_millis(1));
        };
        drop(awaiting);
        assert_eq!((got, seen.load(Ordering::SeqCst)), (5, 0));
    }
}
