//! The raw lock layer (`lock_api`'s idea): the operations of one lock on one
//! key, for every kind — an acquire attempt (with replica acknowledgement,
//! and the undo of a reply that was lost), a release, leaving a waiting
//! place, an operator's forced release and reads — and the hold a guard
//! keeps, recorded in the client's one [`Ledger`] of holds. [`Raw`] is one
//! client's engine: its identity, connections, scripts, ledger, renewal
//! thread and lost replies. It is the only place outside `protocol` that
//! knows lock kinds; the faces above (the blocking guard, Redlock, …) stand
//! on it and never touch a script.
//!
//! Files: this one (the engine and one lock's calls to Redis), `hold`
//! (a guard's hold: the one acquire ending and the one release path),
//! `waiting` (one acquisition as the wait loop drives it, every kind),
//! `orphans` (calls whose reply was lost, and their undo), `permits` (a
//! semaphore's permits: one acquisition, the hold, the release, its calls).

mod hold;
mod job;
mod orphans;
mod permits;
mod waiting;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::conn::{Bound, Connections, MakeForsaken, Pooled};
use crate::error::{Error, Result};
use crate::ledger::Ledger;
use crate::options::Kind;
use crate::park::{block_on, Park, Pending};
pub(crate) use crate::protocol::admin::Read;
use crate::protocol::admin::{Forced, Shape};
use crate::protocol::{self, Attempt, Fence, Keep, Release, Reply, Request, Scripts, Wait};
use crate::renewal::{LeaseState, Renewer};
use crate::stats::Counters;

pub(crate) use hold::Hold;
pub(crate) use job::{JobAttempt, JobHold, JobSpec};
pub(crate) use orphans::{Orphan, Undoing};
pub(crate) use permits::{permit_client, PermitHold};
pub(crate) use waiting::{Answer, Channels, Got, Granted, LockKind, Taken, Waiting, Wake, Want};

/// One client's lock engine, shared by its clones and guards.
pub(crate) struct Raw {
    id: uuid::Uuid,
    /// `"<id>:"`, the start of every owner of this client.
    owner_prefix: String,
    /// Its connections, and the one round trip (`Connections::call`).
    conns: Arc<Connections>,
    key_prefix: String,
    watchdog_lease: Duration,
    socket_timeout: Duration,
    renewer: Renewer,
    /// The one ledger of holds (and the plain lock's in-process queue).
    ledger: Ledger,
    /// Replicas that must acknowledge every acquire (`WAIT n timeout`).
    replicas: Option<(u32, Duration)>,
    /// Waits that took a place in a line so far (numbers the places).
    waits: AtomicU64,
    /// Calls whose reply was lost, to undo (see `orphans`).
    orphans: orphans::Orphans,
    /// Whether the thread that undoes them runs.
    undoing: Mutex<bool>,
    /// Background work under way (see [`detach`](Self::detach)), which
    /// [`flush`](Self::flush) sees through.
    pending: Arc<Pending>,
}

/// The settings and parts a [`Raw`] is made of (see the builder).
pub(crate) struct Parts {
    pub(crate) id: uuid::Uuid,
    pub(crate) conns: Connections,
    pub(crate) key_prefix: String,
    pub(crate) watchdog_lease: Duration,
    pub(crate) socket_timeout: Duration,
    pub(crate) renewer: Renewer,
    pub(crate) replicas: Option<(u32, Duration)>,
}

impl Raw {
    pub(crate) fn new(parts: Parts) -> Self {
        Raw {
            id: parts.id,
            owner_prefix: format!("{}:", parts.id),
            conns: Arc::new(parts.conns),
            key_prefix: parts.key_prefix,
            watchdog_lease: parts.watchdog_lease,
            socket_timeout: parts.socket_timeout,
            renewer: parts.renewer,
            ledger: Ledger::default(),
            replicas: parts.replicas,
            waits: AtomicU64::new(0),
            orphans: orphans::Orphans::default(),
            undoing: Mutex::new(false),
            pending: Arc::default(),
        }
    }

    /// Runs `job` — a round trip nobody waits for: a dropped guard's
    /// release, a dropped wait's leave or undo — inline for a thread, on
    /// an I/O thread for a task, counted as this client's background work
    /// until it ends ([`flush`](Self::flush) sees it through).
    pub(crate) fn detach(&self, park: Park, job: impl FnOnce() + Send + 'static) {
        match park {
            Park::Thread => job(),
            Park::Task => {
                let counted = self.pending.start();
                self.conns.threads.detach(park, move || {
                    job();
                    drop(counted);
                });
            }
        }
    }

    /// Runs `job` — blocking work, a round trip — inline for a thread, on
    /// one of the client's I/O threads for a task (see `conn::threads`).
    pub(crate) fn io<T: Send + 'static>(
        &self,
        park: Park,
        job: impl FnOnce() -> T + Send + 'static,
    ) -> crate::conn::Io<T> {
        self.conns.threads.io(park, job, drop)
    }

    /// Sees this client's background work through, within `within`: waits
    /// for what [`detach`](Self::detach) started, then undoes the calls
    /// whose reply was lost once more (see `orphans`). What the client's
    /// last handle does as it goes, and `close` — so a program that ends
    /// in the ordinary way leaves nothing held behind it. Whether nothing
    /// is left.
    pub(crate) async fn flush(self: &Arc<Self>, park: Park, within: Duration) -> bool {
        let until = Instant::now() + within;
        let idle = self.pending.idle(park, until).await;
        if !self.orphans.any() {
            return idle;
        }
        let raw = Arc::clone(self);
        let pass = move || {
            let bound = Bound::until(Some(until)).with_pool_wait(raw.socket_timeout);
            !raw.orphans.pass(|o| raw.undo(o, bound))
        };
        idle && self.io(park, pass).await.unwrap_or(false)
    }

    /// The client's id (the first part of its owners).
    pub(crate) fn id(&self) -> &uuid::Uuid {
        &self.id
    }

    /// The prefix put before every lock name.
    pub(crate) fn key_prefix(&self) -> &str {
        &self.key_prefix
    }

    /// The lease of locks taken without an explicit one.
    pub(crate) fn watchdog_lease(&self) -> Duration {
        self.watchdog_lease
    }

    /// How long one reply may take.
    pub(crate) fn socket_timeout(&self) -> Duration {
        self.socket_timeout
    }

    /// How long a waiter rides out continuous failure.
    pub(crate) fn outage_limit(&self) -> Duration {
        self.conns.connect_timeout()
    }

    /// The client's counters (renewal, waits, losses).
    pub(crate) fn counters(&self) -> &Counters {
        &self.renewer.counters
    }

    /// Threads queued in-process right now, and in-process handoffs so far.
    pub(crate) fn queue_counts(&self) -> (u64, u64) {
        (
            self.ledger.queued.load(Ordering::Relaxed),
            self.ledger.handoffs.load(Ordering::Relaxed),
        )
    }

    /// The client was active at `now` for a lease of `lease`: its
    /// registration (for operators) is kept written.
    pub(crate) fn touch(&self, now: Instant, lease: Duration) {
        self.renewer.touch(now, lease);
    }

    /// The ACL rules this client needs.
    pub(crate) fn acl_rules(&self) -> &[String] {
        self.conns.acl_rules()
    }

    /// The scripts for the pub/sub in use (decided by the cluster's first
    /// table read, which every command's routing does first).
    fn scripts(&self) -> &'static Scripts {
        Scripts::of(self.conns.pubsub())
    }

    /// `"<client-uuid>:<thread-n>"`, the hash field Redisson uses.
    pub(crate) fn owner(&self) -> String {
        self.owner_numbered(thread_number())
    }

    /// An owner of its own for one acquisition (an owned guard): a number
    /// drawn from the threads' sequence, so no thread ever has it, and the
    /// same `<client id>:<number>` form as Redisson's owners.
    pub(crate) fn unique_owner(&self) -> String {
        self.owner_numbered(NEXT_THREAD.fetch_add(1, Ordering::Relaxed))
    }

    fn owner_numbered(&self, n: u64) -> String {
        let mut owner = String::with_capacity(self.owner_prefix.len() + 20);
        owner.push_str(&self.owner_prefix);
        push_decimal(&mut owner, n);
        owner
    }

    /// The Redis key of lock `name`: the key prefix, then the name.
    pub(crate) fn key(&self, name: &str) -> String {
        let mut key = String::with_capacity(self.key_prefix.len() + name.len());
        key.push_str(&self.key_prefix);
        key.push_str(name);
        key
    }

    /// A new place in a plain lock's line (or a fair queue's mark) for
    /// `owner`'s next wait, with `lease`.
    fn next_place(&self, owner: &str, lease: Duration, fenced: bool) -> String {
        let n = self.waits.fetch_add(1, Ordering::Relaxed);
        protocol::place_of(owner, n, lease, fenced)
    }

    /// This client's grant channel for lock `key`.
    fn grant_channel(&self, key: &str) -> String {
        crate::names::grant_channel(key, &self.owner_prefix[..self.owner_prefix.len() - 1])
    }

    /// One acquire attempt of any kind, for `park`'s caller, within
    /// `bound`. With replica acknowledgement a hold is followed by `WAIT` on
    /// the same connection; too few replicas → the hold is given back
    /// (owner-checked) and the answer is [`Error::NotReplicated`]. Sending an
    /// attempt twice is harmless: a first hold is set (not incremented), a
    /// reentrant count is settled by the last local release, a second token
    /// is larger.
    ///
    /// An attempt that went out and was not answered may have run: when it
    /// asked for a first hold (`req.fresh()`), what it may have taken is
    /// undone once Redis answers (see [`orphaned`](Self::orphaned)); a
    /// reentrant one keeps the owner's real hold (its stale count goes with
    /// the last release). One that never went out (a refused connect) did
    /// nothing. A task's future dropped while a first hold's attempt is out:
    /// what it took is undone after its reply (see [`forsaken`](Self::forsaken)).
    pub(crate) async fn attempt(
        self: &Arc<Self>,
        park: Park,
        name: &str,
        req: &Request<'_>,
        bound: Bound,
    ) -> Result<Attempt> {
        let call = self
            .scripts()
            .acquire_call(req)
            .then_wait(self.wait(protocol::took_lock));
        let sent_at = Instant::now();
        // What a lost reply may have left: the hold, and our place in line
        // (named bare: an attempt may send our element, `<until>|<place>`).
        let place = req.place.map(protocol::element_place);
        let lost = || Orphan::lost(req.kind, req.key, req.owner, req.lease, place, sent_at);
        let forsaken = || self.forsaken(lost(), Undoing::Acquire);
        let forsaken = req.fresh().then_some(&forsaken as MakeForsaken<'_>);
        let kind = req.kind;
        let read = move |r: Reply| Ok((Scripts::acquire_reply(kind, r.value)?, r.acked));
        let (answer, sent) = self
            .conns
            .call(park, req.key, bound, call, read, forsaken)
            .await;
        let (answer, acked) = match answer {
            Err(e) if req.fresh() && sent && e.is_unanswered() => {
                self.orphaned(lost());
                return Err(e);
            }
            other => other?,
        };
        if let Some(e) = self.unreplicated(name, acked) {
            let bound = self.give_back();
            self.undo_detached(park, req.kind, req.key, req.owner, req.fresh(), bound);
            return Err(e);
        }
        Ok(answer)
    }

    /// [`undo_hold`](Self::undo_hold) as background work of `park`'s
    /// caller (see [`detach`](Self::detach)).
    fn undo_detached(
        self: &Arc<Self>,
        park: Park,
        kind: Kind,
        key: &str,
        owner: &str,
        last: bool,
        bound: Bound,
    ) {
        let (raw, key, owner) = (Arc::clone(self), key.to_owned(), owner.to_owned());
        self.detach(park, move || {
            let _ = raw.undo_hold(kind, &key, &owner, last, bound);
        });
    }

    /// The `WAIT` after a script whose reply `took` says it took a hold,
    /// with replica acknowledgement.
    fn wait(&self, took: fn(&redis::Value) -> bool) -> Option<Wait> {
        self.replicas.map(|(replicas, timeout)| Wait {
            replicas,
            timeout,
            took,
        })
    }

    /// [`Error::NotReplicated`] of `name` when too few replicas acknowledged
    /// a hold (`acked`, when a `WAIT` ran).
    fn unreplicated(&self, name: &str, acked: Option<u32>) -> Option<Error> {
        let (wanted, timeout) = self.replicas?;
        let acked = acked.filter(|acked| *acked < wanted)?;
        let name = name.to_owned();
        Some(Error::NotReplicated {
            name,
            acked,
            wanted,
            timeout,
        })
    }

    /// How long a waiter told to wait may park: until the holder's lease
    /// ends (`hint`, if known; else a watchdog lease) — or less, to confirm
    /// a waiting place of `kind` with `lease` when it holds one (`place`).
    fn wait_cap(
        &self,
        hint: Option<Duration>,
        kind: Kind,
        lease: Duration,
        place: bool,
    ) -> Duration {
        let cap = hint.unwrap_or(self.watchdog_lease);
        let confirm = protocol::waiting_place(kind, lease).filter(|_| place);
        confirm.map_or(cap, |confirm| cap.min(confirm))
    }

    /// One attempt at plain lock `key` for `owner`, an owner of one
    /// acquisition (a Redlock attempt's), with `lease`, within `bound`:
    /// whether it is held now (false: someone else holds it).
    pub(crate) fn attempt_unique(
        self: &Arc<Self>,
        name: &str,
        key: &str,
        owner: &str,
        lease: Duration,
        bound: Bound,
    ) -> Result<bool> {
        let req = Request {
            kind: Kind::Plain,
            key,
            owner,
            lease,
            alive: 0,
            fence: Fence::None,
            place: None,
        };
        let attempt = block_on(self.attempt(Park::Thread, name, &req, bound))?;
        Ok(matches!(attempt, Attempt::Acquired { .. }))
    }

    /// The bound of giving back what an attempt took or left (an undo, a
    /// waiting place left, a hold nobody keeps): the socket timeout for a
    /// pooled connection and each reply, never the caller's deadline —
    /// which may have passed, and then nothing would be sent.
    pub(crate) fn give_back(&self) -> Bound {
        Bound::default().with_pool_wait(self.socket_timeout)
    }

    /// Undoes `owner`'s hold of `key` (a reply that came too late, or was
    /// lost; a hold nobody keeps), owner-checked, handing it to no one: all
    /// of it when `last`, else one count. The pool wait is the socket
    /// timeout.
    fn undo_hold(
        &self,
        kind: Kind,
        key: &str,
        owner: &str,
        last: bool,
        bound: Bound,
    ) -> Result<protocol::Released> {
        let field = protocol::hold_field(kind, owner);
        let rel = Release {
            kind,
            key,
            field: &field,
            keep: Keep::UNCHANGED,
            last,
            successor: None,
        };
        let call = self.scripts().release_call(&rel);
        let bound = bound.with_pool_wait(self.socket_timeout);
        self.conns.run(key, bound, |con| {
            Scripts::release_reply(kind, call.run(con)?.value)
        })
    }

    /// Leaves `owner`'s waiting place (`place`: its place in a plain lock's
    /// line) within `bound`: true when a plain lock was granted to `owner`
    /// meanwhile (the caller releases it); the error when Redis did not
    /// answer, and whether the request went out.
    fn leave_place(
        &self,
        kind: Kind,
        key: &str,
        owner: &str,
        place: Option<&str>,
        bound: Bound,
    ) -> (Result<bool>, bool) {
        let bound = bound.with_pool_wait(self.socket_timeout);
        self.conns.run_sent(key, bound, |con| {
            self.scripts().leave(con, kind, key, owner, place)
        })
    }

    /// Deletes lock `key` of any kind and wakes its waiters; false when
    /// there was none.
    ///
    /// # Errors
    /// [`Error::NotALock`] (nothing changed) when the key is not a lock.
    pub(crate) fn force_unlock(&self, key: &str) -> Result<bool> {
        let forced = self.conns.run(key, Bound::default(), |con| {
            self.scripts().force_unlock(con, key)
        })?;
        match forced {
            Forced::Freed => Ok(true),
            Forced::NotHeld => Ok(false),
            Forced::NotALock(what) => Err(not_a_lock(key, what)),
        }
    }

    /// Whether `key` is a lock (true), or nothing (false).
    ///
    /// # Errors
    /// [`Error::NotALock`] when it is something else.
    pub(crate) fn lock_shape(&self, key: &str) -> Result<bool> {
        let shape = self
            .conns
            .run(key, Bound::default(), |con| self.scripts().shape(con, key))?;
        match shape {
            Shape::Lock => Ok(true),
            Shape::None => Ok(false),
            Shape::Other(what) => Err(not_a_lock(key, what)),
        }
    }

    /// Everything an operator sees of lock `key`, at one moment (one
    /// script, read only).
    ///
    /// # Errors
    /// [`Error::NotALock`] when it is neither a lock, nothing, nor a string.
    pub(crate) fn read_lock(&self, key: &str) -> Result<Read> {
        let read = self
            .conns
            .run(key, Bound::default(), |con| self.scripts().read(con, key))?;
        match read {
            Read::Other(what) => Err(not_a_lock(key, what)),
            read => Ok(read),
        }
    }

    /// Records that term `term` of the election whose lock is `lock_key`
    /// began at `since_ms` (over an older term's record only) — for a
    /// campaign that must end by `deadline`, within it (and its last round
    /// trip): a write that did not get through by then (Redis stalled just
    /// after the win) is sent once more in the background, unbounded, where
    /// a late record is harmless, as it only ever moves to a newer term.
    pub(crate) fn record_term(
        self: &Arc<Self>,
        lock_key: &str,
        term: u64,
        since_ms: u64,
        deadline: Option<Instant>,
    ) -> Result<()> {
        let record = protocol::election::record_key(lock_key);
        let call = protocol::election::record_call(&record, term, since_ms);
        let bound = Bound::until(deadline);
        match self.conns.run(&record, bound, |con| call.run(con)) {
            Err(e) if deadline.is_some() && e.is_transient() => {
                tracing::debug!(election = %lock_key, error = %e, "leasehold: the term's record did not get through within the campaign; sending it in the background");
                let raw = Arc::clone(self);
                self.detach(Park::Task, move || {
                    let done = raw.conns.run(&record, Bound::default(), |con| call.run(con));
                    if let Err(e) = done {
                        tracing::warn!(record = %record, error = %e, "leasehold: could not record when a term began");
                    }
                });
                Ok(())
            }
            done => done.map(drop),
        }
    }

    /// The term and its beginning (ms) an election whose lock is `lock_key`
    /// last recorded.
    pub(crate) fn recorded_term(&self, lock_key: &str) -> Result<(Option<u64>, Option<u64>)> {
        let record = protocol::election::record_key(lock_key);
        let fields: std::collections::HashMap<String, u64> =
            self.on_node(&record, |con| redis::cmd("HGETALL").arg(&record).query(con))?;
        Ok((fields.get("term").copied(), fields.get("since_ms").copied()))
    }

    /// A face's own small call on the node serving `key` (an operator's
    /// read).
    pub(crate) fn on_node<T>(
        &self,
        key: &str,
        read: impl FnMut(&mut Pooled) -> redis::RedisResult<T>,
    ) -> Result<T> {
        self.conns.run(key, Bound::default(), read)
    }

    /// A read on every server holding locks (each primary of a cluster);
    /// errors name `what`.
    pub(crate) fn read_every_primary<T>(
        &self,
        what: &str,
        read: impl FnMut(&mut Pooled) -> redis::RedisResult<T>,
    ) -> Result<Vec<T>> {
        self.conns.on_every_primary(what, read)
    }

    /// The lease state of a new hold whose request was sent at `sent_at`
    /// and for which Redis set `set` (the lease, or a grant's shorter one):
    /// registered with the renewal thread (`watchdog`), kept alive as a read
    /// hold with an explicit lease (`timeouts`: its timeout key prefix; see
    /// `Renewer::keep`), or simply expiring.
    #[allow(clippy::too_many_arguments)]
    fn new_state(
        &self,
        key: &str,
        field: &str,
        lease: Duration,
        watchdog: bool,
        sent_at: Instant,
        set: Duration,
        timeouts: Option<&str>,
        meter: crate::meter::Kind,
    ) -> Arc<LeaseState> {
        match timeouts {
            _ if watchdog => self
                .renewer
                .register(key, field, lease, sent_at, set, timeouts, meter),
            // A read hold keeps the shared hash alive to its own end.
            Some(timeouts) => self.renewer.keep(key, field, sent_at, set, timeouts),
            None => LeaseState::new(sent_at + set),
        }
    }
}

/// [`Error::NotHeld`] of `name`: a release found its hold (on `state`) no
/// longer ours.
fn not_held(name: &str, state: &LeaseState) -> Error {
    let (name, lost) = (name.to_owned(), state.lost_why());
    Error::NotHeld { name, lost }
}

/// [`Error::NotALock`]: `key` holds `what`.
fn not_a_lock(key: &str, what: String) -> Error {
    let key = key.to_owned();
    Error::NotALock { key, what }
}

static NEXT_THREAD: AtomicU64 = AtomicU64::new(1);

thread_local! {
    static THREAD_NUMBER: u64 = NEXT_THREAD.fetch_add(1, Ordering::Relaxed);
}

/// A small number, unique in this process, for the calling OS thread.
fn thread_number() -> u64 {
    THREAD_NUMBER.with(|n| *n)
}

/// Appends `n` in decimal without the formatting machinery (hot path).
fn push_decimal(out: &mut String, n: u64) {
    let mut digits = [0u8; 20];
    for &d in protocol::decimal(n, &mut digits) {
        out.push(char::from(d));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimal_digits() {
        for n in [0u64, 7, 10, 12345, u64::MAX] {
            let mut s = String::from("x:");
            push_decimal(&mut s, n);
            assert_eq!(s, format!("x:{n}"));
        }
    }

    #[test]
    fn thread_numbers_differ_per_thread_and_stay_fixed() {
        let here = thread_number();
        assert_eq!(here, thread_number());
        let there = std::thread::spawn(thread_number).join().unwrap();
        assert_ne!(here, there);
    }
}
