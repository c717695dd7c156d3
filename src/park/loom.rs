//! The signal a wait parks on, under loom (every interleaving, see
//! `crate::sync`): a state set and notified under its mutex always wakes a
//! thread or task that checks it and parks ([`Signal::wait`]), and a
//! [`Cancel`] always wakes a sleep it was given. Compiled only in the unit
//! tests built with `--cfg loom`. Deadlines are far or absent: time never
//! decides (a lost wake-up is a wait that never ends, which loom reports as
//! a deadlock).

use std::sync::Arc;
use std::time::{Duration, Instant};

use loom::future::block_on;
use loom::thread;

use super::{Park, Pending, Signal};
use crate::options::Cancel;
use crate::sync::{model, Mutex};

/// A flag behind a mutex and the signal notified under it.
type Flag = Arc<(Mutex<bool>, Signal)>;

/// Sets the flag and notifies (one waiter, or all), under the mutex.
fn set(flag: &Flag, all: bool) {
    let mut ready = flag.0.lock();
    *ready = true;
    if all {
        flag.1.notify_all();
    } else {
        flag.1.notify_one();
    }
}

/// Waits as `park` says until the flag is set.
fn wait(flag: &Flag, park: Park) {
    let woke = block_on(flag.1.wait(park, &flag.0, None, |r| r.then_some(())));
    assert_eq!(woke, Some(()), "woken without the flag");
}

fn a_notify_under_the_mutex_is_never_lost(park: Park) {
    let flag: Flag = Arc::default();
    let setter = {
        let flag = Arc::clone(&flag);
        thread::spawn(move || set(&flag, false))
    };
    wait(&flag, park);
    setter.join().unwrap();
}

#[test]
fn a_thread_that_checks_and_parks_never_misses_the_notify() {
    model("signal: a thread's wait", || {
        a_notify_under_the_mutex_is_never_lost(Park::Thread);
    });
}

#[test]
fn a_task_that_checks_and_parks_never_misses_the_notify() {
    model("signal: a task's wait", || {
        a_notify_under_the_mutex_is_never_lost(Park::Task);
    });
}

/// A thread and a task wait on one signal: one `notify_all` wakes both.
#[test]
fn notify_all_wakes_the_waiting_thread_and_task_alike() {
    model("signal: a thread and a task, notify_all", || {
        let flag: Flag = Arc::default();
        let task = {
            let flag = Arc::clone(&flag);
            thread::spawn(move || wait(&flag, Park::Task))
        };
        let setter = {
            let flag = Arc::clone(&flag);
            thread::spawn(move || set(&flag, true))
        };
        wait(&flag, Park::Thread);
        task.join().unwrap();
        setter.join().unwrap();
    });
}

/// A thread's sleep given a [`Cancel`] ends when another thread cancels,
/// wherever the cancel falls (before the sleep registers, between its look
/// and its park, while parked).
#[test]
fn a_cancel_always_wakes_a_sleep_it_was_given() {
    model("cancel: a sleep", || {
        let cancel = Cancel::new();
        let canceller = {
            let cancel = cancel.clone();
            thread::spawn(move || cancel.cancel())
        };
        let far = Instant::now() + Duration::from_secs(3_600);
        block_on(Park::Thread.sleep_until(far, Some(&cancel)));
        assert!(cancel.is_cancelled());
        canceller.join().unwrap();
    });
}

/// The client's count of background jobs: a wait for none under way ends
/// when the last job ends on another thread.
#[test]
fn the_wait_for_background_jobs_ends_with_the_last_of_them() {
    model("pending: the last job", || {
        let pending = Arc::new(Pending::default());
        let jobs = (pending.start(), pending.start());
        let ending = thread::spawn(move || drop(jobs));
        let far = Instant::now() + Duration::from_secs(3_600);
        assert!(block_on(pending.idle(Park::Thread, far)));
        ending.join().unwrap();
    });
}
