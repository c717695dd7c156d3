//! One client's I/O threads: where a task's round trips run when its own
//! runtime cannot take them (no `tokio` feature, another executor, a
//! cluster, TLS, a replica `WAIT`) — never on an executor's thread. Started
//! with the first such job, they end when the client is dropped (once the
//! jobs queued by then have run).
//!
//! [`THREADS`] threads while jobs keep moving; more (up to [`THREADS_MAX`],
//! each ending after [`EXTRA_IDLE`] without work) while jobs wait and none
//! ended for [`STALLED`] (a watcher thread looks): one server that stopped
//! answering must not hold up the client's calls to the others. A job's
//! result goes to its task through a one-shot slot, or — the task's future
//! dropped meanwhile — to the job's `lost` hook, which undoes it.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use crossbeam_channel::{unbounded, Receiver, Sender};
use parking_lot::{Mutex, MutexGuard};

use crate::error::{Error, Result};
use crate::park::Park;

/// The I/O threads kept: round trips are short, and a waiting task holds
/// none (a few threads more than the blocking API's, however many wait).
pub(crate) const THREADS: usize = 4;

/// The most I/O threads, all of them stuck (calls to servers that do not
/// answer, each bounded by its timeouts).
pub(crate) const THREADS_MAX: usize = 32;

/// No job ended for this long while jobs wait and no thread is idle: the
/// watcher starts another.
const STALLED: Duration = Duration::from_millis(100);

/// An extra thread ends after this long without a job.
const EXTRA_IDLE: Duration = Duration::from_secs(10);

/// How long an I/O thread looks for the next job before it parks: a task's
/// next round trip usually follows its last at once (an unlock after a
/// lock).
const LINGER: Duration = Duration::from_micros(50);

type Job = Box<dyn FnOnce() + Send>;

/// The I/O threads of one client; dropping it ends them (they hold only
/// the queue's receiving end).
pub(crate) struct IoThreads {
    jobs: Sender<Job>,
    shared: Arc<Shared>,
}

/// What the threads and the watcher share.
struct Shared {
    queue: Receiver<Job>,
    threads: AtomicUsize,
    idle: AtomicUsize,
    /// Jobs ended (the watcher sees whether the threads move).
    ended: AtomicUsize,
    watching: AtomicBool,
}

impl Default for IoThreads {
    fn default() -> Self {
        let (jobs, queue) = unbounded();
        IoThreads {
            jobs,
            shared: Arc::new(Shared {
                queue,
                threads: AtomicUsize::new(0),
                idle: AtomicUsize::new(0),
                ended: AtomicUsize::new(0),
                watching: AtomicBool::new(false),
            }),
        }
    }
}

impl Shared {
    /// The next job; `None` when this thread should end (the client is
    /// gone, or this extra thread had nothing to do for `idle`).
    fn next(&self, idle: Option<Duration>) -> Option<Job> {
        let look = Instant::now();
        while look.elapsed() < LINGER {
            if let Ok(job) = self.queue.try_recv() {
                return Some(job);
            }
            std::thread::yield_now();
        }
        self.queue.recv_timeout(idle.unwrap_or(Duration::MAX)).ok()
    }

    fn work(&self, idle: Option<Duration>) {
        loop {
            self.idle.fetch_add(1, Ordering::SeqCst);
            let job = self.next(idle);
            self.idle.fetch_sub(1, Ordering::SeqCst);
            let Some(job) = job else {
                self.threads.fetch_sub(1, Ordering::SeqCst);
                return;
            };
            // A panicking job (a bug) must not take the thread with it: its
            // task learns of it through its `Reply` dropped unsent.
            if std::panic::catch_unwind(std::panic::AssertUnwindSafe(job)).is_err() {
                tracing::error!("leasehold: a job of an I/O thread panicked (a bug: please report it); its task gets Error::Thread, a background release or undo did not happen (the lock expires with its lease)");
            }
            self.ended.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// Starts an I/O thread if fewer than `up_to` run; whether it did.
    fn start(self: &Arc<Self>, up_to: usize) -> bool {
        let started = self.threads.fetch_add(1, Ordering::SeqCst);
        if started < up_to {
            let shared = Arc::clone(self);
            let idle = (started >= THREADS).then_some(EXTRA_IDLE);
            let spawned = std::thread::Builder::new()
                .name("leasehold-io".into())
                .spawn(move || shared.work(idle));
            match spawned {
                Ok(_) => return true,
                Err(e) => tracing::warn!(error = %e, "leasehold: could not start an I/O thread"),
            }
        }
        self.threads.fetch_sub(1, Ordering::SeqCst);
        false
    }

    /// Starts the watcher (see the module docs) unless it runs; it ends
    /// once nothing waits.
    fn watch(self: &Arc<Self>) {
        if self.watching.swap(true, Ordering::SeqCst) {
            return;
        }
        let shared = Arc::clone(self);
        let watcher = move || {
            let mut ended = shared.ended.load(Ordering::SeqCst);
            loop {
                std::thread::sleep(STALLED);
                if shared.queue.is_empty() {
                    shared.watching.store(false, Ordering::SeqCst);
                    // A job queued right after the look, whose `watch` saw
                    // the flag still set: look again.
                    if shared.queue.is_empty() || shared.watching.swap(true, Ordering::SeqCst) {
                        return;
                    }
                }
                let now = shared.ended.load(Ordering::SeqCst);
                let stuck = now == ended && shared.idle.load(Ordering::SeqCst) == 0;
                if stuck && shared.start(THREADS_MAX) {
                    tracing::debug!("leasehold: every I/O thread is stuck; started another");
                }
                ended = now;
            }
        };
        let spawned = std::thread::Builder::new()
            .name("leasehold-io-watch".into())
            .spawn(watcher);
        if spawned.is_err() {
            self.watching.store(false, Ordering::SeqCst);
        }
    }
}

impl IoThreads {
    /// Hands `job` to an I/O thread, starting one when none is idle (up to
    /// [`THREADS`]; the watcher starts more); runs it here when none could
    /// be started: better late than never.
    fn spawn(&self, job: Job) {
        let s = &self.shared;
        if s.idle.load(Ordering::SeqCst) == 0
            && !s.start(THREADS)
            && s.threads.load(Ordering::SeqCst) == 0
        {
            return job();
        }
        // Cannot fail: `shared` holds the receiving end.
        let _ = self.jobs.send(job);
        if !s.queue.is_empty() {
            // Jobs wait (a burst, or every thread stuck): watch them.
            s.watch();
        }
    }

    /// Runs `job` — blocking work, a round trip — inline for a thread, on
    /// an I/O thread for a task (handed over at once: the future only waits
    /// for the result). When the task's future is dropped before the result
    /// reached it, `lost` gets the result to undo it (on the I/O thread or
    /// in the dropping task: it must not block; round trips go to
    /// [`detach`](Self::detach)).
    ///
    /// The future's error is [`Error::Thread`] when an I/O thread stopped
    /// without an answer (a bug: the job panicked).
    pub(crate) fn io<T: Send + 'static>(
        &self,
        park: Park,
        job: impl FnOnce() -> T + Send + 'static,
        lost: impl FnOnce(T) + Send + 'static,
    ) -> Io<T> {
        let slot = Arc::new(Mutex::new(Slot {
            value: None,
            waker: None,
            gone: false,
            ended: false,
            lost: Some(Box::new(lost)),
        }));
        let reply = Reply(Arc::clone(&slot));
        self.detach(park, move || reply.send(job()));
        Io { slot }
    }

    /// Runs `job` without waiting for it: inline for a thread, on an I/O
    /// thread for a task (a drop, a cancelled wait leaving its place).
    pub(crate) fn detach(&self, park: Park, job: impl FnOnce() + Send + 'static) {
        match park {
            Park::Thread => job(),
            Park::Task => self.spawn(Box::new(job)),
        }
    }
}

/// Where a job's result waits for its task.
struct Slot<T> {
    value: Option<T>,
    waker: Option<Waker>,
    /// The task's future was dropped: the result is the `lost` hook's.
    gone: bool,
    /// The job is over: no value now means it ended without one (it
    /// panicked).
    ended: bool,
    lost: Option<Box<dyn FnOnce(T) + Send>>,
}

/// Gives `value` to the slot's `lost` hook (not under the slot's lock).
fn to_lost<T>(mut slot: MutexGuard<'_, Slot<T>>, value: T) {
    let lost = slot.lost.take();
    drop(slot);
    if let Some(lost) = lost {
        lost(value);
    }
}

/// The job's end of its slot: sends the result; dropped (after that, or
/// when the job panicked) it wakes the task.
struct Reply<T>(Arc<Mutex<Slot<T>>>);

impl<T> Reply<T> {
    fn send(self, value: T) {
        let mut slot = self.0.lock();
        if slot.gone {
            to_lost(slot, value);
        } else {
            slot.value = Some(value);
        }
    }
}

impl<T> Drop for Reply<T> {
    fn drop(&mut self) {
        let mut slot = self.0.lock();
        slot.ended = true;
        let waker = slot.waker.take();
        drop(slot);
        if let Some(waker) = waker {
            waker.wake();
        }
    }
}

/// The task's end of a job ([`IoThreads::io`]); dropped before the result
/// came, it leaves the result to the `lost` hook.
pub(crate) struct Io<T> {
    slot: Arc<Mutex<Slot<T>>>,
}

impl<T> Drop for Io<T> {
    fn drop(&mut self) {
        let mut slot = self.slot.lock();
        slot.gone = true;
        slot.waker = None;
        // Arrived but not taken: the hook undoes it here (else, later, the
        // I/O thread).
        if let Some(value) = slot.value.take() {
            to_lost(slot, value);
        }
    }
}

impl<T> Future for Io<T> {
    type Output = Result<T>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<T>> {
        let mut slot = self.slot.lock();
        if let Some(value) = slot.value.take() {
            slot.lost = None;
            return Poll::Ready(Ok(value));
        }
        if slot.ended {
            let what = "a leasehold I/O thread stopped without an answer (a bug: please report it)";
            return Poll::Ready(Err(Error::Thread {
                source: std::io::Error::other(what),
            }));
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
    use crate::park::block_on;
    use std::sync::atomic::AtomicU64;

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
        let (threads, seen) = (IoThreads::default(), Arc::new(AtomicU64::new(0)));
        let (go, wait) = crossbeam_channel::bounded::<()>(0);
        let job = move || {
            let _ = wait.recv();
            7
        };
        drop(threads.io(Park::Task, job, lost_to(&seen)));
        go.send(()).unwrap();
        assert!(eventually(|| seen.load(Ordering::SeqCst) == 7));
    }

    #[test]
    fn a_result_that_arrived_before_its_future_was_dropped_goes_to_the_lost_hook() {
        let (threads, seen) = (IoThreads::default(), Arc::new(AtomicU64::new(0)));
        let awaiting = threads.io(Park::Task, || 9, lost_to(&seen));
        let on_a_thread = threads.shared.threads.load(Ordering::SeqCst);
        assert_eq!(on_a_thread, 1, "a task's job ran inline");
        assert!(eventually(|| awaiting.slot.lock().value.is_some()));
        drop(awaiting);
        assert_eq!(seen.load(Ordering::SeqCst), 9);
    }

    #[test]
    fn a_result_taken_by_its_task_never_reaches_the_lost_hook() {
        let (threads, seen) = (IoThreads::default(), Arc::new(AtomicU64::new(0)));
        let got = block_on(threads.io(Park::Task, || 5, lost_to(&seen))).unwrap();
        assert_eq!((got, seen.load(Ordering::SeqCst)), (5, 0));
    }

    #[test]
    fn the_threads_end_when_their_client_drops_them() {
        let threads = IoThreads::default();
        block_on(threads.io(Park::Task, || (), drop)).unwrap();
        let shared = Arc::clone(&threads.shared);
        assert_eq!(shared.threads.load(Ordering::SeqCst), 1);
        drop(threads);
        assert!(eventually(|| shared.threads.load(Ordering::SeqCst) == 0));
    }
}
