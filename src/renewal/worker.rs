//! The renewal thread: takes new leases from the queue into the wheel, and
//! at each due slot renews every due lease in one batch (per chunk, per
//! node: `conn::Batches` sends it and follows redirects), marking lost what
//! Redis says is not ours or what could not be renewed in time. Its round
//! trips go through [`RoundTrips`]: Redis, or a loom model's stand-in.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{after, never, select, Receiver};

use super::lease::{LeaseLost, LeaseState};
use super::registration::{Activity, Registration, TTL};
use super::wheel::{Wheel, TICK};
use super::{Pending, CHUNK};
use crate::conn::{Batches, Sent};
use crate::error::Retry;
use crate::protocol::{renew, READ_KEEPALIVE};
use crate::stats::Counters;

pub(super) struct Entry {
    pub(super) key: Arc<str>,
    pub(super) owner: Arc<str>,
    pub(super) lease: Duration,
    pub(super) state: Arc<LeaseState>,
    pub(super) due: Instant,
    /// A read hold's timeout key prefix (renewed with the hash).
    pub(super) timeouts: Option<Box<str>>,
    /// A read hold with an explicit lease: it ends then, and until then
    /// the thread only keeps the shared hash alive (see `RENEW`'s keep).
    pub(super) until: Option<Instant>,
    /// Semaphore permits: their ids (16 bytes each); `key` is then the
    /// semaphore's lease table.
    pub(super) permits: Option<Box<[u8]>>,
    /// A scheduled job's lock (a string holding `owner`, ShedLock's).
    pub(super) job: bool,
    /// What the counters (`meter`) call its hold's kind.
    pub(super) meter: crate::meter::Kind,
}

impl Entry {
    /// How long after a renewal the next is due: a third of the lease, and
    /// for a read hold at most [`READ_KEEPALIVE`].
    pub(super) fn period(&self) -> Duration {
        let third = self.lease / 3;
        match self.timeouts {
            Some(_) => third.min(READ_KEEPALIVE),
            None => third,
        }
    }
}

/// Where the thread's round trips go: Redis, through its own connections
/// ([`Batches`]) — or a loom model's stand-in (`renewal/loom.rs`).
pub(super) trait RoundTrips {
    /// Renewals in one batch per node, `head` first (see [`Batches::send`]).
    fn send(&mut self, head: &redis::Cmd, commands: &[(&str, redis::Cmd)]) -> Sent;
    /// One pipeline to `key`'s node (see [`Batches::pipeline`]).
    fn pipeline(&mut self, key: &str, pipe: &redis::Pipeline) -> redis::RedisResult<()>;
}

impl RoundTrips for Batches {
    fn send(&mut self, head: &redis::Cmd, commands: &[(&str, redis::Cmd)]) -> Sent {
        Batches::send(self, head, commands)
    }

    fn pipeline(&mut self, key: &str, pipe: &redis::Pipeline) -> redis::RedisResult<()> {
        Batches::pipeline(self, key, pipe)
    }
}

pub(super) struct Worker<B = Batches> {
    pub(super) rx: Receiver<()>,
    pub(super) pending: Arc<Pending>,
    /// The thread's own connections (one per cluster node).
    pub(super) batches: B,
    pub(super) coalesce: Duration,
    /// A round trip's worst case (twice the socket timeout) plus a tick.
    pub(super) io_budget: Duration,
    pub(super) wheel: Wheel,
    pub(super) entries: HashMap<u64, Entry>,
    pub(super) next_id: u64,
    pub(super) gate: Arc<super::gate::Gate>,
    pub(super) counters: Arc<Counters>,
    /// The client's registration, written while it is active.
    pub(super) registration: Registration,
    pub(super) activity: Arc<Activity>,
    /// When the last lease the thread took would have been due, unlocked
    /// or not (see [`arm`](Self::arm)).
    pub(super) lull: Option<Instant>,
}

impl<B: RoundTrips> Worker<B> {
    pub(super) fn run(&mut self) {
        loop {
            let timer = match self.arm(Instant::now()) {
                Some(at) => after(at.saturating_duration_since(Instant::now())),
                None => never(),
            };
            select! {
                recv(self.rx) -> msg => if msg.is_err() {
                    return; // the client is gone
                },
                recv(timer) -> _ => self.tick(),
            }
            self.register();
        }
    }

    /// Takes the queued leases and says when the thread's timer is to fire
    /// next (`None`: never), publishing it first for `Renewer::enqueue`,
    /// which wakes the thread only for a lease due sooner.
    pub(super) fn arm(&mut self, now: Instant) -> Option<Instant> {
        loop {
            self.take_pending();
            // Till the last lease taken would have been due, the timer
            // stays armed even when every lease was unlocked before the
            // thread met it: a loop of lock + unlock pairs then wakes the
            // thread once a period, not once a pair.
            let lull = self.lull.filter(|&at| at > now);
            let next = match (self.wheel.next_due(), lull) {
                (Some(due), Some(lull)) => Some(due.min(lull)),
                (due, lull) => due.or(lull),
            };
            // Published under the queue's lock, after a last look at the
            // queue: a lease queued before this look is taken first (once
            // more round), and one queued after it reads what is published
            // here (`Renewer::enqueue` reads it under the same lock) and
            // wakes us when it is due sooner.
            {
                let queue = self.pending.queue.lock();
                if !queue.is_empty() {
                    continue;
                }
                *self.pending.armed_until.lock() = next;
            }
            // The registration's next write, while the client is active —
            // unless a round due first carries it (see `carried`).
            let register = self.activity.due(now, !self.entries.is_empty());
            let register = register.filter(|_| !self.carried(now));
            return next.into_iter().chain(register).min();
        }
    }

    /// Whether a renewal round comes before the registration, due now or
    /// at `now`, is a third of its [`TTL`] late (still two thirds before
    /// it expires): that round writes it (see [`renew`](Self::renew)), so
    /// a node that does not answer holds the thread once for both, not once
    /// for each — which, with a lease barely over two socket timeouts, was
    /// enough for a lease on a running node to run out. A round that then
    /// has nothing to renew (its leases unlocked) leaves it to
    /// [`register`](Self::register), a third of the TTL late at most. A
    /// client's first registration is not left to a round.
    fn carried(&self, now: Instant) -> bool {
        let Some(due) = self.activity.due(now, true) else {
            return false;
        };
        if self.activity.never_written() {
            return false; // a new client's first: at once, as `inspect` expects
        }
        self.wheel
            .next_due()
            .is_some_and(|round| round <= due + TTL / 3)
    }

    /// Writes the client's registration when due (its own round trip, to
    /// its key's node).
    pub(super) fn register(&mut self) {
        let now = Instant::now();
        let due = self.activity.due(now, !self.entries.is_empty());
        if due.is_none_or(|due| due > now) || self.carried(now) {
            return;
        }
        let mut pipe = redis::pipe();
        self.registration.write(&mut pipe);
        let ok = self.batches.pipeline(&self.registration.key, &pipe).is_ok();
        if !ok {
            tracing::debug!("leasehold: could not write the client registration; retrying");
        }
        // From when the write ended: a failed one may have waited out the
        // socket timeout.
        self.activity.written(Instant::now(), ok);
    }

    /// Moves queued leases into the wheel, skipping those already unlocked.
    pub(super) fn take_pending(&mut self) {
        let queued = std::mem::take(&mut *self.pending.queue.lock());
        self.lull = self.lull.max(queued.iter().map(|e| e.due).max());
        for entry in queued.into_iter().filter(|e| !e.state.is_cancelled()) {
            self.next_id += 1;
            self.wheel.insert(self.next_id, entry.due);
            self.entries.insert(self.next_id, entry);
        }
    }

    fn tick(&mut self) {
        let now = Instant::now();
        let horizon = now + self.coalesce;
        let mut due = Vec::new();
        for id in self.wheel.take_due(now, horizon) {
            match self.entries.get(&id) {
                Some(e) if e.state.is_cancelled() || e.until.is_some_and(|u| u <= now) => {
                    self.entries.remove(&id); // unlocked since, or its lease ended
                }
                Some(e) if e.due <= horizon => due.push(id),
                Some(e) => self.wheel.insert(id, e.due), // a later turn
                None => {}
            }
        }
        for chunk in due.chunks(CHUNK) {
            self.renew(chunk);
        }
    }

    /// Renews one chunk in one batch and acts on each answer.
    pub(super) fn renew(&mut self, ids: &[u64]) {
        let gate = Arc::clone(&self.gate);
        let _sending = gate.begin();
        let now = Instant::now();
        let mut live = Vec::with_capacity(ids.len());
        let mut commands = Vec::with_capacity(ids.len());
        // Unlocked since `tick` picked them (a later chunk's): done with,
        // as anywhere else.
        let mut gone = Vec::new();
        for id in ids {
            let Some(e) = self.entries.get(id) else {
                continue;
            };
            if e.state.is_cancelled() {
                gone.push(*id);
                continue;
            }
            // Keep: what is left of an explicit lease.
            let keep = e.until.map(|until| until.saturating_duration_since(now));
            let call = match &e.permits {
                Some(ids) => renew::renew_permits_call(&e.key, ids, e.lease),
                None if e.job => renew::renew_job_call(&e.key, &e.owner, e.lease),
                None => renew::renew_call(&e.key, &e.owner, e.lease, e.timeouts.as_deref(), keep),
            };
            live.push(*id);
            commands.push((&*e.key, call));
        }
        if live.is_empty() {
            drop(commands);
            for id in gone {
                self.entries.remove(&id);
            }
            return;
        }
        // The registration rides along when due, as a lease does (within
        // the rounds' horizon; its answers are the last).
        let register = (self.activity.due(now, true)).is_some_and(|due| due <= now + self.coalesce);
        if register {
            for cmd in self.registration.commands() {
                commands.push((&*self.registration.key, cmd));
            }
        }
        let sent_at = Instant::now();
        let mut sent = self.batches.send(&renew::load(), &commands);
        drop(commands);
        for id in gone {
            self.entries.remove(&id);
        }
        if register {
            let answers = sent.answers.split_off(live.len());
            sent.unacknowledged.truncate(live.len());
            self.activity
                .written(Instant::now(), answers.iter().all(Result::is_ok));
        }
        let counters = &self.counters;
        counters
            .renewals_sent
            .fetch_add(live.len() as u64, Ordering::Relaxed);
        counters
            .renewal_round_trips
            .fetch_add(sent.round_trips, Ordering::Relaxed);
        let mut again = Vec::new();
        let mut failure = None;
        let answers = sent.answers.into_iter().zip(sent.unacknowledged);
        for (id, (answer, unacknowledged)) in live.into_iter().zip(answers) {
            match (answer, unacknowledged) {
                // Lengthened on the primary, not on enough replicas: it
                // counts for nothing until acknowledged (retried).
                (Ok(v), Some(e)) if renew::renewed(&v) => {
                    failure.get_or_insert(e);
                    again.push(id);
                }
                (Ok(v), _) => self.settle(id, renew::renewed(&v), sent_at),
                // Not an answer about the lease (Redis unreachable, a
                // replica after a failover, loading, a slot moving): retry.
                (Err(e), _) if Retry::of(&e) != Retry::No => {
                    failure.get_or_insert(e);
                    again.push(id);
                }
                (Err(_), _) => self.settle(id, false, sent_at),
            }
        }
        if let Some(e) = failure {
            tracing::warn!(error = %e, leases = again.len(), "leasehold: lease renewal failed; retrying");
            self.retry_later(&again, sent_at);
        }
    }

    fn settle(&mut self, id: u64, renewed: bool, sent_at: Instant) {
        if renewed {
            if let Some(e) = self.entries.get_mut(&id) {
                if e.until.is_none() {
                    *e.state.valid_until.lock() = sent_at + e.lease;
                }
                e.due = sent_at + e.period();
                self.wheel.insert(id, e.due);
            }
        } else {
            self.lose(id, LeaseLost::NotOurs);
        }
    }

    /// Drops entry `id` and marks its lease lost (once: one WARN).
    fn lose(&mut self, id: u64, why: LeaseLost) {
        let Some(e) = self.entries.remove(&id) else {
            return;
        };
        if e.state.mark_lost(why.clone(), &self.counters.leases_lost) {
            tracing::warn!(key = %e.key, "leasehold: lease lost ({why})");
            // A Redlock node's lease is no hold: its quorum counts the
            // Redlock's loss (`Quorum`).
            if !e.state.in_quorum() {
                crate::meter::lost(e.meter);
            }
        }
    }

    /// Redis did not answer: lost if the lease runs out before another round
    /// trip could confirm it, otherwise try again soon (transient errors are
    /// not losses).
    fn retry_later(&mut self, ids: &[u64], sent_at: Instant) {
        let now = Instant::now();
        for id in ids {
            let Some(e) = self.entries.get_mut(id) else {
                continue;
            };
            let valid_until = *e.state.valid_until.lock();
            if now + self.io_budget >= valid_until {
                self.lose(*id, LeaseLost::Unreachable);
                continue;
            }
            // Retry within a tenth of the lease, and early enough that a
            // failure is known before the lease runs out.
            let last_chance = valid_until.checked_sub(self.io_budget).unwrap_or(now);
            let retry = (sent_at + e.lease / 10).max(now + TICK).min(last_chance);
            e.due = retry;
            self.wheel.insert(*id, retry);
        }
    }
}
