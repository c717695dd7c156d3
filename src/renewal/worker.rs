//! The renewal thread: takes new leases from the queue into the wheel, and
//! at each due slot renews every due lease in one pipelined round trip per
//! chunk (per node in a cluster), `SCRIPT LOAD` first, following `MOVED`/`ASK`
//! at once; a lease Redis says is not ours, or that could not be renewed
//! before it ran out, is marked lost.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{after, never, select, Receiver};
use parking_lot::Mutex;
use redis::{RedisResult, Value};

use super::lease::{LeaseLost, LeaseState};
use super::registration::{Activity, Registration};
use super::wheel::{Wheel, TICK};
use super::{Pending, CHUNK};
use crate::conn::{cluster, Router, Wire};
use crate::error::Retry;
use crate::protocol::{READ_KEEPALIVE, RENEW};
use crate::stats::Counters;

/// An error in one renewal's answer that says nothing about the lease (the
/// one classification, [`Retry`]): retry, not lost.
fn transient(e: &redis::RedisError) -> bool {
    Retry::of(e) != Retry::No
}

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

/// Opens the renewal thread's own connection (so renewal never queues
/// behind busy pooled connections).
pub(crate) type Connector = Box<dyn Fn() -> RedisResult<Wire> + Send>;

pub(super) struct Worker {
    pub(super) rx: Receiver<()>,
    pub(super) pending: Arc<Pending>,
    pub(super) connector: Connector,
    pub(super) con: Option<Wire>,
    /// A cluster's router: renewals go to the node serving each key.
    pub(super) router: Option<Arc<Router>>,
    /// Connections to cluster nodes, by `host:port`.
    pub(super) node_cons: HashMap<Arc<str>, Wire>,
    /// Connect and reply timeout of the node connections.
    pub(super) io_timeout: Duration,
    pub(super) coalesce: Duration,
    /// A round trip's worst case (twice the socket timeout) plus a tick.
    pub(super) io_budget: Duration,
    pub(super) wheel: Wheel,
    pub(super) entries: HashMap<u64, Entry>,
    pub(super) next_id: u64,
    pub(super) gate: Arc<Mutex<()>>,
    pub(super) counters: Arc<Counters>,
    pub(super) sha: String,
    /// The client's registration, written while it is active.
    pub(super) registration: Registration,
    pub(super) activity: Arc<Activity>,
}

impl Worker {
    pub(super) fn run(&mut self) {
        loop {
            self.take_pending();
            let next = self.wheel.next_due();
            if next.is_none() {
                // Disarm first, then look once more: a lease queued after
                // this look sees `armed == false` and wakes us.
                *self.pending.armed_until.lock() = None;
                self.pending.armed.store(false, Ordering::SeqCst);
                if !self.pending.queue.lock().is_empty() {
                    continue;
                }
            } else {
                *self.pending.armed_until.lock() = next;
                self.pending.armed.store(true, Ordering::SeqCst);
            }
            // The registration's next write, while the client is active.
            let register = self.activity.due(Instant::now(), !self.entries.is_empty());
            let timer = match (next, register) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            let timer = match timer {
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

    /// Writes the client's registration when it is due (its own small round
    /// trip, off the lock path; to the node of its key in a cluster).
    fn register(&mut self) {
        let now = Instant::now();
        if self
            .activity
            .due(now, !self.entries.is_empty())
            .is_none_or(|due| due > now)
        {
            return;
        }
        let mut pipe = redis::pipe();
        self.registration.write(&mut pipe);
        let node = match &self.router {
            Some(router) => match router.node_for(&self.registration.key) {
                Ok(node) => Some(node),
                Err(_) => {
                    self.activity.written(now, false);
                    return;
                }
            },
            None => None,
        };
        let ok = self.send(node.as_ref(), &pipe).is_ok();
        if !ok {
            tracing::debug!("leasehold: could not write the client registration; retrying");
        }
        self.activity.written(now, ok);
    }

    /// Moves queued leases into the wheel, skipping those already unlocked.
    fn take_pending(&mut self) {
        let queued = std::mem::take(&mut *self.pending.queue.lock());
        for entry in queued {
            if entry.state.cancelled.load(Ordering::Acquire) {
                continue;
            }
            self.next_id += 1;
            self.wheel.insert(self.next_id, entry.due);
            self.entries.insert(self.next_id, entry);
        }
    }

    fn tick(&mut self) {
        let now = Instant::now();
        let horizon = now + self.coalesce;
        let mut due = Vec::new();
        for id in self.wheel.take_due(horizon) {
            match self.entries.get(&id) {
                Some(e)
                    if e.state.cancelled.load(Ordering::Acquire)
                        || e.until.is_some_and(|u| u <= now) =>
                {
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

    /// Renews one chunk in one round trip and acts on each answer.
    fn renew(&mut self, ids: &[u64]) {
        let gate = Arc::clone(&self.gate);
        let _sending = gate.lock();
        let live: Vec<u64> = ids
            .iter()
            .copied()
            .filter(|id| {
                self.entries
                    .get(id)
                    .is_some_and(|e| !e.state.cancelled.load(Ordering::Acquire))
            })
            .collect();
        if live.is_empty() {
            return;
        }
        let Some(router) = self.router.clone() else {
            self.renew_on(None, &live, false);
            return;
        };
        // A cluster: one batch per primary, each renewal sent to the node
        // serving its key's slot (a batch never mixes nodes).
        let mut groups: HashMap<Arc<str>, Vec<u64>> = HashMap::new();
        let mut unroutable = Vec::new();
        for id in live {
            let Some(e) = self.entries.get(&id) else {
                continue;
            };
            match router.node_for(&e.key) {
                Ok(node) => groups.entry(node).or_default().push(id),
                Err(_) => unroutable.push(id),
            }
        }
        if !unroutable.is_empty() {
            self.retry_later(&unroutable, Instant::now());
        }
        let mut redirected: HashMap<(Arc<str>, bool), Vec<u64>> = HashMap::new();
        for (node, ids) in groups {
            for (id, to, ask) in self.renew_on(Some(&node), &ids, false) {
                redirected.entry((to, ask)).or_default().push(id);
            }
        }
        // Slots that moved (MOVED) or are moving (ASK: the key is on the
        // target already): once more, at once, where the node pointed.
        for ((node, ask), ids) in redirected {
            let again = self.renew_on(Some(&node), &ids, ask);
            let ids: Vec<u64> = again.into_iter().map(|(id, _, _)| id).collect();
            if !ids.is_empty() {
                self.retry_later(&ids, Instant::now());
            }
        }
    }

    /// Renews `live` in one round trip (on `node` of a cluster; `asking`:
    /// each renewal after `ASKING`) and acts on each answer. Returns the
    /// renewals a cluster redirected: (id, node, whether it was `ASK`).
    fn renew_on(
        &mut self,
        node: Option<&Arc<str>>,
        live: &[u64],
        asking: bool,
    ) -> Vec<(u64, Arc<str>, bool)> {
        let mut redirected = Vec::new();
        let mut pipe = redis::pipe();
        pipe.cmd("SCRIPT").arg("LOAD").arg(RENEW).ignore();
        for id in live {
            if let Some(e) = self.entries.get(id) {
                if asking {
                    pipe.cmd("ASKING").ignore();
                }
                let cmd = pipe.cmd("EVALSHA").arg(&self.sha);
                match &e.timeouts {
                    None => cmd.arg(1).arg(&*e.key),
                    Some(prefix) => cmd.arg(2).arg(&*e.key).arg(&**prefix),
                };
                match e.until {
                    None => cmd.arg(e.lease.as_millis().max(1) as u64).arg(&*e.owner),
                    // Keep: what is left of the explicit lease.
                    Some(until) => {
                        let left = until.saturating_duration_since(Instant::now());
                        cmd.arg(left.as_millis().max(1) as u64)
                            .arg(&*e.owner)
                            .arg("k")
                    }
                };
            }
        }
        let sent_at = Instant::now();
        let result = self.send(node, pipe.ignore_errors());
        self.counters
            .renewals_sent
            .fetch_add(live.len() as u64, Ordering::Relaxed);
        self.counters
            .renewal_round_trips
            .fetch_add(1, Ordering::Relaxed);
        match result {
            Ok(answers) if answers.len() == live.len() => {
                let mut again = Vec::new();
                for (id, answer) in live.iter().zip(answers) {
                    match answer {
                        Ok(v) => self.settle(*id, matches!(v, Value::Int(1)), sent_at),
                        // The server is a replica now (a failover), loading,
                        // without a primary, or the slot moved: not an
                        // answer about the lease. Reconnect (to the new
                        // primary, the new node) and retry.
                        Err(e) if transient(&e) => match (&self.router, e.redirect_node()) {
                            (Some(router), Some((addr, slot))) => {
                                let ask = e.code() == Some("ASK");
                                if !ask {
                                    router.moved(slot, addr);
                                }
                                redirected.push((*id, Arc::from(addr), ask));
                            }
                            _ => again.push(*id),
                        },
                        Err(_) => self.settle(*id, false, sent_at),
                    }
                }
                if !again.is_empty() {
                    self.drop_connection(node);
                    self.retry_later(&again, sent_at);
                }
            }
            Ok(answers) => {
                tracing::warn!(
                    expected = live.len(),
                    got = answers.len(),
                    "leasehold: renewal answers did not match; retrying"
                );
                self.retry_later(live, sent_at);
            }
            Err(e) => {
                tracing::warn!(error = %e, "leasehold: lease renewal failed; retrying");
                if let Some(router) = &self.router {
                    let _ = router.refresh(); // a node may have failed over
                }
                self.retry_later(live, sent_at);
            }
        }
        redirected
    }

    fn drop_connection(&mut self, node: Option<&Arc<str>>) {
        match node {
            None => self.con = None,
            Some(node) => {
                self.node_cons.remove(node);
            }
        }
    }

    /// One round trip on the thread's connection (to `node` of a cluster),
    /// (re)connecting as needed; a connection that failed is dropped and
    /// reopened next time.
    fn send(
        &mut self,
        node: Option<&Arc<str>>,
        pipe: &redis::Pipeline,
    ) -> RedisResult<Vec<RedisResult<Value>>> {
        let con = match (node, &self.router) {
            (Some(node), Some(router)) => match self.node_cons.get_mut(node) {
                Some(con) => con,
                None => {
                    let info = router.info_for(node).ok_or_else(|| {
                        cluster::no_node(format!("bad cluster node address {node:?}"))
                    })?;
                    let con = router.connect(&info, self.io_timeout, self.io_timeout)?;
                    self.node_cons.entry(Arc::clone(node)).or_insert(con)
                }
            },
            _ => match self.con.as_mut() {
                Some(con) => con,
                None => self.con.insert((self.connector)()?),
            },
        };
        let result = pipe.query(con);
        if result.is_err() {
            self.drop_connection(node);
        }
        result
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
        } else if let Some(e) = self.entries.remove(&id) {
            if e.state
                .mark_lost(LeaseLost::NotOurs, &self.counters.leases_lost)
            {
                tracing::warn!(key = %e.key, "leasehold: lease lost (no longer ours in redis)");
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
                if let Some(e) = self.entries.remove(id) {
                    if e.state
                        .mark_lost(LeaseLost::Unreachable, &self.counters.leases_lost)
                    {
                        tracing::warn!(key = %e.key, "leasehold: lease lost (redis unreachable until it ran out)");
                    }
                }
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
