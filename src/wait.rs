//! The one acquire loop of every Redis lock kind — plain, fair, read, write,
//! and a semaphore's permits:
//! attempt → held / wait / refused; the reply that came after its lease;
//! riding out an outage (a bounded wait up to its deadline, an unbounded one
//! up to the outage limit); the deadline; subscribe-then-retry; parking; a
//! grant (a release that gave the lock to this waiter directly: held with
//! no round trip); and leaving a waiting place in Redis when the wait ends
//! without the lock.
//!
//! What differs between kinds comes in through [`LockKind`] (its attempt,
//! undo, channel, wake rule, waiting place); everything that blocks or
//! listens comes in through [`Env`] (the notifier, the pool's connect
//! timeout, the clock). Both are seams: the unit tests below drive the loop with fakes,
//! no Redis, and check each decision.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::notify::{Listen, Notifier, Subscription};
use crate::options::{deadline_min, Cancel};
use crate::park::Park;
use crate::raw::{Answer, Channels, Got, Granted, LockKind, Wake};
use crate::stats::Counters;

/// Acquire replies arriving after their lease ran out before we give up.
pub(crate) const LATE_REPLIES_MAX: u32 = 3;

/// Backoff between attempts while Redis is unreachable during a wait.
const OUTAGE_BACKOFF_MIN: Duration = Duration::from_millis(10);
const OUTAGE_BACKOFF_MAX: Duration = Duration::from_millis(500);

/// Where the loop subscribes, parks and learns how long an outage may last.
pub(crate) trait Env {
    /// One subscription to a channel.
    type Sub;
    /// Subscribes (waits for Redis to confirm, at most until `confirm_by`).
    async fn subscribe(&self, channels: &Channels, confirm_by: Instant) -> Self::Sub;
    /// A plain lock's subscription: hears the unlock channel too, or no
    /// longer. True when it starts to (confirmed, or `confirm_by` passed):
    /// the waiter attempts again before parking.
    async fn listen_unlock(&self, sub: &Self::Sub, on: bool, confirm_by: Instant) -> bool;
    /// Forgets wake-ups granted so far.
    fn clear_permits(&self, sub: &Self::Sub);
    /// Takes the grant messages received so far (with `claim`, a
    /// [`Wake::Claim`] waiter's: only those naming it — others are left for
    /// their waiters).
    fn take_grants(&self, sub: &Self::Sub, claim: Option<&str>) -> Vec<Vec<u8>>;
    /// Wake-all messages seen on the channel so far.
    fn broadcasts(&self, sub: &Self::Sub) -> u64;
    /// Parks until woken by the rule (with `claim`, a [`Wake::Claim`]
    /// waiter: a grant naming it or a wake-up), or `until`. True when a
    /// message woke it (not `until`, not a cancel).
    async fn park(
        &self,
        sub: &Self::Sub,
        wake: Wake,
        seen: u64,
        claim: Option<&str>,
        until: Instant,
    ) -> bool;
    /// Counts a lock taken after the wait found it held: on a message that
    /// woke the waiter (`woken`), or at a retry of its own (its timer, a
    /// retry after subscribing or an outage).
    fn got_after_waiting(&self, woken: bool);
    /// Whether Redis confirmed the subscription (the subscriber is
    /// connected): only then does an unlock message reach the waiter.
    fn listening(&self, sub: &Self::Sub) -> bool;
    /// Sharded pub/sub: whether the subscription is on a node that no
    /// longer serves the channel's slot (subscribe again).
    fn moved(&self, sub: &Self::Sub) -> bool;
    /// Pauses during an outage until `until` (on `sub` when there is one, so
    /// a reconnect wakes it early).
    async fn pause(&self, sub: Option<&Self::Sub>, until: Instant);
    /// How long continuous failure is ridden out before giving up.
    fn outage_limit(&self) -> Duration;
    /// Whether the caller cancelled the wait: it ends as at a deadline
    /// (its waiting place left), checked before every attempt and after
    /// every park.
    fn cancelled(&self) -> bool;
    /// The time, as the loop reads it (the unit tests' fake moves it on
    /// instead of sleeping).
    fn now(&self) -> Instant {
        Instant::now()
    }
}

/// A waiter that cannot hear unlock messages retries after this long at
/// first, doubling up to [`DEAF_RETRY_MAX`].
const DEAF_RETRY_MIN: Duration = Duration::from_millis(100);
const DEAF_RETRY_MAX: Duration = Duration::from_secs(1);

/// Waits for the lock `name` of `kind` until `deadline` (`None`: as long as
/// it takes). `sub` is the subscription to start with (kept between waits by
/// the in-process queue) and holds the one the wait ended with. Returns the
/// hold, when its lease was set and how long; `None` when the deadline
/// passed.
pub(crate) async fn wait_for<K: LockKind, E: Env>(
    kind: &mut K,
    env: &E,
    sub: &mut Option<E::Sub>,
    name: &str,
    deadline: Option<Instant>,
) -> Result<Option<Got<K::Held>>> {
    let wake = kind.wake();
    let mut place = Place {
        kind,
        armed: false,
        heard: true,
    };
    // Set once an attempt found the lock held: from then on we wait, and an
    // outage shorter than the limit is ridden out. A bounded wait (its
    // deadline still ahead) rides an outage out from its first attempt, up
    // to its deadline; a single attempt reports the error at once.
    let mut waiting = false;
    let bounded = deadline.is_some_and(|d| d > env.now());
    let mut outage = Outage::default();
    let mut late = 0;
    // While unlock messages cannot reach us, retry this often (growing).
    let mut deaf = DEAF_RETRY_MIN;
    // A subscription was dropped because its channel's slot moved.
    let mut moved = false;
    // The last park ended on a message: the next attempt was set off by it.
    let mut woken = false;
    loop {
        if env.cancelled() {
            return Ok(None); // `place` leaves a waiting place
        }
        // Wake-ups from here on are news to this attempt.
        let seen = match (sub.as_ref(), wake) {
            (Some(s), Wake::One) => {
                env.clear_permits(s);
                0
            }
            (Some(s), Wake::OneOrAll) => env.broadcasts(s),
            (_, Wake::Claim) | (None, _) => 0,
        };
        if let Some(s) = sub.as_ref() {
            // A grant already made is found by this attempt (the lock is set
            // to us); only grants after it are news.
            drop(grants(env, s, &*place.kind));
        }
        let on_message = std::mem::take(&mut woken);
        // The lease counts from when the request was sent, not answered.
        let sent_at = env.now();
        let answer = place.kind.attempt().await;
        // A try sent and not answered, or no server reached: a place left
        // from here on is left once Redis answers, not waited for now. (One
        // not sent for want of time changes nothing: Redis answered last.)
        place.heard = match &answer {
            Err(Error::TimedOut { timeout, .. }) if timeout.is_zero() => place.heard,
            Err(e) => !e.is_transient(),
            Ok(_) => true,
        };
        let cap = match answer {
            // Redis answered that the lock is held and has not failed
            // since, and the last try had only the rest of the wait, less
            // than the socket timeout, for its reply (or nothing: not
            // sent): the wait ran out, Redis did not fail. A reply waited
            // for less than the socket timeout is not late by the client's
            // own measure (`Unavailable` is for a silence the wait rode
            // out as an outage).
            Err(Error::TimedOut {
                by_deadline: true, ..
            }) if waiting && outage.since.is_none() => return Ok(None),
            // Cancelled while the try was out (its round trip could not be
            // cut short): the wait ends cancelled, not with its timeout.
            Err(e) if e.is_transient() && env.cancelled() => return Ok(None),
            Err(e) if (waiting || bounded) && e.is_transient() => {
                outage
                    .ride(env, name, e, sent_at, deadline, sub.as_ref())
                    .await?;
                continue;
            }
            Err(e) => return Err(e),
            Ok(Answer::Held(held)) => {
                let round_trip = env.now().saturating_duration_since(sent_at);
                let lease = place.kind.lease();
                if round_trip < lease {
                    place.armed = false;
                    if waiting {
                        env.got_after_waiting(on_message);
                    }
                    return Ok(Some(Got {
                        held,
                        sent_at,
                        lease,
                    }));
                }
                // The reply came after the lease it set had run out: that
                // is no lock. Undo whatever is left, owner-checked.
                place.kind.undo(held).await;
                late += 1;
                if late >= LATE_REPLIES_MAX || deadline.is_some_and(|d| d <= env.now()) {
                    return Err(Error::LeaseExpiredOnArrival {
                        name: name.to_owned(),
                        lease,
                        round_trip,
                        tries: late,
                    });
                }
                continue;
            }
            Ok(Answer::Wait(cap)) => cap,
        };
        outage.since = None; // Redis answered: the outage (if any) is over
        waiting = true;
        place.armed = place.kind.holds_place();
        let now = env.now();
        if deadline.is_some_and(|d| d <= now) || env.cancelled() {
            return Ok(None); // `place` leaves a waiting place
        }
        let mut wake_at = deadline_min(deadline, now.checked_add(cap).unwrap_or(now));
        let Some(s) = sub.as_ref() else {
            // Subscribe first, then retry: an unlock published (or a grant
            // made) between the attempt and the confirmation is caught by
            // the retry. A subscriber that cannot connect holds us up no
            // longer than a deaf waiter's retry.
            let confirm_by = wake_at.min(now + DEAF_RETRY_MAX);
            *sub = Some(env.subscribe(&place.kind.channels(), confirm_by).await);
            continue;
        };
        if env.moved(s) {
            // Sharded pub/sub, and the slot moved (a reshard, a failover):
            // subscribe again on the node serving it now, after an attempt.
            // At once the first time; if it keeps moving, as a deaf waiter.
            *sub = None;
            if std::mem::replace(&mut moved, true) {
                env.pause(None, wake_at.min(now + deaf)).await;
                deaf = (deaf * 2).min(DEAF_RETRY_MAX);
            }
            continue;
        }
        let confirm_by = wake_at.min(now + DEAF_RETRY_MAX);
        if env
            .listen_unlock(s, place.kind.hears_unlock(), confirm_by)
            .await
        {
            // Another library holds it now: its release is heard from here
            // on, one published before is not — attempt again first.
            continue;
        }
        if env.listening(s) {
            deaf = DEAF_RETRY_MIN;
            moved = false;
        } else {
            // No unlock message can wake us (the subscriber is not
            // connected: an ACL, the network): retry at growing intervals,
            // never a whole lease.
            wake_at = wake_at.min(now + deaf);
            deaf = (deaf * 2).min(DEAF_RETRY_MAX);
        }
        let claim = place.kind.claim().filter(|_| wake == Wake::Claim);
        woken = env.park(s, wake, seen, claim, wake_at).await;
        for grant in grants(env, s, &*place.kind) {
            match place.kind.granted(&grant) {
                // Made after the attempt that left us waiting (sent at
                // `sent_at`): its lease runs at least that long from then.
                // Held with half of it gone already is held too briefly to
                // trust: the attempt decides instead.
                Some(Granted::Held(held, lease))
                    if env.now().saturating_duration_since(sent_at) < lease / 2 =>
                {
                    place.armed = false;
                    env.got_after_waiting(true);
                    return Ok(Some(Got {
                        held,
                        sent_at,
                        lease,
                    }));
                }
                Some(_) => break,
                None => {}
            }
        }
    }
}

/// The grants received on `sub` for `kind`'s wait: all of them, or (a kind
/// whose grants are claimed) those naming its place.
fn grants<K: LockKind, E: Env>(env: &E, sub: &E::Sub, kind: &K) -> Vec<Vec<u8>> {
    match (kind.wake(), kind.claim()) {
        // No place yet: nothing on the shared subscription is ours.
        (Wake::Claim, None) => Vec::new(),
        (Wake::Claim, claim) => env.take_grants(sub, claim),
        _ => env.take_grants(sub, None),
    }
}

/// Runs `step` — a call a wait makes before its attempts, such as undoing
/// an earlier lost reply — riding out an outage as the loop does: a bounded
/// wait (its deadline still ahead) retries transient errors with backoff up
/// to its deadline; anything else reports the error at once.
pub(crate) async fn ride_out<T, E: Env, F: std::future::Future<Output = Result<T>>>(
    env: &E,
    name: &str,
    deadline: Option<Instant>,
    mut step: impl FnMut() -> F,
) -> Result<T> {
    let bounded = deadline.is_some_and(|d| d > env.now());
    let mut outage = Outage::default();
    loop {
        let sent_at = env.now();
        match step().await {
            Err(e) if bounded && e.is_transient() && !env.cancelled() => {
                outage.ride(env, name, e, sent_at, deadline, None).await?;
            }
            other => return other,
        }
    }
}

/// A waiting place in Redis, left when the wait ends without the lock —
/// deadline, error or panic — so those behind it go on at once instead of
/// waiting for it to expire.
struct Place<'k, K: LockKind> {
    kind: &'k mut K,
    armed: bool,
    /// Redis answered the wait's last call: the place is left at once.
    /// Not (Redis silent): sending the leave now would wait out the socket
    /// timeout past the wait's deadline — it is left once Redis answers.
    heard: bool,
}

impl<K: LockKind> Drop for Place<'_, K> {
    fn drop(&mut self) {
        if self.armed {
            self.kind.leave(self.heard);
        }
    }
}

/// A waiter riding out a Redis outage (a restart, a failover, a server
/// loading its data): it retries with backoff until Redis answers, its
/// deadline, or the outage limit of continuous failure — then it gives up
/// with the error.
#[derive(Default)]
struct Outage {
    since: Option<Instant>,
}

impl Outage {
    /// After transient error `e` of a call sent at `sent_at` while waiting
    /// (the outage began then, at the latest): pauses until the next
    /// retry — the backoff, or the deadline if that comes first (a last
    /// attempt then, its round trip bounded by what is left) — or gives up
    /// with [`Error::Unavailable`] once the deadline has passed or, without
    /// one, the outage lasted longer than the limit.
    async fn ride<E: Env>(
        &mut self,
        env: &E,
        name: &str,
        e: Error,
        sent_at: Instant,
        deadline: Option<Instant>,
        sub: Option<&E::Sub>,
    ) -> Result<()> {
        let now = env.now();
        let since = *self.since.get_or_insert(sent_at);
        let backoff = (now - since).clamp(OUTAGE_BACKOFF_MIN, OUTAGE_BACKOFF_MAX);
        let mut retry_at = now + backoff;
        let too_long = match deadline {
            Some(d) => {
                retry_at = retry_at.min(d);
                d <= now
            }
            None => now - since >= env.outage_limit(),
        };
        if too_long {
            return Err(Error::Unavailable {
                name: name.to_owned(),
                outage: now - since,
                source: Box::new(e),
            });
        }
        tracing::debug!(lock = %name, error = ?e, "leasehold: redis unavailable while waiting; retrying");
        env.pause(sub, retry_at).await;
        Ok(())
    }
}

/// The real environment: the client's notifier, counted parking, and the
/// pool's connect timeout as the outage limit — for a thread or a task.
pub(crate) struct Live<'a> {
    pub(crate) notifier: &'a Notifier,
    pub(crate) counters: &'a Counters,
    pub(crate) outage_limit: Duration,
    /// Wakes its parks and pauses at once when cancelled.
    pub(crate) cancel: Option<&'a Cancel>,
    /// Who waits.
    pub(crate) park: Park,
}

impl Env for Live<'_> {
    type Sub = Subscription;

    async fn subscribe(&self, channels: &Channels, confirm_by: Instant) -> Subscription {
        let listen = match &channels.line {
            Some((key, grant)) => Listen::Line {
                key,
                channel: &channels.channel,
                grant,
                unlock: channels.unlock,
                claims: channels.claims,
            },
            None => Listen::Channel(&channels.channel),
        };
        self.notifier.subscribe(self.park, listen, confirm_by).await
    }

    async fn listen_unlock(&self, sub: &Subscription, on: bool, confirm_by: Instant) -> bool {
        sub.listen_unlock(self.park, on, confirm_by).await
    }

    fn clear_permits(&self, sub: &Subscription) {
        sub.clear_permits();
    }

    fn take_grants(&self, sub: &Subscription, claim: Option<&str>) -> Vec<Vec<u8>> {
        match claim {
            Some(claim) => sub.take_claims(claim),
            None => sub.take_grants(),
        }
    }

    fn broadcasts(&self, sub: &Subscription) -> u64 {
        sub.broadcasts()
    }

    async fn park(
        &self,
        sub: &Subscription,
        wake: Wake,
        seen: u64,
        claim: Option<&str>,
        until: Instant,
    ) -> bool {
        // Counted while parked, also when a task's wait is dropped here.
        let _parked = Unpark::counted(self.counters);
        let (park, stop) = (self.park, self.cancel);
        match (wake, claim) {
            (Wake::Claim, Some(claim)) => sub.wait_claim_until(park, claim, until, stop).await,
            (Wake::OneOrAll, _) => sub.wait_until(park, Some(seen), until, stop).await,
            _ => sub.wait_until(park, None, until, stop).await,
        }
    }

    fn got_after_waiting(&self, woken: bool) {
        let counter = match woken {
            true => &self.counters.woken_acquisitions,
            false => &self.counters.retried_acquisitions,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    fn listening(&self, sub: &Subscription) -> bool {
        sub.confirmed()
    }

    fn moved(&self, sub: &Subscription) -> bool {
        sub.moved()
    }

    async fn pause(&self, sub: Option<&Subscription>, until: Instant) {
        match sub {
            Some(sub) => {
                sub.wait_until(self.park, None, until, self.cancel).await;
            }
            None => self.park.sleep_until(until, self.cancel).await,
        }
    }

    fn cancelled(&self) -> bool {
        self.cancel.is_some_and(Cancel::is_cancelled)
    }

    fn outage_limit(&self) -> Duration {
        self.outage_limit
    }
}

/// Takes a parked waiter off the count when its park ends (or is dropped).
struct Unpark<'a>(&'a AtomicU64);

impl<'a> Unpark<'a> {
    /// A parked waiter counted in `counters` until this is dropped.
    fn counted(counters: &'a Counters) -> Self {
        counters.waiters_parked.fetch_add(1, Ordering::Relaxed);
        Unpark(&counters.waiters_parked)
    }
}

impl Drop for Unpark<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests;
