//! The watchdog: one renewal thread per client, driven by a timer wheel.
//!
//! Guards taken without an explicit lease register their lease here; every
//! lease/3 the thread renews all due leases in one pipelined round trip per
//! chunk (`SCRIPT LOAD` at the head, so a flushed script cache cannot break
//! renewal), owner-checked inside Lua. A lease that Redis says is no longer
//! ours, or that could not be renewed before it ran out, is marked lost and
//! its guard is told.
//!
//! Parts: `lease` (shared state, the lost signal), `wheel` (the timer the
//! thread parks on in `select!`), `worker` (the thread), `registration`
//! (who the client is), `loom` (models of a lease's registration and
//! cancel); this file is the client's side (the queue of new leases to the
//! thread). The thread holds no `Arc` to the client: it exits when the
//! client's internals (kept alive by every clone and guard) are dropped
//! and the control channel disconnects.

mod gate;
mod lease;
#[cfg(all(test, loom))]
mod loom;
pub(crate) mod registration;
mod watch;
mod wheel;
mod worker;

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;

pub(crate) use gate::InFlight;
pub use lease::LeaseLost;
pub(crate) use lease::{LeaseState, Quorum};
pub use watch::{LeaseWatch, UntilLost};

use crate::conn::Batches;
use crate::park::Park;
use crate::stats::Counters;
use crate::sync::Mutex;
use wheel::{Wheel, TICK};
use worker::{Entry, RoundTrips, Worker};

/// Most renewals in one pipelined round trip.
pub(crate) const CHUNK: usize = 1_000;

/// Leases registered since the thread last looked. Registering does not
/// wake the thread while it has a timer armed: every watchdog lease of a
/// client has the same length, so a new one is never due before the armed
/// timer fires, and the thread takes the queue then — the timer stays
/// armed until the last lease the thread took would have been due, even
/// when it was unlocked meanwhile. Only an idle thread (nothing armed for
/// a period), a long queue or a lease due sooner (a grant's short lease, a
/// read hold's keep-alive) wakes it — a lock + unlock costs no thread
/// wake-up.
#[derive(Default)]
struct Pending {
    queue: Mutex<Vec<Entry>>,
    /// When the thread's armed timer fires (`None`: its wheel is empty).
    armed_until: Mutex<Option<Instant>>,
}

/// Past this many queued registrations the thread is woken to take them, so
/// that short-lived leases do not pile up until the next renewal.
const QUEUE_WAKE: usize = 1_024;

/// The client's side of the renewal thread: the queue of new leases to it.
/// Which guards share a lease, and when the last of them goes, is the
/// ledger's (reentrant guards of one owner share one registration).
pub(crate) struct Renewer {
    /// Wakes the thread; dropping it (with the client) makes the thread exit.
    wake: Sender<()>,
    pending: Arc<Pending>,
    /// The thread's batches in flight, which a release waits out (see
    /// `gate`).
    gate: Arc<gate::Gate>,
    pub(crate) counters: Arc<Counters>,
    /// Until when the client's registration is written (see
    /// `registration`).
    activity: Arc<registration::Activity>,
}

impl Renewer {
    /// Starts the renewal thread (its own connections and state only).
    ///
    /// `coalesce`: when a renewal comes due, every lease due within this much
    /// more is renewed in the same round trip (a little early), so leases
    /// taken at scattered moments still renew in few batches.
    ///
    /// `io_budget`: the socket timeout; one round trip may take twice that
    /// (a write and a read timing out, or a reconnect and a read). A
    /// lease whose renewal failed with less than that (and `margin` more)
    /// left before it runs out is reported lost at once — the client could
    /// not learn in time whether another renewal went through, so it may
    /// hold the lock no longer than it can be sure of.
    pub(crate) fn start(
        batches: Batches,
        coalesce: Duration,
        (io_budget, margin): (Duration, Duration),
        registration: registration::Registration,
    ) -> std::io::Result<Self> {
        let (renewer, mut worker) = Self::new(batches, coalesce, io_budget, registration);
        worker.io_budget += margin;
        std::thread::Builder::new()
            .name("leasehold-renew".into())
            .spawn(move || worker.run())?;
        Ok(renewer)
    }

    /// The client's side and the thread's, not started (see
    /// [`start`](Self::start); the loom models drive the thread's steps).
    fn new<B: RoundTrips>(
        batches: B,
        coalesce: Duration,
        io_budget: Duration,
        registration: registration::Registration,
    ) -> (Self, Worker<B>) {
        let (wake, rx) = crossbeam_channel::unbounded();
        let renewer = Renewer {
            wake,
            pending: Arc::default(),
            gate: Arc::default(),
            counters: Arc::default(),
            activity: Arc::new(registration::Activity::new()),
        };
        let worker = Worker {
            rx,
            pending: Arc::clone(&renewer.pending),
            batches,
            coalesce,
            io_budget: io_budget * 2 + TICK,
            wheel: Wheel::new(Instant::now()),
            entries: HashMap::new(),
            next_id: 0,
            gate: Arc::clone(&renewer.gate),
            counters: Arc::clone(&renewer.counters),
            registration,
            activity: Arc::clone(&renewer.activity),
            lull: None,
        };
        (renewer, worker)
    }

    /// A lock was taken at `now` with `lease`: keeps the client's
    /// registration written until then (waking the thread only when it is
    /// due; two atomics otherwise).
    pub(crate) fn touch(&self, now: Instant, lease: Duration) {
        if self.activity.touch(now, lease) {
            let _ = self.wake.send(());
        }
    }

    /// Registers a watchdog lease for renewal. Redis set `set` from
    /// `sent_at` on (the lease itself, or a grant's shorter one, which the
    /// first renewal lengthens to `lease`). `timeouts`: the timeout key
    /// prefix of a read hold (read/write lock). Stop it with
    /// [`cancel`](Self::cancel).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn register(
        &self,
        key: &str,
        owner: &str,
        lease: Duration,
        sent_at: Instant,
        set: Duration,
        timeouts: Option<&str>,
        meter: crate::meter::Kind,
    ) -> Arc<LeaseState> {
        self.enqueue(key, owner, lease, sent_at, set, |e| {
            e.timeouts = timeouts.map(Box::from);
            e.meter = meter;
        })
    }

    /// Registers semaphore permits `ids` (16 bytes each) in the lease table
    /// `timeouts` for renewal, as [`register`](Self::register) does a lock's
    /// lease: all of them together, lost when one is.
    pub(crate) fn register_permits(
        &self,
        timeouts: &str,
        ids: &[u8],
        lease: Duration,
        sent_at: Instant,
        set: Duration,
    ) -> Arc<LeaseState> {
        self.enqueue(timeouts, "", lease, sent_at, set, |e| {
            e.permits = Some(Box::from(ids));
            e.meter = "permits";
        })
    }

    /// Registers a scheduled job's lock `key`, held with `value`, for
    /// renewal to `lease` (its `lock_at_most_for`) every third of it, as
    /// [`register`](Self::register) does a lock's lease.
    pub(crate) fn register_job(
        &self,
        key: &str,
        value: &str,
        lease: Duration,
        sent_at: Instant,
    ) -> Arc<LeaseState> {
        self.enqueue(key, value, lease, sent_at, lease, |e| {
            e.job = true;
            e.meter = "job";
        })
    }

    /// A read hold with an explicit lease (`set`, from `sent_at`): not
    /// renewed, but until it ends the thread keeps the shared hash alive as
    /// long as it (see [`READ_KEEPALIVE`](crate::protocol::READ_KEEPALIVE)).
    /// Each such hold has an entry of its own (its own end); give it back
    /// with [`cancel`](Self::cancel).
    pub(crate) fn keep(
        &self,
        key: &str,
        owner: &str,
        sent_at: Instant,
        set: Duration,
        timeouts: &str,
    ) -> Arc<LeaseState> {
        self.enqueue(key, owner, set, sent_at, set, |e| {
            e.timeouts = Some(Box::from(timeouts));
            e.until = Some(sent_at + set);
            e.meter = "read";
        })
    }

    /// A lease is done with (its last guard went): the thread sends
    /// nothing more for it in any batch it begins from now on (it drops
    /// the entry when it next meets it). A batch already in flight may
    /// still renew it: that one is returned, for the release to wait out
    /// with [`settled`](Self::settled) before it is sent. `registered`: it
    /// was a watchdog lease (counted live).
    pub(crate) fn cancel(&self, state: &Arc<LeaseState>, registered: bool) -> InFlight {
        if state.cancelled.swap(true, Ordering::AcqRel) {
            return InFlight(None);
        }
        if registered {
            self.counters.live_leases.fetch_sub(1, Ordering::Relaxed);
        }
        // A lost lease is never sent again; a live one may be in flight.
        match state.is_lost() {
            true => InFlight(None),
            false => self.gate.in_flight(),
        }
    }

    /// Waits until the batch `in_flight` (from [`cancel`](Self::cancel))
    /// ended: once this returns, no renewal of the cancelled lease is
    /// on its way to Redis. A thread blocks (at most the batch's round
    /// trip, bounded by the socket timeout); a task parks.
    pub(crate) async fn settled(&self, park: Park, in_flight: InFlight) {
        self.gate.ended(park, in_flight).await;
    }

    /// A new lease for the renewal thread, queued (see [`Pending`]); `more`
    /// sets what only some entries have.
    fn enqueue(
        &self,
        key: &str,
        owner: &str,
        lease: Duration,
        sent_at: Instant,
        set: Duration,
        more: impl FnOnce(&mut Entry),
    ) -> Arc<LeaseState> {
        let state = LeaseState::new(sent_at + set);
        let mut entry = Entry {
            key: Arc::from(key),
            owner: Arc::from(owner),
            lease: set,
            state: Arc::clone(&state),
            due: sent_at,
            timeouts: None,
            until: None,
            permits: None,
            job: false,
            meter: "plain",
        };
        more(&mut entry);
        entry.due = sent_at + entry.period();
        entry.lease = lease;
        let (due, until) = (entry.due, entry.until);
        // Read under the queue's lock, as the thread publishes it (see
        // `Worker::arm`): never a value older than the thread's last look.
        let (queued, early) = {
            let mut queue = self.pending.queue.lock();
            queue.push(entry);
            let early = self.pending.armed_until.lock().is_none_or(|at| due < at);
            (queue.len(), early)
        };
        if queued >= QUEUE_WAKE || early {
            let _ = self.wake.send(());
        }
        if until.is_none() {
            self.counters.live_leases.fetch_add(1, Ordering::Relaxed);
        }
        state
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::registration::Registration;
    use super::worker::RoundTrips;
    use super::*;
    use crate::conn::Sent;

    /// Redis's side for the thread's steps: every renewal answered "ours".
    struct Renewed;

    impl RoundTrips for Renewed {
        fn send(&mut self, _: &redis::Cmd, commands: &[(&str, redis::Cmd)]) -> Sent {
            Sent {
                answers: commands.iter().map(|_| Ok(redis::Value::Int(1))).collect(),
                unacknowledged: vec![None; commands.len()],
                round_trips: 1,
            }
        }

        fn pipeline(&mut self, _: &str, _: &redis::Pipeline) -> redis::RedisResult<()> {
            Ok(())
        }
    }

    /// A loop of lock + unlock pairs with nothing else held: the thread is
    /// woken for the first lease only, not once a pair (on one CPU each
    /// wake-up was a switch to the thread and back, about a tenth of a
    /// pair's time).
    #[test]
    fn lock_and_unlock_pairs_wake_the_thread_once_a_period_not_once_a_pair() {
        const LEASE: Duration = Duration::from_secs(30);
        let registration = Registration {
            key: "leasehold_client:unit".into(),
            fields: Vec::new(),
        };
        let (renewer, mut worker) = Renewer::new(Renewed, Duration::ZERO, LEASE / 10, registration);
        let pair = || {
            let state = renewer.register("k", "o", LEASE, Instant::now(), LEASE, None, "plain");
            let in_flight = renewer.cancel(&state, true);
            assert!(!in_flight.is_some(), "no batch is in flight here");
        };
        pair();
        assert!(
            worker.rx.try_recv().is_ok(),
            "the first lease wakes the idle thread"
        );
        worker.arm(Instant::now());
        for _ in 0..100 {
            pair();
            worker.arm(Instant::now());
        }
        assert_eq!(worker.rx.try_iter().count(), 0, "the pairs woke the thread");
        assert!(worker.entries.is_empty(), "unlocked leases are not kept");
        // A lease due before the armed timer (a grant's short one) still
        // wakes it.
        let state = renewer.register(
            "k",
            "o",
            LEASE,
            Instant::now(),
            Duration::from_secs(3),
            None,
            "plain",
        );
        assert!(
            worker.rx.try_recv().is_ok(),
            "an earlier lease wakes the thread"
        );
        let in_flight = renewer.cancel(&state, true);
        assert!(!in_flight.is_some(), "no batch is in flight here");
    }

    /// A lease cancelled after the thread picked the due ones and before
    /// their batch (a later chunk of a large round) is done with: its entry
    /// goes, as one met cancelled anywhere else. (Kept, it was never met
    /// again — out of the wheel — and the client counted as active for
    /// ever: its registration rewritten every period.)
    #[test]
    fn a_lease_cancelled_before_its_batch_leaves_the_thread() {
        const LEASE: Duration = Duration::from_secs(30);
        let registration = Registration {
            key: "leasehold_client:unit".into(),
            fields: Vec::new(),
        };
        let (renewer, mut worker) = Renewer::new(Renewed, Duration::ZERO, LEASE / 10, registration);
        let register = || renewer.register("k", "o", LEASE, Instant::now(), LEASE, None, "plain");
        let (kept, cancelled) = (register(), register());
        worker.take_pending();
        let ids: Vec<u64> = worker.entries.keys().copied().collect();
        assert_eq!(ids.len(), 2);
        let in_flight = renewer.cancel(&cancelled, true);
        assert!(!in_flight.is_some(), "no batch is in flight here");
        worker.renew(&ids);
        assert_eq!(
            worker.entries.len(),
            1,
            "the cancelled lease's entry stayed"
        );
        let in_flight = renewer.cancel(&kept, true);
        assert!(!in_flight.is_some(), "no batch is in flight here");
    }

    /// Redis's side counting the registration's writes (every renewal
    /// answered "ours").
    struct Counting(Arc<std::sync::atomic::AtomicU64>);

    impl RoundTrips for Counting {
        fn send(&mut self, head: &redis::Cmd, commands: &[(&str, redis::Cmd)]) -> Sent {
            Renewed.send(head, commands)
        }

        fn pipeline(&mut self, _: &str, _: &redis::Pipeline) -> redis::RedisResult<()> {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Ok(())
        }
    }

    /// A due registration waits for a round only when that round comes
    /// within a third of its TTL: a lease unlocked before its round, next in
    /// the wheel (10 s away, inside a long round-trip budget), does not
    /// keep it from being written. (It was skipped while any round was due
    /// within the budget: with short locks always coming, never written.)
    #[test]
    fn a_due_registration_is_not_left_to_a_round_far_off() {
        const LEASE: Duration = Duration::from_secs(30);
        let registration = Registration {
            key: "leasehold_client:unit".into(),
            fields: Vec::new(),
        };
        let writes = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let (renewer, mut worker) = Renewer::new(
            Counting(Arc::clone(&writes)),
            Duration::ZERO,
            Duration::from_secs(10),
            registration,
        );
        // Written once before (a client's first is written at once): due
        // again a second after a failed try.
        worker.activity.written(Instant::now(), false);
        std::thread::sleep(Duration::from_millis(1_100));
        let state = renewer.register("k", "o", LEASE, Instant::now(), LEASE, None, "plain");
        worker.take_pending();
        let in_flight = renewer.cancel(&state, true);
        assert!(!in_flight.is_some(), "no batch is in flight here");
        worker.register();
        assert_eq!(writes.load(std::sync::atomic::Ordering::SeqCst), 1);
    }
}
