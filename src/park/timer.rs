//! The timer of waiting tasks: one thread for the process, started with the
//! first task that waits with a deadline, wakes each [`Sleep`] at its
//! instant. Threads of the blocking API never use it.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::sync::OnceLock;
use std::task::{Context, Poll, Waker};
use std::time::Instant;

use parking_lot::{Condvar, Mutex, MutexGuard};

#[derive(Default)]
struct Timers {
    due: BinaryHeap<Reverse<(Instant, u64)>>,
    wakers: HashMap<u64, Waker>,
    /// Entries in `due` whose sleep was dropped before its instant.
    dropped: usize,
    started: bool,
    /// When the timer thread wakes by itself (`None`: it does not, it
    /// waits to be told): a sleep due later needs no wake-up for it.
    wakes_at: Option<Instant>,
}

#[derive(Default)]
struct Wheel {
    state: Mutex<Timers>,
    cv: Condvar,
}

fn wheel() -> &'static Wheel {
    static WHEEL: OnceLock<Wheel> = OnceLock::new();
    WHEEL.get_or_init(Wheel::default)
}

impl Wheel {
    fn run(&self) {
        let mut st = self.state.lock();
        loop {
            let now = Instant::now();
            let mut woken = Vec::new();
            while let Some(&Reverse((_, id))) = st.due.peek().filter(|Reverse((at, _))| *at <= now)
            {
                st.due.pop();
                if let Some(waker) = st.wakers.remove(&id) {
                    woken.push(waker);
                }
            }
            if !woken.is_empty() {
                MutexGuard::unlocked(&mut st, || woken.into_iter().for_each(Waker::wake));
                continue;
            }
            st.wakes_at = st.due.peek().map(|Reverse((at, _))| *at);
            match st.wakes_at {
                Some(at) => {
                    self.cv.wait_until(&mut st, at);
                }
                None => self.cv.wait(&mut st),
            }
        }
    }
}

/// A task's sleep until an instant (a future, or registered by hand).
pub(crate) struct Sleep {
    at: Instant,
    id: u64,
    registered: bool,
}

impl Sleep {
    pub(crate) fn until(at: Instant) -> Self {
        Sleep {
            at,
            id: super::next_id(),
            registered: false,
        }
    }

    /// Asks for `waker` to be woken at the instant; true when it has passed
    /// already.
    pub(crate) fn register(&mut self, waker: &Waker) -> bool {
        if self.at <= Instant::now() {
            return true;
        }
        let w = wheel();
        let mut st = w.state.lock();
        if self.registered && !st.wakers.contains_key(&self.id) {
            // Fired already (its waker taken out at its instant) — though
            // this thread's clock may not show the instant passed yet (a
            // VM's CPUs may disagree by a hair): ready, rather than a waker
            // left in the map with nothing due to wake it.
            return true;
        }
        if !st.started {
            let spawned = std::thread::Builder::new()
                .name("leasehold-timer".into())
                .spawn(|| wheel().run());
            match spawned {
                Ok(_) => st.started = true,
                Err(e) => {
                    // No timer: the task is polled again at once (it spins
                    // to its deadline rather than sleep past it).
                    tracing::warn!(error = %e, "leasehold: could not start the timer thread");
                    return true;
                }
            }
        }
        st.wakers
            .entry(self.id)
            .and_modify(|w| w.clone_from(waker))
            .or_insert_with(|| waker.clone());
        if !self.registered {
            self.registered = true;
            st.due.push(Reverse((self.at, self.id)));
            // The thread wakes by itself before this one is due (at an
            // earlier sleep, or one that was dropped since): no need to
            // tell it — a round trip's timeout, always later than the last
            // one, never costs a switch to the timer thread.
            if st.wakes_at.is_none_or(|wakes| self.at < wakes) {
                w.cv.notify_one();
            }
        }
        false
    }
}

impl Future for Sleep {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.register(cx.waker()) {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }
}

impl Drop for Sleep {
    fn drop(&mut self) {
        if self.registered {
            // The waker goes now; its place in the heap when due — or
            // with the others dropped early, once they are half of it (long
            // bounded waits would otherwise pile them up).
            let mut st = wheel().state.lock();
            if st.wakers.remove(&self.id).is_some() {
                st.dropped += 1;
                if st.dropped > 64 && st.dropped * 2 > st.due.len() {
                    let Timers { due, wakers, .. } = &mut *st;
                    due.retain(|Reverse((_, id))| wakers.contains_key(id));
                    st.dropped = 0;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn sleeps_dropped_before_their_instant_do_not_pile_up() {
        let far = Instant::now() + Duration::from_secs(3_600);
        for _ in 0..1_000 {
            let mut sleep = Sleep::until(far);
            assert!(!sleep.register(Waker::noop()));
        }
        let st = wheel().state.lock();
        assert!(st.due.len() < 200, "{} entries left", st.due.len());
    }

    /// A sleep the timer fired is ready when registered again, whatever
    /// this thread's clock says (a loaded run hung in a wait whose sleep
    /// had been fired while its thread still saw the instant ahead: the new
    /// waker went into the map with no entry due to wake it).
    #[test]
    fn a_sleep_fired_already_is_ready_when_registered_again() {
        let mut sleep = Sleep::until(Instant::now() + Duration::from_secs(3_600));
        assert!(!sleep.register(Waker::noop()));
        // What the timer thread does at the instant: the waker taken out.
        let fired = wheel().state.lock().wakers.remove(&sleep.id);
        assert!(fired.is_some());
        assert!(sleep.register(Waker::noop()), "fired, yet registered again");
        assert!(!wheel().state.lock().wakers.contains_key(&sleep.id));
    }

    #[test]
    fn a_sleep_wakes_its_task_at_its_instant() {
        let started = Instant::now();
        crate::park::block_on(Sleep::until(started + Duration::from_millis(30)));
        let took = started.elapsed();
        assert!(
            took >= Duration::from_millis(30) && took < Duration::from_secs(2),
            "{took:?}"
        );
    }
}
