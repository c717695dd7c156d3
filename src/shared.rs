//! What a client, its clones and its guards share ([`Shared`]): identity,
//! connections, scripts, the notifier, the renewal thread, the in-process
//! queue, replica acknowledgement. It offers the layers above a narrow API:
//! one acquire attempt of any kind (with `WAIT` and its undo), one release
//! script, leaving a waiting place, registering a lease — and the whole
//! release of a guard's hold ([`Shared::release`]), so a guard only calls it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::conn::{Bound, Connections, Pooled};
use crate::error::{Error, Result};
use crate::local::{LocalLocks, Outcome};
use crate::notify::Notifier;
use crate::options::Kind;
use crate::orphans::{Holds, Orphan, Orphans};
use crate::protocol::admin::{Forced, Shape};
use crate::protocol::{self, Attempt, PubSub, Release, Released, Request, Scripts};
use crate::renewal::{LeaseState, Renewer};
use crate::stats::Stats;

/// The state every clone of a client and every guard share.
pub(crate) struct Shared {
    pub(crate) id: uuid::Uuid,
    /// `"<id>:"`, the start of every owner of this client.
    owner_prefix: String,
    conns: Connections,
    scripts: Scripts,
    /// The same scripts publishing with `SPUBLISH` (a cluster only).
    sharded_scripts: Option<Scripts>,
    pub(crate) key_prefix: String,
    pub(crate) watchdog_lease: Duration,
    pub(crate) socket_timeout: Duration,
    pub(crate) notifier: Notifier,
    pub(crate) renewer: Renewer,
    /// Threads of this client queued per lock name (see `local`).
    pub(crate) local: LocalLocks,
    /// Replicas that must acknowledge every acquire (`WAIT n timeout`).
    pub(crate) replicas: Option<(u32, Duration)>,
    /// Tokens of fenced fair holds by `key\n owner`, with their hold count, so
    /// a reentrant fenced fair hold returns the outer token.
    fair_fences: Mutex<HashMap<String, (u64, u32)>>,
    /// Waits that took a place in a line so far (numbers the places).
    waits: AtomicU64,
    /// Acquires whose reply was lost, to undo (see `orphans`).
    orphans: Orphans,
    /// Whether the thread that undoes them runs.
    undoing: Mutex<bool>,
    /// Live fair, read and write holds: whether an acquire is a first hold.
    pub(crate) holds: Holds,
}

/// How often the background undo of lost acquires tries again.
const UNDO_RETRY: Duration = Duration::from_millis(100);

/// The settings and parts a [`Shared`] is made of (see the builder).
pub(crate) struct Parts {
    pub(crate) id: uuid::Uuid,
    pub(crate) conns: Connections,
    pub(crate) key_prefix: String,
    pub(crate) watchdog_lease: Duration,
    pub(crate) socket_timeout: Duration,
    pub(crate) notifier: Notifier,
    pub(crate) renewer: Renewer,
    pub(crate) replicas: Option<(u32, Duration)>,
}

/// One hold, as a guard keeps it and [`Shared::release`] gives it back.
pub(crate) struct Hold {
    /// The lock name as the caller gave it.
    pub(crate) name: String,
    /// The Redis key (prefix + name).
    pub(crate) key: String,
    /// The hash field of the hold (the owner, or its write field).
    pub(crate) field: String,
    pub(crate) lease: Duration,
    pub(crate) kind: Kind,
    pub(crate) fence: Option<u64>,
    /// Shared with the renewal thread and with reentrant guards of one owner.
    pub(crate) state: Arc<LeaseState>,
    /// Whether the watchdog renews this lease (no explicit lease given).
    pub(crate) renewed: bool,
}

impl Drop for Shared {
    fn drop(&mut self) {
        self.notifier.close();
    }
}

impl Shared {
    pub(crate) fn new(parts: Parts) -> Self {
        let cluster = parts.conns.is_cluster();
        Shared {
            id: parts.id,
            owner_prefix: format!("{}:", parts.id),
            conns: parts.conns,
            sharded_scripts: cluster.then(|| Scripts::new(PubSub::Sharded)),
            scripts: Scripts::new(PubSub::Classic),
            key_prefix: parts.key_prefix,
            watchdog_lease: parts.watchdog_lease,
            socket_timeout: parts.socket_timeout,
            notifier: parts.notifier,
            renewer: parts.renewer,
            local: LocalLocks::default(),
            replicas: parts.replicas,
            fair_fences: Mutex::new(HashMap::new()),
            waits: AtomicU64::new(0),
            orphans: Orphans::default(),
            undoing: Mutex::new(false),
            holds: Holds::default(),
        }
    }

    /// The scripts for the pub/sub in use (decided by the cluster's first
    /// table read, which every command's routing does first).
    fn scripts(&self) -> &Scripts {
        match (self.conns.pubsub(), &self.sharded_scripts) {
            (PubSub::Sharded, Some(sharded)) => sharded,
            _ => &self.scripts,
        }
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

    /// How long a waiter rides out continuous failure.
    pub(crate) fn outage_limit(&self) -> Duration {
        self.conns.connect_timeout()
    }

    /// One acquire attempt of any kind, within `bound`. With replica
    /// acknowledgement, a hold is followed by `WAIT` on the same connection;
    /// too few replicas → the hold is undone (owner-checked) and the answer
    /// is [`Error::NotReplicated`]. Sending an attempt twice is harmless: a
    /// first hold is set (not incremented), a reentrant count is settled by
    /// the last local release, a second token is larger.
    ///
    /// An attempt that went out and was not answered may have run: when it
    /// asked for a first hold (`req.fresh`), what it may have taken is
    /// undone once Redis answers (see [`orphaned`](Self::orphaned)); a
    /// reentrant one keeps the owner's real hold (its stale count goes with
    /// the last release). One that never went out (a refused connect) did
    /// nothing.
    pub(crate) fn attempt(
        self: &Arc<Self>,
        name: &str,
        req: &Request<'_>,
        bound: Bound,
    ) -> Result<Attempt> {
        let sent_at = Instant::now();
        let (answer, sent) = self.conns.run_sent(req.key, bound, |con| {
            let answer = self.scripts().acquire(con, req)?;
            let unacked = match answer {
                Attempt::Acquired { .. } => self.unreplicated(con)?,
                _ => None,
            };
            Ok((answer, unacked))
        });
        let (answer, unacked) = match answer {
            Err(e) if req.fresh && sent && e.is_unanswered() => {
                self.orphaned(Orphan::lost(
                    req.kind, req.key, req.owner, req.lease, req.place, sent_at,
                ));
                return Err(e);
            }
            other => other?,
        };
        if let Some(acked) = unacked {
            let field = protocol::hold_field(req.kind, req.owner);
            let _ = self.release_script(
                &Release {
                    kind: req.kind,
                    key: req.key,
                    field: &field,
                    lease: req.lease,
                    last: req.fresh,
                    successor: None,
                },
                bound.with_pool_wait(self.socket_timeout),
            );
            let (wanted, timeout) = self.replicas.unwrap_or_default();
            return Err(Error::NotReplicated {
                name: name.to_owned(),
                acked,
                wanted,
                timeout,
            });
        }
        Ok(answer)
    }

    /// After an acquire that took a hold, with replica acknowledgement
    /// required: `WAIT` on the same connection (it waits for this
    /// connection's writes). `Some(acked)` when too few acknowledged.
    fn unreplicated(&self, con: &mut Pooled) -> redis::RedisResult<Option<u32>> {
        let Some((wanted, timeout)) = self.replicas else {
            return Ok(None);
        };
        let acked: i64 = redis::cmd("WAIT")
            .arg(wanted)
            .arg(protocol::millis(timeout))
            .query(con)?;
        Ok((acked < i64::from(wanted)).then(|| u32::try_from(acked.max(0)).unwrap_or(0)))
    }

    /// One release script, within `bound`.
    pub(crate) fn release_script(&self, rel: &Release<'_>, bound: Bound) -> Result<Released> {
        self.conns
            .run(rel.key, bound, |con| self.scripts().release(con, rel))
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
            Forced::NotALock(what) => Err(Error::NotALock {
                key: key.to_owned(),
                what,
            }),
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
            Shape::Other(what) => Err(Error::NotALock {
                key: key.to_owned(),
                what,
            }),
        }
    }

    /// A read of an operator's tool, on the node serving `key`.
    pub(crate) fn read<T>(
        &self,
        key: &str,
        read: impl FnMut(&mut crate::conn::Pooled) -> redis::RedisResult<T>,
    ) -> Result<T> {
        self.conns.run(key, Bound::default(), read)
    }

    /// A read of an operator's tool on every server holding locks (each
    /// primary of a cluster); errors name `what`.
    pub(crate) fn read_every_primary<T>(
        &self,
        what: &str,
        read: impl FnMut(&mut crate::conn::Pooled) -> redis::RedisResult<T>,
    ) -> Result<Vec<T>> {
        self.conns.on_every_primary(what, read)
    }

    /// Leaves `owner`'s waiting place (the line's `place`, fair queue,
    /// waiting writers) within `bound`. True when a plain lock was granted
    /// to `owner` meanwhile: the caller releases it. When Redis did not
    /// answer, the leave (and the release of such a grant) is done in the
    /// background once it does — or the place expires by itself first.
    pub(crate) fn leave(
        self: &Arc<Self>,
        kind: Kind,
        key: &str,
        owner: &str,
        place: Option<&str>,
        lease: Duration,
        bound: Bound,
    ) -> bool {
        let sent_at = Instant::now();
        match self.leave_place(kind, key, owner, place, bound) {
            (Ok(granted), _) => granted,
            (Err(e), sent) => {
                // Not sent (out of time, no connection), or not answered:
                // left in the background once Redis answers — and before
                // this owner's next acquire of the key.
                tracing::debug!(key = %key, error = ?e, "leasehold: leaving a waiters' place failed; leaving it once redis answers");
                if !sent || e.is_unanswered() {
                    self.orphaned(Orphan::lost(kind, key, owner, lease, place, sent_at));
                }
                false
            }
        }
    }

    /// Leaves `owner`'s waiting place; the error when Redis did not answer,
    /// and whether the request went out.
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

    /// The ACL rules this client needs.
    pub(crate) fn acl_rules(&self) -> &[String] {
        self.conns.acl_rules()
    }

    /// Before an acquire of `owner` on `key`: undoes what a lost reply of
    /// its own there may have left (see `orphans`), within `bound`. Nothing
    /// to do — the usual case — costs one atomic load.
    pub(crate) fn settle(&self, key: &str, owner: &str, bound: Bound) -> Result<()> {
        self.orphans
            .settle(key, owner, bound.end, |o| self.undo(o, bound))
    }

    /// A call whose reply was lost (an acquire, a release, leaving a
    /// place): undone in the background as soon as Redis answers (and
    /// before the owner's next acquire of the key). The thread that does it
    /// holds only a `Weak` to the client: it ends with the client.
    pub(crate) fn orphaned(self: &Arc<Self>, orphan: Orphan) {
        tracing::debug!(key = %orphan.key, "leasehold: a reply was lost; undoing what the call may have done once redis answers");
        self.orphans.add(orphan);
        let mut undoing = self.undoing.lock();
        if *undoing {
            return;
        }
        let weak = Arc::downgrade(self);
        let spawned = std::thread::Builder::new()
            .name("leasehold-undo".into())
            .spawn(move || loop {
                std::thread::sleep(UNDO_RETRY);
                let Some(shared) = weak.upgrade() else {
                    return; // the client is gone; what is left expires
                };
                if !shared.orphans.pass(|o| shared.undo(o, Bound::default())) {
                    let mut undoing = shared.undoing.lock();
                    if !shared.orphans.any() {
                        *undoing = false;
                        return;
                    }
                }
            });
        match spawned {
            Ok(_) => *undoing = true,
            // The owner's next acquire still undoes it; otherwise it expires.
            Err(e) => {
                tracing::warn!(error = %e, "leasehold: cannot start the thread that undoes lost acquires")
            }
        }
    }

    /// One owner-checked undo of a lost call, within `bound`: leave its
    /// waiting place, release whatever hold it took or kept (all of the
    /// owner's: it has no other here).
    fn undo(&self, o: &Orphan, bound: Bound) -> Result<()> {
        let granted = self
            .leave_place(o.kind, &o.key, &o.owner, o.place.as_deref(), bound)
            .0?;
        let field = protocol::hold_field(o.kind, &o.owner);
        let rel = Release {
            kind: o.kind,
            key: &o.key,
            field: &field,
            lease: o.lease,
            last: true,
            successor: None,
        };
        let released = self.release_script(&rel, bound.with_pool_wait(self.socket_timeout))?;
        tracing::debug!(key = %o.key, ?released, granted, "leasehold: undid a call whose reply was lost");
        Ok(())
    }

    /// A new place in a plain lock's line (or a fair queue's mark) for
    /// `owner`'s next wait, with `lease`.
    pub(crate) fn next_place(&self, owner: &str, lease: Duration, fenced: bool) -> String {
        let n = self.waits.fetch_add(1, Ordering::Relaxed);
        protocol::place_of(owner, n, lease, fenced)
    }

    /// This client's grant channel for lock `key`.
    pub(crate) fn grant_channel(&self, key: &str) -> String {
        crate::names::grant_channel(key, &self.owner_prefix[..self.owner_prefix.len() - 1])
    }

    /// The lease state of a hold whose request was sent at `sent_at` and
    /// for which Redis set `set` (the lease, or a grant's shorter one):
    /// registered with the watchdog, or expiring with its explicit lease
    /// (a read hold's kept alive in Redis until then, see `Renewer::keep`).
    /// `timeouts`: a read hold's timeout key prefix.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn lease_state(
        &self,
        key: &str,
        field: &str,
        lease: Duration,
        watchdog: bool,
        sent_at: Instant,
        set: Duration,
        timeouts: Option<&str>,
    ) -> Arc<LeaseState> {
        match timeouts {
            _ if watchdog => self
                .renewer
                .register(key, field, lease, sent_at, set, timeouts),
            // A read hold keeps the shared hash alive to its own end.
            Some(timeouts) => self.renewer.keep(key, field, sent_at, set, timeouts),
            None => LeaseState::new(sent_at + set),
        }
    }

    /// One guard of a watchdog lease is going away: when it was the last,
    /// renewal stops before this returns.
    pub(crate) fn stop_renewing(&self, key: &str, field: &str, state: &Arc<LeaseState>) {
        self.renewer.release(key, field, state);
    }

    /// Records one fenced fair hold: a new `token`, or (reentrant, `None`)
    /// one more hold of the token this owner has. Returns the hold's token.
    pub(crate) fn fair_fence_hold(
        &self,
        key: &str,
        owner: &str,
        token: Option<u64>,
    ) -> Option<u64> {
        let mut fences = self.fair_fences.lock();
        let id = format!("{key}\n{owner}");
        match token {
            Some(t) => {
                fences.insert(id, (t, 1));
                Some(t)
            }
            None => fences.get_mut(&id).map(|(t, holds)| {
                *holds += 1;
                *t
            }),
        }
    }

    /// One fenced fair hold of `owner` on `key` ended.
    fn fair_fence_release(&self, key: &str, owner: &str) {
        let mut fences = self.fair_fences.lock();
        let id = format!("{key}\n{owner}");
        if let Some((_, holds)) = fences.get_mut(&id) {
            *holds -= 1;
            if *holds == 0 {
                fences.remove(&id);
            }
        }
    }

    /// Gives back one hold, within `bound`: stops its renewal when it was
    /// the last guard, then runs the release script — for a plain lock
    /// handing it to a thread of this client queued for it when there is
    /// one (unless every acquire must be acknowledged by replicas), or
    /// granting it to the first client waiting in line. A lost hold sends
    /// nothing.
    ///
    /// # Errors
    /// [`Error::NotHeld`] when the hold was no longer ours;
    /// [`Error::ReleasePending`] when the owner's last release was sent but
    /// not answered (it is sent again in the background until Redis answers
    /// or the lease ends); connection errors when Redis could not be
    /// reached.
    pub(crate) fn release(self: &Arc<Self>, hold: &Hold, bound: Bound) -> Result<()> {
        let result = self.release_hold(hold, bound);
        // Debug level, no owner: names and the outcome only.
        tracing::debug!(lock = %hold.name, kind = ?hold.kind, ok = result.is_ok(), "leasehold: release");
        result
    }

    fn release_hold(self: &Arc<Self>, hold: &Hold, bound: Bound) -> Result<()> {
        let not_held = || Error::NotHeld {
            name: hold.name.clone(),
            lost: hold.state.lost_why(),
        };
        if hold.renewed {
            // Stops renewal (when this is the last hold) before the release.
            self.stop_renewing(&hold.key, &hold.field, &hold.state);
        } else if hold.kind == Kind::Read {
            self.renewer.stop_keeping(&hold.state);
        }
        let mut rel = Release {
            kind: hold.kind,
            key: &hold.key,
            field: &hold.field,
            lease: hold.lease,
            last: true,
            successor: None,
        };
        if hold.kind != Kind::Plain {
            rel.last = self.holds.remove(&hold.key, &hold.field);
            if hold.kind == Kind::Fair && hold.fence.is_some() {
                self.fair_fence_release(&hold.key, &hold.field);
            }
            if hold.state.is_lost() {
                return Err(not_held());
            }
            return match self.release_or_retry(hold, &rel, bound)? {
                Released::NotHeld => Err(not_held()),
                _ => Ok(()),
            };
        }
        // A thread of this client queued for the lock may get it directly.
        let handover = self.local.release(&hold.key, &hold.field);
        if hold.state.is_lost() {
            // Someone else may hold it now: send nothing at all (dropping the
            // handover lets the next local thread try Redis itself).
            return Err(not_held());
        }
        rel.last = handover.last();
        // With replica acknowledgement every acquire is its own script and
        // WAIT: no handoff inside the release script.
        rel.successor = handover.successor().filter(|_| self.replicas.is_none());
        let sent_at = Instant::now();
        let released = self.release_or_retry(hold, &rel, bound)?;
        handover.finish(match released {
            Released::HandedOver { fence } => Outcome::HandedOver(sent_at, fence),
            Released::FreedForOthers => Outcome::FreedForOthers,
            _ => Outcome::Other,
        });
        match released {
            Released::NotHeld => Err(not_held()),
            _ => Ok(()),
        }
    }

    /// Releases all of the hold of `owner` — an owner of one acquisition
    /// (a Redlock attempt's) — on plain lock `key`, within `bound`. When
    /// Redis did not answer or could not be reached, it is sent again in the
    /// background until Redis answers: no later hold can have this owner.
    pub(crate) fn release_unique(
        self: &Arc<Self>,
        key: &str,
        owner: &str,
        lease: Duration,
        bound: Bound,
    ) -> Result<Released> {
        let rel = Release {
            kind: Kind::Plain,
            key,
            field: owner,
            lease,
            last: true,
            successor: None,
        };
        let sent_at = Instant::now();
        let released = self.release_script(&rel, bound.with_pool_wait(self.socket_timeout));
        if released.as_ref().is_err_and(Error::is_transient) {
            self.orphaned(Orphan::lost(Kind::Plain, key, owner, lease, None, sent_at));
        }
        released
    }

    /// One release script for `hold`. When the owner's last release was
    /// not answered (or could not be sent: Redis unreachable, failing over),
    /// it is sent again in the background
    /// (see [`orphaned`](Self::orphaned)) until Redis answers or the lease
    /// would have ended: [`Error::ReleasePending`].
    fn release_or_retry(
        self: &Arc<Self>,
        hold: &Hold,
        rel: &Release<'_>,
        bound: Bound,
    ) -> Result<Released> {
        let e = match self
            .conns
            .run_sent(rel.key, bound, |con| self.scripts().release(con, rel))
        {
            (Ok(released), _) => return Ok(released),
            // Not answered, or not sent while Redis could not be reached: the
            // owner's last release is sent again until Redis answers.
            (Err(e), _) if rel.last && e.is_transient() => e,
            // An answer, or a reentrant count (the owner's last release
            // settles it).
            (Err(e), _) => return Err(e),
        };
        let until = hold.state.valid_until();
        self.orphaned(Orphan {
            kind: hold.kind,
            key: hold.key.clone(),
            owner: protocol::owner_of_field(hold.kind, &hold.field).to_owned(),
            lease: hold.lease,
            place: None,
            until,
        });
        Err(Error::ReleasePending {
            name: hold.name.clone(),
            lease_left: until.saturating_duration_since(Instant::now()),
            source: Box::new(e),
        })
    }

    /// This client's counters (see `LockClient::stats`).
    pub(crate) fn stats(&self) -> Stats {
        let mut stats = self.renewer.counters.snapshot();
        stats.waiters_queued = self.local.queued.load(Ordering::Relaxed);
        stats.waiters_parked += stats.waiters_queued;
        stats.handoffs = self.local.handoffs.load(Ordering::Relaxed);
        (
            stats.subscriber_connected,
            stats.subscriber_connects,
            stats.subscriber_error,
        ) = self.notifier.health();
        stats
    }
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
fn push_decimal(out: &mut String, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    for &d in &digits[i..] {
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
