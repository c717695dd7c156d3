//! The I/O threads of waiting tasks: round trips of the async API run here,
//! never on an executor's thread. One pool for the process, started with
//! the first job: [`THREADS`] threads while jobs keep moving, more (up to
//! [`THREADS_MAX`], each ending after [`EXTRA_IDLE`] without work) while
//! jobs wait and every thread has been stuck for [`STALLED`] (a watcher
//! thread looks while jobs wait) — a Redis that stopped answering must not
//! hold up every client of the process. A job's result
//! goes to its task through a one-shot slot, or — the task's future dropped
//! meanwhile — to the job's `lost` hook, which undoes it.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use crossbeam_channel::{unbounded, Receiver, Sender};
use parking_lot::Mutex;

use super::thread_error;
use crate::error::Result;

/// The I/O threads kept: round trips are short, and a waiting task holds
/// none (a few threads more than the blocking API's, however many wait).
pub(crate) const THREADS: usize = 4;

/// The most I/O threads, all of them stuck (calls to servers that do not
/// answer, each bounded by its timeouts).
pub(crate) const THREADS_MAX: usize = 32;

/// No job started or ended for this long while every thread is busy: the
/// pool is stuck, and a new job gets a thread of its own.
const STALLED: Duration = Duration::from_millis(100);

/// An extra thread ends after this long without a job.
const EXTRA_IDLE: Duration = Duration::from_secs(10);

type Job = Box<dyn FnOnce() + Send>;

/// How long an I/O thread looks for the next job before it parks.
const LINGER: Duration = Duration::from_micros(50);

struct Pool {
    jobs: Sender<Job>,
    queue: Receiver<Job>,
    threads: AtomicUsize,
    idle: AtomicUsize,
    /// When a job last started or ended (µs since `epoch`).
    moved: AtomicU64,
    epoch: Instant,
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
            moved: AtomicU64::new(0),
            epoch: Instant::now(),
        }
    })
}

impl Pool {
    fn now_us(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_micros()).unwrap_or(u64::MAX)
    }

    fn stalled(&self) -> bool {
        let moved = self.moved.load(Ordering::Relaxed);
        self.now_us().saturating_sub(moved) >= STALLED.as_micros() as u64
    }

    /// The next job; `None` when this (extra) thread should end.
    fn next(&self, extra: bool) -> Option<Job> {
        // A task's next round trip usually follows its last at once (an
        // unlock after a lock): look for it a little while, giving the CPU
        // away, before parking.
        let look = Instant::now();
        while look.elapsed() < LINGER {
            if let Ok(job) = self.queue.try_recv() {
                return Some(job);
            }
            std::thread::yield_now();
        }
        if !extra {
            return self.queue.recv().ok();
        }
        self.queue.recv_timeout(EXTRA_IDLE).ok()
    }

    fn work(&self, extra: bool) {
        loop {
            self.idle.fetch_add(1, Ordering::SeqCst);
            let job = self.next(extra);
            self.idle.fetch_sub(1, Ordering::SeqCst);
            let Some(job) = job else {
                self.threads.fetch_sub(1, Ordering::SeqCst);
                return;
            };
            self.moved.store(self.now_us(), Ordering::Relaxed);
            // A panicking job (a bug) must not take the thread with it: its
            // task learns of it through the slot's sender going.
            if std::panic::catch_unwind(std::panic::AssertUnwindSafe(job)).is_err() {
                tracing::error!("leasehold: a job of an I/O thread panicked (a bug: please report it); its task gets Error::Thread, a background release or undo did not happen (the lock expires with its lease)");
            }
            self.moved.store(self.now_us(), Ordering::Relaxed);
        }
    }
}

/// Hands `job` to an I/O thread, starting one when none is idle (the first
/// [`THREADS`]; beyond them, a watcher starts more while the pool is stuck);
/// gives it back when there is no thread at all.
pub(super) fn spawn(job: Job) -> std::result::Result<(), Job> {
    let p = pool();
    if p.idle.load(Ordering::SeqCst) == 0 {
        let started = p.threads.fetch_add(1, Ordering::SeqCst);
        if started >= THREADS {
            p.threads.fetch_sub(1, Ordering::SeqCst);
        } else if !start_thread(false) && started == 0 {
            return Err(job);
        }
    }
    p.jobs.send(job).map_err(|e| e.into_inner())?;
    if !p.queue.is_empty() {
        // Jobs wait (a burst, or every thread stuck): watch them.
        watch();
    }
    Ok(())
}

/// Starts an I/O thread (already counted in `threads`); false when the
/// system would not (the count is taken back).
fn start_thread(extra: bool) -> bool {
    let spawned = std::thread::Builder::new()
        .name("leasehold-io".into())
        .spawn(move || pool().work(extra));
    match spawned {
        Ok(_) => true,
        Err(e) => {
            pool().threads.fetch_sub(1, Ordering::SeqCst);
            tracing::warn!(error = %e, "leasehold: could not start an I/O thread");
            false
        }
    }
}

/// While jobs wait and every thread is busy, a watcher looks every half
/// [`STALLED`]: when no job started or ended for that long, it starts
/// another thread (up to [`THREADS_MAX`]). It ends once nothing waits.
fn watch() {
    static WATCHING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if WATCHING.swap(true, Ordering::SeqCst) {
        return;
    }
    let watcher = move || loop {
        std::thread::sleep(STALLED / 2);
        let p = pool();
        if p.queue.is_empty() {
            WATCHING.store(false, Ordering::SeqCst);
            // A job queued right after the look, whose `watch` saw the
            // flag still set: look again.
            if p.queue.is_empty() || WATCHING.swap(true, Ordering::SeqCst) {
                return;
            }
            continue;
        }
        if p.idle.load(Ordering::SeqCst) == 0 && p.stalled() {
            let started = p.threads.fetch_add(1, Ordering::SeqCst);
            if started < THREADS_MAX {
                tracing::debug!(
                    threads = started + 1,
                    "leasehold: every I/O thread is stuck; starting another"
                );
                start_thread(started >= THREADS);
            } else {
                p.threads.fetch_sub(1, Ordering::SeqCst);
            }
        }
    };
    let spawned = std::thread::Builder::new()
        .name("leasehold-io-watch".into())
        .spawn(watcher);
    if spawned.is_err() {
        WATCHING.store(false, Ordering::SeqCst);
    }
}

/// Whether a job handed over now would run: an I/O thread exists or can be
/// started.
pub(super) fn available() -> bool {
    let p = pool();
    if p.threads.load(Ordering::SeqCst) > 0 {
        return true;
    }
    spawn(Box::new(|| {})).is_ok()
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
