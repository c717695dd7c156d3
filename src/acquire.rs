//! The acquire path of `LockClient`: input checks, then for a plain lock a
//! turn in the client's in-process queue (threads of one client never race
//! each other at Redis), then the one wait loop ([`wait::wait_for`]) with
//! [`AtRedis`] — the one adapter that gives the loop any kind's attempt,
//! undo, channel, wake rule and waiting place — and finally the guard.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::conn::Bound;
use crate::error::{Error, Result};
use crate::guard::LockGuard;
use crate::local::{self, Enter};
use crate::names::{channel_name, timeout_prefix};
use crate::notify::Listen;
use crate::options::{check_lease, check_name, deadline_min, Cancel, Kind};
use crate::orphans::Orphan;
use crate::protocol::{self, Attempt, Fence, Release, Request};
use crate::shared::{Hold, Shared};
use crate::wait::{self, Answer, Channels, Granted, Live, LockKind, Wake};

/// What the caller asked for.
#[derive(Clone)]
pub(crate) struct Want {
    pub(crate) kind: Kind,
    /// An explicit lease; `None`: the watchdog lease, renewed.
    pub(crate) lease: Option<Duration>,
    pub(crate) fenced: bool,
    /// The hold gets an owner of its own (an owned guard), not the thread's.
    pub(crate) owned: bool,
    /// Another thread may cancel the wait.
    pub(crate) cancel: Option<Cancel>,
}

/// Takes lock `name` as `want` says, waiting until `deadline` (`None`: as
/// long as it takes); `None` when the deadline passed first,
/// [`Error::Cancelled`] when the wait was cancelled (a wait that ends
/// without the lock, like a deadline).
pub(crate) fn acquire<O>(
    shared: &Arc<Shared>,
    name: &str,
    want: Want,
    deadline: Option<Instant>,
) -> Result<Option<LockGuard<O>>> {
    let started = Instant::now();
    let counters = &shared.renewer.counters;
    let cancel = want.cancel.clone();
    let cancelled = || cancel.as_ref().is_some_and(Cancel::is_cancelled);
    let (kind, want_lease) = (want.kind, want.lease);
    let got = if cancelled() {
        None
    } else {
        take(shared, name, want, deadline)?
    };
    let waited = started.elapsed();
    let outcome = match &got {
        Some(_) => {
            counters.acquired(waited);
            let lease = want_lease.unwrap_or(shared.watchdog_lease);
            shared.renewer.touch(started + waited, lease);
            "acquired"
        }
        None if cancelled() => {
            counters.waits_cancelled.fetch_add(1, Ordering::Relaxed);
            "cancelled"
        }
        None => {
            counters.wait_timeouts.fetch_add(1, Ordering::Relaxed);
            "timed out"
        }
    };
    // Debug level, no owner: names and timings only.
    tracing::debug!(lock = %name, ?kind, waited_us = waited.as_micros() as u64, outcome, "leasehold: acquire");
    match got {
        None if cancelled() => Err(Error::Cancelled {
            name: name.to_owned(),
        }),
        got => Ok(got),
    }
}

fn take<O>(
    shared: &Arc<Shared>,
    name: &str,
    want: Want,
    deadline: Option<Instant>,
) -> Result<Option<LockGuard<O>>> {
    check_name(name)?;
    if let Some(lease) = want.lease {
        check_lease("lease", lease)?;
    }
    if want.fenced && matches!(want.kind, Kind::Read | Kind::Write) {
        return Err(Error::invalid(
            "fencing tokens are for exclusive locks (plain or fair); a read/write lock has none",
        ));
    }
    let key = shared.key(name);
    let owner = if want.owned {
        shared.unique_owner()
    } else {
        shared.owner()
    };
    // A bounded wait's round trips end by its deadline; a single try's (a
    // deadline already passed) take the socket timeout.
    let bound = Bound::until(deadline.filter(|d| *d > Instant::now()));
    // What a lost reply of this owner left here is undone first — also
    // before a hold handed over in-process, which sends no attempt — riding
    // out an outage as the wait would.
    wait::ride_out(&live(shared, want.cancel.as_ref()), name, deadline, || {
        shared.settle(&key, &owner, bound)
    })?;
    let lease = want.lease.unwrap_or(shared.watchdog_lease);
    let mut at = AtRedis {
        shared,
        name,
        kind: want.kind,
        key: &key,
        owner: &owner,
        lease,
        // Plain: set from the in-process queue below.
        fresh: !shared
            .holds
            .holds(&key, &protocol::hold_field(want.kind, &owner)),
        fence: if want.fenced {
            Fence::Mint
        } else {
            Fence::None
        },
        place: None,
        join: false,
        watchdog: want.lease.is_none(),
        foreign: false,
        bound,
    };
    if want.kind == Kind::Plain {
        return plain(at, want, deadline);
    }
    // A subscription still confirmed (the same waiter's channel lingering,
    // a busy read/write lock) is taken before the first attempt: held
    // elsewhere, the waiter parks at once instead of subscribing and trying
    // again.
    let mut sub = shared
        .notifier
        .resume(&protocol::wait_channel(want.kind, &key, &owner));
    // A fair waiter marks its queue entry with a place, so a release can
    // grant it the lock directly; a single try does not wait for a grant.
    if want.kind == Kind::Fair && deadline.is_none_or(|d| d > Instant::now()) {
        at.place = Some(shared.next_place(&owner, lease, want.fenced));
    }
    let Some(got) = wait::wait_for(
        &mut at,
        &live(shared, want.cancel.as_ref()),
        &mut sub,
        name,
        deadline,
    )?
    else {
        return Ok(None);
    };
    let minted = got.held;
    let (field, timeouts) = match want.kind {
        Kind::Read => (owner.clone(), Some(timeout_prefix(&key, &owner))),
        kind => (protocol::hold_field(kind, &owner).into_owned(), None),
    };
    let fence = match want.kind {
        // A reentrant fenced fair hold (nothing minted) returns the outer token.
        Kind::Fair if want.fenced => shared.fair_fence_hold(&key, &owner, minted),
        _ => None,
    };
    let watchdog = want.lease.is_none();
    shared.holds.add(&key, &field);
    let state = shared.lease_state(
        &key,
        &field,
        lease,
        watchdog,
        got.sent_at,
        got.lease,
        timeouts.as_deref(),
    );
    Ok(Some(guard(
        shared, name, key, field, lease, want, fence, state,
    )))
}

/// The plain lock: a turn in the in-process queue (or the lock handed over
/// by a thread of this client), then Redis.
fn plain<O>(
    mut at: AtRedis<'_>,
    want: Want,
    deadline: Option<Instant>,
) -> Result<Option<LockGuard<O>>> {
    let shared = at.shared;
    let (key, owner, lease) = (at.key, at.owner, at.lease);
    let watchdog = want.lease.is_none();
    let mut turn = match shared.local.enter(
        key,
        owner,
        lease,
        want.fenced,
        deadline,
        want.cancel.as_ref(),
    ) {
        Enter::Turn(turn) => turn,
        Enter::Granted(sent_at, fence) => {
            let state = shared.lease_state(key, owner, lease, watchdog, sent_at, lease, None);
            shared.local.holding(key, owner, &state, fence);
            let g = guard(
                shared,
                at.name,
                key.to_owned(),
                owner.to_owned(),
                lease,
                want,
                fence,
                state,
            );
            return Ok(Some(g));
        }
        Enter::TimedOut => return Ok(None),
        Enter::Abandoned => {
            // Given up while a release handed it the lock: what that gave
            // it in Redis is undone, owner-checked, once Redis answers (and
            // before this owner's next acquire of the key).
            let orphan = Orphan::lost(Kind::Plain, key, owner, lease, None, Instant::now());
            shared.orphaned(orphan);
            return Ok(None);
        }
    };
    // A subscription still confirmed (a busy name) is taken before the first
    // attempt: held elsewhere, the waiter parks at once.
    let mut sub = turn
        .take_subscription()
        .or_else(|| shared.notifier.resume_line(key));
    if let Some(yield_to) = turn.yield_to.take() {
        // Our release woke other clients: let them take it first, and try
        // after the next unlock message (theirs) or a short bound. Without a
        // subscription yet, subscribe now: our own message came before it,
        // so any message from here on is someone else's release.
        let until = deadline_min(deadline, Instant::now() + local::YIELD_WAIT);
        // Others are other libraries' waiters: their release only publishes
        // on the unlock channel, so hear it.
        let seen = match &sub {
            Some(s) => {
                s.listen_unlock(true, until);
                yield_to.messages
            }
            None => {
                let listen = Listen::Line {
                    key,
                    channel: &channel_name(key),
                    grant: &shared.grant_channel(key),
                    unlock: true,
                };
                let s = shared.notifier.subscribe(listen, until);
                let seen = s.messages();
                sub = Some(s);
                seen
            }
        };
        if let Some(s) = &sub {
            s.wait_for_message_after(seen, until);
        }
    }
    at.fresh = turn.fresh();
    at.fence = match (want.fenced, turn.fence()) {
        (false, _) => Fence::None,
        (true, Some(_)) => Fence::Keep,
        (true, None) => Fence::Mint,
    };
    // A waiter takes a place in the line of waiting clients; a single try
    // leaves none. Already subscribed (a busy name), the first attempt takes
    // it; otherwise the attempt after subscribing does (the loop retries
    // then anyway), so an uncontended lock makes no place at all.
    at.join = deadline.is_none_or(|d| d > Instant::now());
    if at.join && sub.is_some() {
        at.place = Some(shared.next_place(owner, lease, want.fenced));
    }
    let name = at.name;
    let got = wait::wait_for(
        &mut at,
        &live(shared, want.cancel.as_ref()),
        &mut sub,
        name,
        deadline,
    );
    turn.keep_subscription(sub);
    let Some(got) = got? else {
        return Ok(None);
    };
    let minted = got.held;
    // A reentrant fenced hold returns the token it already has.
    let token = minted.or(turn.fence()).filter(|_| want.fenced);
    let state = shared.lease_state(key, owner, lease, watchdog, got.sent_at, got.lease, None);
    turn.acquired(&state, minted);
    let g = guard(
        shared,
        name,
        key.to_owned(),
        owner.to_owned(),
        lease,
        want,
        token,
        state,
    );
    Ok(Some(g))
}

/// The wait loop's view of this client: its notifier, counters, the pool's
/// connect timeout, and the caller's cancel handle.
fn live<'a>(shared: &'a Shared, cancel: Option<&'a Cancel>) -> Live<'a> {
    Live {
        notifier: &shared.notifier,
        counters: &shared.renewer.counters,
        outage_limit: shared.outage_limit(),
        cancel,
    }
}

#[allow(clippy::too_many_arguments)]
fn guard<O>(
    shared: &Arc<Shared>,
    name: &str,
    key: String,
    field: String,
    lease: Duration,
    want: Want,
    fence: Option<u64>,
    state: Arc<crate::renewal::LeaseState>,
) -> LockGuard<O> {
    LockGuard::new(
        Arc::clone(shared),
        Hold {
            name: name.to_owned(),
            key,
            field,
            lease,
            kind: want.kind,
            fence,
            state,
            renewed: want.lease.is_none(),
        },
    )
}

/// One lock of any kind at Redis, for the wait loop: the kind's scripts
/// through the client's shared state.
struct AtRedis<'a> {
    shared: &'a Arc<Shared>,
    name: &'a str,
    kind: Kind,
    key: &'a str,
    owner: &'a str,
    lease: Duration,
    /// Plain: no guard of this owner is alive in the client.
    fresh: bool,
    fence: Fence,
    /// Plain, fair: this wait's place in the line of waiting clients (the
    /// mark of its fair queue entry).
    place: Option<String>,
    /// Plain: the wait takes a place in line once the lock is found held.
    join: bool,
    /// The watchdog renews the lease (no explicit lease).
    watchdog: bool,
    /// Plain: the last attempt found the lock held by another library's
    /// client, which only publishes the unlock message when it lets go.
    foreign: bool,
    /// What each round trip may take (a bounded wait's deadline).
    bound: Bound,
}

impl LockKind for AtRedis<'_> {
    /// The fencing token the attempt minted, if any.
    type Held = Option<u64>;

    fn attempt(&mut self) -> Result<Answer<Option<u64>>> {
        // A retry after a lost reply undoes what that one may have done.
        self.shared.settle(self.key, self.owner, self.bound)?;
        // A waiter is named to operators too (its registration is kept
        // written while it waits; two atomics).
        self.shared.renewer.touch(Instant::now(), self.lease);
        let req = Request {
            kind: self.kind,
            key: self.key,
            owner: self.owner,
            lease: self.lease,
            fresh: self.fresh,
            fence: self.fence,
            place: self.place.as_deref(),
        };
        match self.shared.attempt(self.name, &req, self.bound)? {
            Attempt::Acquired { minted } => Ok(Answer::Held(minted)),
            Attempt::Wait { hint, foreign } => {
                self.foreign = foreign;
                if self.join && self.place.is_none() {
                    // Plain: the next attempt takes a place in line.
                    self.place = Some(self.shared.next_place(
                        self.owner,
                        self.lease,
                        self.fence != Fence::None,
                    ));
                }
                // A holder that died without unlocking costs at most its
                // lease: wake when it would have expired (+1 ms for PTTL's
                // rounding) — or earlier, to confirm a waiting place.
                let mut cap = hint.unwrap_or(self.shared.watchdog_lease);
                if let Some(confirm) =
                    protocol::waiting_place(self.kind, self.lease).filter(|_| self.holds_place())
                {
                    cap = cap.min(confirm);
                }
                Ok(Answer::Wait(cap + Duration::from_millis(1)))
            }
            Attempt::Upgrade => Err(Error::UpgradeWouldDeadlock {
                name: self.name.to_owned(),
            }),
        }
    }

    fn undo(&mut self, _minted: Option<u64>) {
        let field = protocol::hold_field(self.kind, self.owner);
        let rel = Release {
            kind: self.kind,
            key: self.key,
            field: &field,
            lease: self.lease,
            last: self.fresh,
            successor: None,
        };
        let bound = self.bound.with_pool_wait(self.shared.socket_timeout);
        let _ = self.shared.release_script(&rel, bound);
    }

    fn lease(&self) -> Duration {
        self.lease
    }

    fn channels(&self) -> Channels {
        Channels {
            channel: protocol::wait_channel(self.kind, self.key, self.owner),
            line: (self.kind == Kind::Plain)
                .then(|| (self.key.to_owned(), self.shared.grant_channel(self.key))),
            unlock: self.hears_unlock(),
        }
    }

    /// Plain: a waiter in line is granted the lock (or told to try again)
    /// on its grant channel by a leasehold holder's release; it needs the
    /// unlock channel only while another library holds the lock — or when
    /// it has no place in line.
    fn hears_unlock(&self) -> bool {
        self.kind != Kind::Plain || self.foreign || self.place.is_none()
    }

    /// A grant names this wait's place: held at once with the grant's short
    /// lease (renewal lengthens it) and the token minted for it — unless the
    /// hold must be taken as asked by an attempt: an explicit lease (its own
    /// length), a fenced hold the grant brought no token for, replica
    /// acknowledgement (`WAIT` after the acquire).
    fn granted(&mut self, grant: &[u8]) -> Option<Granted<Option<u64>>> {
        let (place, token) = protocol::parse_grant(grant)?;
        if Some(place) != self.place.as_deref() {
            return None;
        }
        let fenced = self.fence != Fence::None;
        let direct =
            self.watchdog && self.shared.replicas.is_none() && (token.is_some() || !fenced);
        Some(if direct {
            Granted::Held(token.filter(|_| fenced), protocol::grant_lease(self.lease))
        } else {
            Granted::Accept
        })
    }

    fn wake(&self) -> Wake {
        match self.kind {
            Kind::Read | Kind::Write => Wake::OneOrAll,
            Kind::Plain | Kind::Fair => Wake::One,
        }
    }

    fn holds_place(&self) -> bool {
        match self.kind {
            Kind::Plain => self.place.is_some(),
            kind => protocol::place_lease(kind, self.lease).is_some(),
        }
    }

    fn leave(&mut self) {
        let granted = self.shared.leave(
            self.kind,
            self.key,
            self.owner,
            self.place.as_deref(),
            self.lease,
            self.bound,
        );
        if granted {
            // Given to us as we gave up: pass it on.
            self.undo(None);
        }
    }
}
