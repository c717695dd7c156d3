//! The one acquire driver of every face, for locks and permits alike
//! (`driven`: cancelled before it began, counted, traced). A lock: one
//! acquisition of the raw layer ([`Waiting`]: input checks, every kind's
//! attempt), the undo of an earlier lost reply, then — for a kind with the
//! in-process queue — a turn in the client's queue (threads of one client
//! never race each other at Redis), the one wait loop ([`wait::wait_for`]),
//! and the hold. Permits: a [`PermitWaiting`](crate::raw::PermitWaiting)
//! through the same wait loop.

use std::sync::Arc;
use std::time::Instant;

use crate::error::{Error, Result};
use crate::ledger::{Enter, Turn, YIELD_WAIT};
use crate::notify::Subscription;
use crate::options::Kind;
use crate::options::{deadline_min, Cancel};
use crate::park::Park;
use crate::raw::{Channels, Hold, LockKind, PermitHold, Taken, Waiting, Want};
use crate::shared::Shared;
use crate::wait::{self, Env, Live};

/// The one acquire of both faces: lock `name` as `want` says (a thread or a
/// task waits, `want.park`), until `deadline`; the hold, `None` at the
/// deadline, [`Error::Cancelled`] when cancelled.
pub(crate) async fn acquire_hold(
    shared: &Arc<Shared>,
    name: &str,
    want: Want,
    deadline: Option<Instant>,
) -> Result<Option<Hold>> {
    let wait = || take(shared, name, &want, deadline);
    driven(shared, name, Of::Lock(want.kind), &want, wait).await
}

/// The one acquire of permits for both faces: `permits` permits of
/// semaphore `name` as `want` says, until `deadline`; `None` at the
/// deadline, [`Error::Cancelled`] when cancelled.
pub(crate) async fn acquire_permits(
    shared: &Arc<Shared>,
    name: &str,
    permits: u32,
    want: Want,
    deadline: Option<Instant>,
) -> Result<Option<PermitHold>> {
    let wait = || take_permits(shared, name, permits, &want, deadline);
    driven(shared, name, Of::Permits(permits), &want, wait).await
}

/// What an acquire is of, for its trace.
#[derive(Clone, Copy)]
enum Of {
    Lock(Kind),
    Permits(u32),
}

impl Of {
    /// What the counters call it.
    fn meter_kind(self) -> crate::meter::Kind {
        match self {
            Of::Lock(kind) => kind.meter_kind(),
            Of::Permits(_) => "permits",
        }
    }
}

impl std::fmt::Display for Of {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Of::Lock(kind) => write!(f, "{kind:?} lock"),
            Of::Permits(n) => write!(f, "{n} permits"),
        }
    }
}

/// The one driver of every acquisition: its wait — made by `wait` (not
/// passed in: a task's future would hold it twice), unless it was cancelled
/// before it began — counted, traced, and a wait that ended because it was
/// cancelled made [`Error::Cancelled`].
async fn driven<T, F: std::future::Future<Output = Result<Option<T>>>>(
    shared: &Shared,
    name: &str,
    of: Of,
    want: &Want,
    wait: impl FnOnce() -> F,
) -> Result<Option<T>> {
    let cancelled = || want.cancel.as_ref().is_some_and(Cancel::is_cancelled);
    let started = Instant::now();
    let kind = of.meter_kind();
    crate::meter::attempt(kind);
    let got = if cancelled() { Ok(None) } else { wait().await };
    match &got {
        Ok(Some(_)) => crate::meter::acquired(kind),
        Ok(None) => crate::meter::busy(kind),
        Err(_) => {}
    }
    let waited = started.elapsed();
    let raw = shared.raw();
    let cancelled = cancelled();
    let outcome = match &got {
        Ok(got) => raw.counters().ended(waited, got.is_some(), cancelled),
        Err(_) => "failed",
    };
    if matches!(got, Ok(Some(_))) {
        raw.touch(Instant::now(), want.lease.unwrap_or(raw.watchdog_lease()));
    }
    // Debug level, no owner: names and timings only.
    tracing::debug!(name = %name, of = %of, waited_us = waited.as_micros() as u64, outcome, "leasehold: acquire");
    match got {
        Ok(None) if cancelled => Err(Error::Cancelled {
            name: name.to_owned(),
        }),
        got => got,
    }
}

/// The hold of lock `name` as `want` says, or `None` at the deadline.
async fn take(
    shared: &Shared,
    name: &str,
    want: &Want,
    deadline: Option<Instant>,
) -> Result<Option<Hold>> {
    let mut waiting = shared.raw().waiting(name, want, deadline)?;
    let env = live(shared, want.cancel.as_ref(), want.park);
    // What a lost reply of this owner left here is undone first, riding
    // out an outage as the wait would.
    // The wait loop and the undo of a lost reply live on the heap for the
    // time they run (one allocation per acquire): a task's future is then
    // only as large as what it keeps while queued in-process — the state of
    // most of thousands of waiting tasks.
    if waiting.unsettled() {
        Box::pin(wait::ride_out(&env, name, deadline, || waiting.settle())).await?;
    }
    if waiting.queues_in_process() {
        // A plain lock: one thread per client and name talks to Redis. A
        // turn in the client's queue first (or the lock handed over by a
        // release of this client): where most waiting tasks wait, so the
        // rest of the turn lives on the heap for the time it runs.
        let taken = match waiting.enter(deadline, env.cancel).await {
            Enter::Turn(turn) => {
                Box::pin(in_turn(shared, name, &mut waiting, &env, turn, deadline)).await?
            }
            Enter::Granted(sent_at, fence) => Some(Taken::HandedOver(sent_at, fence)),
            Enter::TimedOut => None,
            Enter::Abandoned => {
                waiting.abandoned();
                None
            }
        };
        return Ok(taken.map(|taken| waiting.held(taken)));
    }
    // A subscription still confirmed (the same waiter's channel lingering,
    // a busy read/write lock) is taken before the first attempt: held
    // elsewhere, the waiter parks at once instead of subscribing and trying
    // again.
    let mut sub = shared.notifier().resume(&waiting.channels().channel);
    waiting.take_place(deadline);
    let got = Box::pin(wait::wait_for(&mut waiting, &env, &mut sub, name, deadline)).await?;
    Ok(got.map(|got| waiting.held(Taken::Attempt(got))))
}

/// A kind with the in-process queue, its turn there taken: Redis.
async fn in_turn<'a>(
    shared: &Shared,
    name: &str,
    waiting: &mut Waiting<'a>,
    env: &Live<'_>,
    mut turn: Turn<'a>,
    deadline: Option<Instant>,
) -> Result<Option<Taken<'a>>> {
    // A subscription still confirmed (a busy name) is taken before the first
    // attempt: held elsewhere, the waiter parks at once.
    let mut sub = turn.take_subscription().or_else(|| {
        let key = &waiting.key;
        shared
            .notifier()
            .resume_line_on(key, || crate::names::channel_name(key).to_string())
    });
    if let Some(yield_to) = turn.yield_to.take() {
        yield_first(waiting, env, &mut sub, yield_to, deadline).await;
    }
    waiting.begin_turn(&turn, sub.is_some(), deadline);
    let got = wait::wait_for(waiting, env, &mut sub, name, deadline).await;
    if let (Ok(Some(_)), Some(s)) = (&got, &sub) {
        // Ours now: another library's release is nothing to wait for, and
        // a subscription on its channel would count as its waiter when our
        // own release asks who listens (a public release, a yield).
        s.listen_unlock(env.park, false, Instant::now()).await;
    }
    turn.keep_subscription(sub);
    Ok(got?.map(|got| Taken::Turn(turn, got)))
}

/// Our release woke other clients: let them take it first, and try after
/// the next unlock message (theirs: after the first `messages`) or a short
/// bound. Without a subscription
/// yet, subscribe now: our own message came before it, so any message from
/// here on is someone else's release. Others are other libraries' waiters:
/// their release only publishes on the unlock channel, so hear it.
async fn yield_first(
    waiting: &Waiting<'_>,
    env: &Live<'_>,
    sub: &mut Option<Subscription>,
    messages: u64,
    deadline: Option<Instant>,
) {
    let until = deadline_min(deadline, Instant::now() + YIELD_WAIT);
    let (s, seen) = match sub {
        Some(s) => {
            s.listen_unlock(env.park, true, until).await;
            (s, messages)
        }
        None => {
            let unlock = Channels {
                unlock: true,
                ..waiting.channels()
            };
            let s = sub.insert(env.subscribe(&unlock, until).await);
            let seen = s.messages();
            (s, seen)
        }
    };
    s.wait_for_message_after(env.park, seen, until).await;
}

/// `permits` permits of semaphore `name` as `want` says, or `None` at the
/// deadline; a wait that ends without them leaves its place in line.
async fn take_permits(
    shared: &Shared,
    name: &str,
    permits: u32,
    want: &Want,
    deadline: Option<Instant>,
) -> Result<Option<PermitHold>> {
    let mut waiting = shared.raw().permit_waiting(name, permits, want, deadline)?;
    let env = live(shared, want.cancel.as_ref(), want.park);
    // A subscription still confirmed (a busy semaphore) is taken before the
    // first attempt, which then takes a place in line: one round trip
    // before parking.
    let mut sub = if deadline.is_none_or(|d| d > Instant::now()) {
        let channel = waiting.keys.channel.clone();
        shared
            .notifier()
            .resume_line_on(&waiting.keys.line, move || channel)
    } else {
        None
    };
    if sub.is_some() {
        waiting.take_place();
    }
    // Ended without them: `waiting`'s drop gives back what it may have taken.
    let got = Box::pin(wait::wait_for(&mut waiting, &env, &mut sub, name, deadline)).await;
    Ok(got?.map(|got| waiting.held(got)))
}

/// The wait loop's view of this client: its notifier, counters, the pool's
/// connect timeout, the caller's cancel handle, and who waits.
pub(crate) fn live<'a>(shared: &'a Shared, cancel: Option<&'a Cancel>, park: Park) -> Live<'a> {
    let raw = shared.raw();
    Live {
        notifier: shared.notifier(),
        counters: raw.counters(),
        outage_limit: raw.outage_limit(),
        cancel,
        park,
    }
}
