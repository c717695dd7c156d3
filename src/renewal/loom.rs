//! The renewal thread's registrations and their cancel under loom (every
//! interleaving, see `crate::sync`): a guard registers its lease and drops
//! (`Renewer::register`, `Renewer::cancel`, as the raw hold does) while
//! the thread's steps (`Worker::take_pending`, `Worker::renew`: the send
//! gate, the batch, the answer) run on another thread, over a stand-in for
//! Redis's answers ([`Answers`]). Asserted: once the drop returned, no
//! renewal of the lease is sent and its lease is never extended again, and
//! the thread drops the registration when it next meets it; a lease lost
//! meanwhile wakes the task waiting for the loss. Compiled only in the unit
//! tests built with `--cfg loom`. Leases are long and the thread's steps
//! are called directly (its `select!` on the wheel's timer is not
//! modelled: time never decides).

use std::sync::Arc;
use std::time::{Duration, Instant};

use ::loom::future::block_on;
use ::loom::thread;
use redis::{Cmd, Pipeline, RedisResult, Value};

use super::registration::Registration;
use super::worker::{RoundTrips, Worker};
use super::{LeaseLost, LeaseState, Renewer};
use crate::conn::Sent;
use crate::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use crate::sync::model;

const LEASE: Duration = Duration::from_secs(30);

/// Redis's answers to the thread: every lease renewed (`ours`) or none;
/// a batch sent after the guard's drop returned fails the model.
struct Answers {
    ours: bool,
    dropped: Arc<AtomicBool>,
    batches: Arc<AtomicU64>,
}

impl RoundTrips for Answers {
    fn send(&mut self, _: &Cmd, commands: &[(&str, Cmd)]) -> Sent {
        let dropped = self.dropped.load(Ordering::SeqCst);
        assert!(!dropped, "a renewal sent after its guard's drop returned");
        self.batches.fetch_add(1, Ordering::SeqCst);
        let answer = || Ok(Value::Int(i64::from(self.ours)));
        Sent {
            answers: commands.iter().map(|_| answer()).collect(),
            unacknowledged: vec![None; commands.len()],
            round_trips: 1,
        }
    }

    fn pipeline(&mut self, _: &str, _: &Pipeline) -> RedisResult<()> {
        Ok(())
    }
}

/// A client's renewer and its thread's steps, answered as `ours` says;
/// the flag a guard's drop sets once it returned; the batches sent.
fn renewer(ours: bool) -> (Renewer, Worker<Answers>, Arc<AtomicBool>, Arc<AtomicU64>) {
    let dropped = Arc::new(AtomicBool::new(false));
    let batches = Arc::new(AtomicU64::new(0));
    let answers = Answers {
        ours,
        dropped: Arc::clone(&dropped),
        batches: Arc::clone(&batches),
    };
    let registration = Registration {
        key: "leasehold_client:model".into(),
        fields: Vec::new(),
    };
    let (renewer, worker) = Renewer::new(answers, Duration::ZERO, LEASE / 10, registration);
    (renewer, worker, dropped, batches)
}

/// The thread's steps on a loom thread: takes the queued leases, renews
/// every one it has; gives the worker back.
fn renewing(mut worker: Worker<Answers>) -> thread::JoinHandle<Worker<Answers>> {
    thread::spawn(move || {
        worker.take_pending();
        let ids: Vec<u64> = worker.entries.keys().copied().collect();
        worker.renew(&ids);
        worker
    })
}

/// A watchdog lease registered now for "k".
fn register(renewer: &Renewer) -> Arc<LeaseState> {
    renewer.register("k", "o", LEASE, Instant::now(), LEASE, None, "plain")
}

/// The guard's drop: renewal stopped (as the raw hold's release does for
/// its last watchdog guard); then, returned, the flag is set.
fn drop_guard(renewer: &Renewer, state: &Arc<LeaseState>, dropped: &AtomicBool) -> Instant {
    let in_flight = renewer.cancel(state, true);
    block_on(renewer.settled(crate::park::Park::Thread, in_flight));
    dropped.store(true, Ordering::SeqCst);
    *state.valid_until.lock()
}

/// A guard registers and drops while the thread takes its registration and
/// renews: before, during (the batch in flight: the drop waits it out) or
/// after. After the drop returned nothing is sent, the lease is never
/// extended, and the thread's entry (if it took one) is done with.
#[test]
fn a_guard_dropped_while_its_renewal_runs_is_never_renewed_after() {
    model("renewal: register, renew, drop", || {
        let (renewer, worker, dropped, batches) = renewer(true);
        let thread = renewing(worker);
        let state = register(&renewer);
        let until = drop_guard(&renewer, &state, &dropped);
        let worker = thread.join().unwrap();
        assert_eq!(*state.valid_until.lock(), until, "extended after the drop");
        assert!(batches.load(Ordering::SeqCst) <= 1);
        assert!(worker.entries.values().all(|e| e.state.is_cancelled()));
        assert_eq!(renewer.counters.live_leases.load(Ordering::Relaxed), 0);
    });
}

/// Redis says the lease is not ours any more while a task waits for the
/// loss (`lost()` of an async guard): the task is woken with the reason,
/// and the guard's drop after it does not wait for the thread.
#[test]
fn a_lost_lease_wakes_the_task_waiting_for_it() {
    model("renewal: lost, the task told", || {
        let (renewer, worker, dropped, _) = renewer(false);
        let state = register(&renewer);
        let thread = renewing(worker);
        let why = block_on(super::LeaseWatch::of([Arc::clone(&state)]).until_lost());
        assert_eq!(why, Some(LeaseLost::NotOurs));
        drop_guard(&renewer, &state, &dropped);
        let worker = thread.join().unwrap();
        assert!(worker.entries.is_empty(), "a lost lease is dropped");
    });
}
