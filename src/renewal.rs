//! The watchdog: one renewal thread per client, driven by a timer wheel.
//!
//! Guards taken without an explicit lease register their lease here; every
//! lease/3 the thread renews all due leases in one pipelined round trip per
//! chunk (`SCRIPT LOAD` at the head, so a flushed script cache cannot break
//! renewal), owner-checked inside Lua. A lease that Redis says is no longer
//! ours, or that could not be renewed before it ran out, is marked lost and
//! its guard is told.
//!
//! # The wheel
//! One level of [`SLOTS`] slots of [`TICK`] each (about 41 s), hashed: an
//! entry due beyond one turn waits in its slot until its turn comes. A bitmap
//! of non-empty slots finds the next due slot without scanning, and the thread
//! parks in `select!` until exactly then (or a control message). Insert is
//! O(1); cancel is O(1) (the entry is dropped from the slab, its slot forgets
//! it when visited). 10 ms precision is plenty for renewals every lease/3 —
//! a coarse single level instead of tokio's six, traded for simplicity.
//!
//! The thread holds no `Arc` to the client: it exits when the client's
//! internals (kept alive by every clone and every guard) are dropped and the
//! control channel disconnects.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicIsize, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use crossbeam_channel::{after, never, select, Receiver, Sender};
use parking_lot::Mutex;
use redis::{RedisResult, Value};

use crate::cluster::Router;
use crate::raw::RENEW;

/// Wheel resolution.
const TICK: Duration = Duration::from_millis(10);
/// Wheel size (a power of two; 64 words of bitmap).
const SLOTS: usize = 4096;
/// Most renewals in one pipelined round trip.
pub(crate) const CHUNK: usize = 1_000;

/// Why a lease was lost, as told to the guard's holder.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LeaseLost {
    /// Redis no longer had our owner in the lock (expired, deleted, taken).
    NotOurs,
    /// Redis could not be reached until the lease had run out.
    Unreachable,
}

impl std::fmt::Display for LeaseLost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LeaseLost::NotOurs => f.write_str("redis no longer had this owner in the lock"),
            LeaseLost::Unreachable => {
                f.write_str("redis could not be reached before the lease ran out")
            }
        }
    }
}

/// The state one lease shares between its guards and the renewal thread.
pub(crate) struct LeaseState {
    lost: AtomicBool,
    /// Set at unlock, checked by the thread under the send gate.
    cancelled: AtomicBool,
    /// Until when the lease is known to be alive: when the last successful
    /// acquire or renewal was *sent*, plus the lease.
    valid_until: Mutex<Instant>,
    /// Why it was lost, and the channel handed out by `lost()` — made only
    /// when someone asks for it (most guards never do; it costs allocations).
    signal: Mutex<LostSignal>,
    /// A Redlock hold this lease is one node's part of.
    quorum: OnceLock<Arc<Quorum>>,
}

/// A Redlock hold over several nodes' leases: lost once more of them are
/// lost than the majority can spare.
pub(crate) struct Quorum {
    /// Node leases that may still be lost before the hold is.
    spare: AtomicIsize,
    /// The hold's own state (its lost signal).
    pub(crate) state: Arc<LeaseState>,
    lost_count: Arc<AtomicU64>,
}

impl Quorum {
    /// A hold on `held` nodes that needs `majority` of them.
    pub(crate) fn new(
        held: usize,
        majority: usize,
        state: Arc<LeaseState>,
        lost_count: Arc<AtomicU64>,
    ) -> Arc<Self> {
        let spare = isize::try_from(held.saturating_sub(majority)).unwrap_or(isize::MAX);
        Arc::new(Quorum {
            spare: AtomicIsize::new(spare),
            state,
            lost_count,
        })
    }

    /// One more node lease was lost.
    fn node_lost(&self, why: LeaseLost) {
        if self.spare.fetch_sub(1, Ordering::AcqRel) <= 0 {
            self.state.mark_lost(why, &self.lost_count);
        }
    }
}

#[derive(Default)]
struct LostSignal {
    why: Option<LeaseLost>,
    channel: Option<(Sender<LeaseLost>, Receiver<LeaseLost>)>,
}

impl LeaseState {
    pub(crate) fn new(valid_until: Instant) -> Arc<Self> {
        Arc::new(LeaseState {
            lost: AtomicBool::new(false),
            cancelled: AtomicBool::new(false),
            valid_until: Mutex::new(valid_until),
            signal: Mutex::new(LostSignal::default()),
            quorum: OnceLock::new(),
        })
    }

    /// Makes this lease one node's part of a Redlock hold. Called right
    /// after the lease was registered: the renewal thread first looks at it
    /// a third of the lease later, so it cannot have been lost yet.
    pub(crate) fn join(&self, quorum: &Arc<Quorum>) {
        let _ = self.quorum.set(Arc::clone(quorum));
    }

    pub(crate) fn is_held(&self) -> bool {
        !self.lost.load(Ordering::Acquire) && Instant::now() < *self.valid_until.lock()
    }

    /// Until when the lease is known to be ours (extended by each renewal).
    pub(crate) fn valid_until(&self) -> Instant {
        *self.valid_until.lock()
    }

    pub(crate) fn is_lost(&self) -> bool {
        self.lost.load(Ordering::Acquire)
    }

    /// The one channel of this lease; it receives the reason once, also
    /// when the lease was lost before the channel was asked for.
    pub(crate) fn lost_receiver(&self) -> Receiver<LeaseLost> {
        let mut signal = self.signal.lock();
        if let Some((_, rx)) = &signal.channel {
            return rx.clone();
        }
        let (tx, rx) = crossbeam_channel::bounded(1);
        if let Some(why) = &signal.why {
            let _ = tx.try_send(why.clone());
        }
        signal.channel = Some((tx, rx.clone()));
        rx
    }

    /// Marks the lease lost once, counting it in `lost_count` before anyone
    /// is told (a holder woken by the signal sees the counter already up);
    /// returns whether this call did it.
    fn mark_lost(&self, why: LeaseLost, lost_count: &AtomicU64) -> bool {
        if self.lost.swap(true, Ordering::AcqRel) {
            return false;
        }
        lost_count.fetch_add(1, Ordering::Relaxed);
        let mut signal = self.signal.lock();
        if let Some((tx, _)) = &signal.channel {
            let _ = tx.try_send(why.clone());
        }
        signal.why = Some(why.clone());
        drop(signal);
        if let Some(quorum) = self.quorum.get() {
            quorum.node_lost(why);
        }
        true
    }
}

/// A snapshot of a client's counters, from
/// [`LockClient::stats`](crate::LockClient::stats), for export to metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Watchdog leases being renewed now (reentrant holds count once).
    pub live_leases: u64,
    /// Lease renewals sent since the client was built.
    pub renewals_sent: u64,
    /// Round trips those renewals took (one per chunk of up to 1,000).
    pub renewal_round_trips: u64,
    /// Leases found lost since the client was built.
    pub leases_lost: u64,
    /// Threads parked waiting for a lock right now: on pub/sub for another
    /// client's release, or queued behind a thread of this client.
    pub waiters_parked: u64,
    /// Of those, the threads queued behind another thread of this client
    /// (they send nothing to Redis while they wait).
    pub waiters_queued: u64,
    /// Locks passed directly from one thread of this client to another by a
    /// release, since the client was built (one round trip each).
    pub handoffs: u64,
}

#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) live_leases: AtomicU64,
    pub(crate) renewals_sent: AtomicU64,
    pub(crate) renewal_round_trips: AtomicU64,
    pub(crate) leases_lost: AtomicU64,
    pub(crate) waiters_parked: AtomicU64,
}

impl Counters {
    pub(crate) fn snapshot(&self) -> Stats {
        Stats {
            live_leases: self.live_leases.load(Ordering::Relaxed),
            renewals_sent: self.renewals_sent.load(Ordering::Relaxed),
            renewal_round_trips: self.renewal_round_trips.load(Ordering::Relaxed),
            leases_lost: self.leases_lost.load(Ordering::Relaxed),
            waiters_parked: self.waiters_parked.load(Ordering::Relaxed),
            // Filled in by the client from its in-process queues.
            waiters_queued: 0,
            handoffs: 0,
        }
    }
}

/// Leases registered since the thread last looked. Registering does not wake
/// the thread while it has a timer armed: every watchdog lease of a client has
/// the same length, so a new one is never due before the armed timer fires,
/// and the thread takes the queue then. Only an idle thread (nothing armed)
/// or a long queue is woken — a lock + unlock costs no thread wake-up.
struct Pending {
    queue: Mutex<Vec<Entry>>,
    /// The thread has a timer armed (its wheel is not empty).
    armed: AtomicBool,
}

/// Past this many queued registrations the thread is woken to take them, so
/// that short-lived leases do not pile up until the next renewal.
const QUEUE_WAKE: usize = 1_024;

/// The client's side of the renewal thread: a registry of watchdog leases
/// (reentrant guards of one owner share one entry) and the queue to it.
pub(crate) struct Renewer {
    /// Wakes the thread; dropping it (with the client) makes the thread exit.
    wake: Sender<()>,
    pending: Arc<Pending>,
    /// Live watchdog leases by lock key, then owner (a key has one owner in
    /// the normal case; looked up by `&str`, so no allocation at unlock).
    registry: Mutex<HashMap<Arc<str>, Vec<Registered>>>,
    /// Held by the thread while it sends a batch; taken briefly at unlock so
    /// that no renewal of a cancelled lease is sent after unlock returns.
    gate: Arc<Mutex<()>>,
    pub(crate) counters: Arc<Counters>,
}

struct Registered {
    owner: Arc<str>,
    refs: usize,
    state: Arc<LeaseState>,
}

impl Renewer {
    /// Starts the renewal thread. It holds only its own connection and state,
    /// nothing of the client.
    ///
    /// `coalesce`: when a renewal comes due, every lease due within this much
    /// more is renewed in the same round trip (a little early), so leases
    /// taken at scattered moments still renew in few batches.
    ///
    /// `io_budget`: the socket timeout; one round trip may take twice that
    /// (a write and a read timing out, or a reconnect and a read). A
    /// lease whose renewal failed with less than that left before it runs
    /// out is reported lost at once — the client could not learn in time
    /// whether another renewal went through, so it may hold the lock no
    /// longer than it can be sure of.
    pub(crate) fn start(
        connector: Connector,
        coalesce: Duration,
        io_budget: Duration,
        router: Option<Arc<Router>>,
    ) -> std::io::Result<Self> {
        let (wake, rx) = crossbeam_channel::unbounded();
        let gate = Arc::new(Mutex::new(()));
        let counters = Arc::new(Counters::default());
        let pending = Arc::new(Pending {
            queue: Mutex::new(Vec::new()),
            armed: AtomicBool::new(false),
        });
        let mut worker = Worker {
            rx,
            pending: Arc::clone(&pending),
            connector,
            con: None,
            router,
            node_cons: HashMap::new(),
            io_timeout: io_budget,
            coalesce,
            io_budget: io_budget * 2 + TICK,
            wheel: Wheel::new(Instant::now()),
            entries: HashMap::new(),
            next_id: 0,
            gate: Arc::clone(&gate),
            counters: Arc::clone(&counters),
            sha: redis::Script::new(RENEW).get_hash().to_owned(),
        };
        std::thread::Builder::new()
            .name("leasehold-renew".into())
            .spawn(move || worker.run())?;
        Ok(Renewer {
            wake,
            pending,
            registry: Mutex::new(HashMap::new()),
            gate,
            counters,
        })
    }

    /// Registers a watchdog lease (or joins the entry of a reentrant hold).
    /// `timeouts`: the timeout key prefix of a read hold (read/write lock).
    pub(crate) fn register(
        &self,
        key: &str,
        owner: &str,
        lease: Duration,
        sent_at: Instant,
        timeouts: Option<&str>,
    ) -> Arc<LeaseState> {
        let mut reg = self.registry.lock();
        let key: Arc<str> = match reg.get_key_value(key) {
            Some((k, _)) => Arc::clone(k),
            None => Arc::from(key),
        };
        let holders = reg.entry(Arc::clone(&key)).or_default();
        if let Some(r) = holders.iter_mut().find(|r| &*r.owner == owner) {
            if !r.state.is_lost() {
                r.refs += 1;
                *r.state.valid_until.lock() = sent_at + lease;
                return Arc::clone(&r.state);
            }
            // A lost entry replaced by a fresh hold: the thread drops it.
            r.state.cancelled.store(true, Ordering::Release);
            self.counters.live_leases.fetch_sub(1, Ordering::Relaxed);
            let state = self.enqueue(key, Arc::clone(&r.owner), lease, sent_at, timeouts);
            r.refs = 1;
            r.state = Arc::clone(&state);
            return state;
        }
        let owner: Arc<str> = Arc::from(owner);
        let state = self.enqueue(key, Arc::clone(&owner), lease, sent_at, timeouts);
        holders.push(Registered {
            owner,
            refs: 1,
            state: Arc::clone(&state),
        });
        state
    }

    /// A new lease for the renewal thread: queued, waking the thread only when
    /// it has no timer armed or the queue is long.
    fn enqueue(
        &self,
        key: Arc<str>,
        owner: Arc<str>,
        lease: Duration,
        sent_at: Instant,
        timeouts: Option<&str>,
    ) -> Arc<LeaseState> {
        let state = LeaseState::new(sent_at + lease);
        let queued = {
            let mut queue = self.pending.queue.lock();
            queue.push(Entry {
                key,
                owner,
                lease,
                state: Arc::clone(&state),
                due: sent_at + lease / 3,
                timeouts: timeouts.map(Box::from),
            });
            queue.len()
        };
        if queued >= QUEUE_WAKE || !self.pending.armed.load(Ordering::SeqCst) {
            let _ = self.wake.send(());
        }
        self.counters.live_leases.fetch_add(1, Ordering::Relaxed);
        state
    }

    /// One guard of `state` is going away. When it was the last, renewal
    /// stops before this returns (the thread drops the entry when it next
    /// meets it).
    pub(crate) fn release(&self, key: &str, owner: &str, state: &Arc<LeaseState>) {
        let mut reg = self.registry.lock();
        let Some(holders) = reg.get_mut(key) else {
            return;
        };
        let Some(i) = holders.iter().position(|r| &*r.owner == owner) else {
            return;
        };
        let r = &mut holders[i];
        if !Arc::ptr_eq(&r.state, state) {
            return; // this guard's entry was already replaced
        }
        r.refs -= 1;
        if r.refs > 0 {
            return;
        }
        holders.swap_remove(i);
        if holders.is_empty() {
            reg.remove(key);
        }
        drop(reg);
        state.cancelled.store(true, Ordering::Release);
        drop(self.gate.lock()); // wait out a batch in flight
        self.counters.live_leases.fetch_sub(1, Ordering::Relaxed);
    }
}

/// An error in one renewal's answer that says nothing about the lease.
fn transient(e: &redis::RedisError) -> bool {
    e.is_io_error()
        || e.is_timeout()
        || matches!(
            e.code(),
            Some(
                "READONLY"
                    | "LOADING"
                    | "MASTERDOWN"
                    | "TRYAGAIN"
                    | "BUSY"
                    | "MOVED"
                    | "ASK"
                    | "CLUSTERDOWN"
            )
        )
}

struct Entry {
    key: Arc<str>,
    owner: Arc<str>,
    lease: Duration,
    state: Arc<LeaseState>,
    due: Instant,
    /// A read hold's timeout key prefix (renewed with the hash).
    timeouts: Option<Box<str>>,
}

/// Opens the renewal thread's own connection (so renewal never queues
/// behind busy pooled connections).
pub(crate) type Connector = Box<dyn Fn() -> RedisResult<redis::Connection> + Send>;

struct Worker {
    rx: Receiver<()>,
    pending: Arc<Pending>,
    connector: Connector,
    con: Option<redis::Connection>,
    /// A cluster's router: renewals go to the node serving each key.
    router: Option<Arc<Router>>,
    /// Connections to cluster nodes, by `host:port`.
    node_cons: HashMap<Arc<str>, redis::Connection>,
    /// Connect and reply timeout of the node connections.
    io_timeout: Duration,
    coalesce: Duration,
    /// A round trip's worst case (twice the socket timeout) plus a tick.
    io_budget: Duration,
    wheel: Wheel,
    entries: HashMap<u64, Entry>,
    next_id: u64,
    gate: Arc<Mutex<()>>,
    counters: Arc<Counters>,
    sha: String,
}

impl Worker {
    fn run(&mut self) {
        loop {
            self.take_pending();
            let next = self.wheel.next_due();
            if next.is_none() {
                // Disarm first, then look once more: a lease queued after
                // this look sees `armed == false` and wakes us.
                self.pending.armed.store(false, Ordering::SeqCst);
                if !self.pending.queue.lock().is_empty() {
                    continue;
                }
            } else {
                self.pending.armed.store(true, Ordering::SeqCst);
            }
            let timer = match next {
                Some(at) => after(at.saturating_duration_since(Instant::now())),
                None => never(),
            };
            select! {
                recv(self.rx) -> msg => if msg.is_err() {
                    return; // the client is gone
                },
                recv(timer) -> _ => self.tick(),
            }
        }
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
        let horizon = Instant::now() + self.coalesce;
        let mut due = Vec::new();
        for id in self.wheel.take_due(horizon) {
            match self.entries.get(&id) {
                Some(e) if e.state.cancelled.load(Ordering::Acquire) => {
                    self.entries.remove(&id); // unlocked since
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
                cmd.arg(e.lease.as_millis().max(1) as u64).arg(&*e.owner);
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
                        crate::cluster::no_node(format!("bad cluster node address {node:?}"))
                    })?;
                    let con =
                        redis::Client::open(info)?.get_connection_with_timeout(self.io_timeout)?;
                    con.set_read_timeout(Some(self.io_timeout))?;
                    con.set_write_timeout(Some(self.io_timeout))?;
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
                *e.state.valid_until.lock() = sent_at + e.lease;
                e.due = sent_at + e.lease / 3;
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

/// A single-level hashed timer wheel of `SLOTS` slots of `TICK`.
struct Wheel {
    origin: Instant,
    /// The next tick to visit; every slot before it has been taken.
    cursor: u64,
    slots: Vec<Vec<u64>>,
    occupied: [u64; SLOTS / 64],
}

impl Wheel {
    fn new(origin: Instant) -> Self {
        Wheel {
            origin,
            cursor: 0,
            slots: (0..SLOTS).map(|_| Vec::new()).collect(),
            occupied: [0; SLOTS / 64],
        }
    }

    fn tick_of(&self, at: Instant) -> u64 {
        let d = at.saturating_duration_since(self.origin);
        (d.as_nanos() / TICK.as_nanos()) as u64
    }

    fn insert(&mut self, id: u64, due: Instant) {
        // Round up to the slot boundary; never into a slot already visited.
        let tick = (self.tick_of(due) + 1).max(self.cursor);
        let slot = (tick as usize) % SLOTS;
        self.slots[slot].push(id);
        self.occupied[slot / 64] |= 1 << (slot % 64);
    }

    /// When the next non-empty slot comes due.
    fn next_due(&self) -> Option<Instant> {
        let start = (self.cursor as usize) % SLOTS;
        let offset = (0..SLOTS / 64 + 1).find_map(|i| {
            let word_index = (start / 64 + i) % (SLOTS / 64);
            let mut word = self.occupied[word_index];
            if i == 0 {
                word &= !0u64 << (start % 64); // only slots at or after start
            } else if i == SLOTS / 64 {
                word &= (1u64 << (start % 64)).wrapping_sub(1); // wrapped: before start
            }
            (word != 0).then(|| {
                let slot = word_index * 64 + word.trailing_zeros() as usize;
                (slot + SLOTS - start) % SLOTS
            })
        })?;
        let tick = self.cursor + offset as u64;
        let nanos = u64::try_from(TICK.as_nanos()).unwrap_or(u64::MAX);
        Some(self.origin + Duration::from_nanos(nanos.saturating_mul(tick)))
    }

    /// Takes every id in the slots up to `now` (their entries decide whether
    /// they are really due or wait for a later turn).
    fn take_due(&mut self, now: Instant) -> Vec<u64> {
        let until = self.tick_of(now);
        let mut out = Vec::new();
        // At most one full turn per call: every slot is visited once.
        let last = until.min(self.cursor + SLOTS as u64 - 1);
        while self.cursor <= last {
            let slot = (self.cursor as usize) % SLOTS;
            if self.occupied[slot / 64] & (1 << (slot % 64)) != 0 {
                out.append(&mut self.slots[slot]);
                self.occupied[slot / 64] &= !(1 << (slot % 64));
            }
            self.cursor += 1;
        }
        if until > last {
            self.cursor = until + 1;
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lost_channel_made_late_still_gets_the_reason_once() {
        let early = LeaseState::new(Instant::now() + Duration::from_secs(1));
        let count = AtomicU64::new(0);
        let rx = early.lost_receiver();
        assert!(rx.try_recv().is_err());
        assert!(early.mark_lost(LeaseLost::NotOurs, &count));
        assert!(
            !early.mark_lost(LeaseLost::Unreachable, &count),
            "marked once"
        );
        assert_eq!(count.load(Ordering::Relaxed), 1);
        assert_eq!(rx.try_recv(), Ok(LeaseLost::NotOurs));
        assert!(
            early.lost_receiver().try_recv().is_err(),
            "one message in all"
        );

        let late = LeaseState::new(Instant::now() + Duration::from_secs(1));
        assert!(late.mark_lost(LeaseLost::Unreachable, &count));
        let (a, b) = (late.lost_receiver(), late.lost_receiver());
        assert_eq!(a.try_recv(), Ok(LeaseLost::Unreachable));
        assert!(b.try_recv().is_err(), "shared channel, one message");
        assert!(!late.is_held());
    }

    #[test]
    fn wheel_fires_in_order_and_parks_until_the_next_slot() {
        let t0 = Instant::now();
        let mut w = Wheel::new(t0);
        assert_eq!(w.next_due(), None);
        w.insert(1, t0 + Duration::from_millis(100));
        w.insert(2, t0 + Duration::from_millis(35));
        let next = w.next_due().unwrap();
        assert!(next >= t0 + Duration::from_millis(35) && next <= t0 + Duration::from_millis(50));
        assert!(w.take_due(t0 + Duration::from_millis(20)).is_empty());
        assert_eq!(w.take_due(t0 + Duration::from_millis(60)), vec![2]);
        assert_eq!(w.take_due(t0 + Duration::from_millis(200)), vec![1]);
        assert_eq!(w.next_due(), None);
    }

    #[test]
    fn wheel_handles_entries_beyond_one_turn_and_the_wrap() {
        let t0 = Instant::now();
        let mut w = Wheel::new(t0);
        let turn = TICK * SLOTS as u32;
        // Due after more than one turn: lands in a slot visited earlier, and
        // the caller re-inserts it until its turn (as `tick` does).
        w.insert(7, t0 + turn + Duration::from_millis(500));
        let first = w.next_due().unwrap();
        assert!(first < t0 + turn);
        let got = w.take_due(first);
        assert_eq!(got, vec![7]);
        // Past the wrap, a short due time is found after the cursor.
        w.take_due(t0 + turn - Duration::from_millis(20));
        w.insert(8, t0 + turn + Duration::from_millis(40));
        let next = w.next_due().unwrap();
        assert!(
            next >= t0 + turn + Duration::from_millis(40),
            "{:?}",
            next - t0
        );
        assert_eq!(w.take_due(next), vec![8]);
    }
}
