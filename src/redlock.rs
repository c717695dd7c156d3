//! Redlock: one lock over N independent Redis masters, held while a majority
//! of them hold it — the algorithm of <https://redis.io/docs/latest/develop/use/patterns/distributed-locks/>.
//!
//! Each node is a [`LockClient`] of its own (pool, scripts, renewal thread,
//! typed errors), so a Redlock hold is the same Redisson-layout hash on each
//! node. What Redlock adds is the arithmetic across them:
//!
//! - every attempt goes to all nodes at once, each bounded by the node
//!   timeout (much smaller than the lease);
//! - the hold counts only when a majority said yes, and its validity is the
//!   lease minus the time the attempt took (from when the first request was
//!   sent) minus the clock drift allowance (lease / 100 + 2 ms);
//! - otherwise it is released on every node (a node that timed out may have
//!   taken it) and tried again after a random delay;
//! - renewal extends the hold on every node that has it; the hold is lost
//!   once fewer than a majority still do; unlock releases on all nodes.
//!
//! Redlock holds have no fencing tokens: a token would have to come from one
//! counter that every holder agrees on, and N independent counters do not
//! make one (a majority of them can disagree after a restart), so any number
//! we handed out would look like a guarantee it is not. Use a fenced lock on
//! one Redis (with [`LockClientBuilder::replicas`](crate::LockClientBuilder::replicas))
//! when the resource can check tokens.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::client::{or_timed_out, LockClient};
use crate::conn::Bound;
use crate::error::{Error, Result};
use crate::names::short_id;
use crate::options::{
    check_lease, check_name, deadline_after, deadline_min, Cancel, Common, RedlockOptions,
};
use crate::park::{block_on, blocking_wait_allowed, on_executor, Park};
use crate::raw::Hold;
use crate::renewal::{LeaseState, LeaseWatch, Quorum};

/// A lock over several independent Redis masters (Redlock).
///
/// ```no_run
/// # fn main() -> Result<(), leasehold::Error> {
/// let redlock = leasehold::Redlock::new(&[
///     "redis://10.0.0.1/",
///     "redis://10.0.0.2/",
///     "redis://10.0.0.3/",
/// ])?;
/// let guard = redlock.lock("ledger:close-day")?; // held on at least 2 of 3
/// assert!(guard.is_held());
/// guard.unlock()?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Redlock {
    inner: Arc<RedlockInner>,
}

struct RedlockInner {
    id: uuid::Uuid,
    nodes: Vec<LockClient>,
    /// As built (the node URLs among them).
    settings: RedlockBuilder,
    next_owner: AtomicU64,
    leases_lost: Arc<AtomicU64>,
    rng: Mutex<u64>,
}

/// Builds a [`Redlock`]: the node URLs, then the settings.
#[must_use = "a builder does nothing until build() is called"]
pub struct RedlockBuilder {
    urls: Vec<String>,
    key_prefix: String,
    lease: Duration,
    node_timeout: Duration,
    retry_delay: Duration,
    give_up_after: Duration,
}

impl RedlockBuilder {
    setters! {
        /// The lease of holds taken without an explicit one, renewed on every
        /// node that has the hold every third of it. Defaults to 30 s.
        watchdog_lease(lease: Duration) => lease = lease;

        /// How long one node may take to connect or answer before it counts as
        /// a "no" — keep it far below the lease (redis.io suggests 5–50 ms for a
        /// 10 s lease). Defaults to 50 ms.
        node_timeout(timeout: Duration) => node_timeout = timeout;

        /// The longest random pause between two attempts. Defaults to 200 ms.
        retry_delay(delay: Duration) => retry_delay = delay;

        /// How long a wait without a deadline keeps trying while no majority of
        /// nodes can be reached at all, before it fails with
        /// [`Error::NoQuorum`]. Defaults to 5 s.
        give_up_after(wait: Duration) => give_up_after = wait;

        /// A prefix put before every lock name to form the Redis key.
        key_prefix(prefix: impl Into<String>) => key_prefix = prefix.into();
    }

    /// Checks the settings and makes a client per node (nothing connects
    /// yet).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for no nodes, zero durations or a lease
    /// not well above the node timeout; [`Error::InvalidUrl`] for a bad URL.
    pub fn build(self) -> Result<Redlock> {
        if self.urls.is_empty() {
            return Err(Error::invalid("Redlock needs at least one node"));
        }
        if self.node_timeout.is_zero() {
            return Err(Error::invalid("the node timeout must be greater than zero"));
        }
        check_lease("watchdog lease", self.lease)?;
        if self.lease < self.node_timeout.saturating_mul(10) {
            return Err(Error::invalid(format_args!(
                "the lease ({:?}) must be at least ten node timeouts ({:?}): an attempt may take a node timeout, and what is left of the lease is the hold's validity",
                self.lease, self.node_timeout
            )));
        }
        let nodes = self
            .urls
            .iter()
            .map(|url| {
                LockClient::builder(url)
                    .key_prefix(self.key_prefix.clone())
                    .watchdog_lease(self.lease)
                    .connect_timeout(self.node_timeout)
                    .socket_timeout(self.node_timeout)
                    // A node's lease is told lost by the hold's validity:
                    // the drift allowance before it runs out.
                    .loss_margin(drift(self.lease))
                    .build()
            })
            .collect::<Result<Vec<_>>>()?;
        let id = crate::names::new_client_id();
        let seed = id.as_u64_pair().0 | 1;
        Ok(Redlock {
            inner: Arc::new(RedlockInner {
                id,
                nodes,
                settings: self,
                next_owner: AtomicU64::new(1),
                leases_lost: Arc::new(AtomicU64::new(0)),
                rng: Mutex::new(seed),
            }),
        })
    }
}

impl Redlock {
    /// A Redlock over these nodes with every default (see [`Redlock::builder`]).
    ///
    /// # Errors
    /// As [`RedlockBuilder::build`].
    pub fn new<S: AsRef<str>>(urls: &[S]) -> Result<Redlock> {
        Self::builder(urls).build()
    }

    /// A builder over these node URLs (independent masters, not replicas of
    /// each other; an odd number, usually 3 or 5).
    pub fn builder<S: AsRef<str>>(urls: &[S]) -> RedlockBuilder {
        RedlockBuilder {
            urls: urls.iter().map(|u| u.as_ref().to_owned()).collect(),
            key_prefix: String::new(),
            lease: Duration::from_secs(30),
            node_timeout: Duration::from_millis(50),
            retry_delay: Duration::from_millis(200),
            give_up_after: Duration::from_secs(5),
        }
    }

    /// How many nodes must hold a lock: ⌊N/2⌋ + 1.
    pub fn majority(&self) -> usize {
        majority(self.inner.nodes.len())
    }

    /// Takes the lock, retrying after random delays until a majority of the
    /// nodes grant it. Watchdog lease: renewed on every node that has it
    /// while the guard lives.
    ///
    /// # Errors
    /// [`Error::NoQuorum`] when no majority of nodes could even be reached
    /// for [`give_up_after`](RedlockBuilder::give_up_after); invalid names.
    pub fn lock(&self, name: &str) -> Result<RedlockGuard> {
        self.lock_with(name, RedlockOptions::new())
    }

    /// One attempt over all nodes: `None` when no majority granted it.
    ///
    /// # Errors
    /// [`Error::NoQuorum`] when too few nodes could be reached to decide.
    pub fn try_lock(&self, name: &str) -> Result<Option<RedlockGuard>> {
        self.acquire(name, &Common::default(), Some(Instant::now()))
    }

    /// Tries until `wait` has passed: `None` when the lock stayed held by
    /// others.
    ///
    /// # Errors
    /// [`Error::NoQuorum`] when at the deadline too few nodes could be
    /// reached to decide.
    pub fn try_lock_for(&self, name: &str, wait: Duration) -> Result<Option<RedlockGuard>> {
        self.acquire(name, &Common::default(), Some(deadline_after(wait)))
    }

    /// With options: an explicit lease (not renewed; the guard's validity is
    /// what is left of it after the attempt), a bounded wait
    /// ([`Error::WaitTimedOut`] when it runs out), a cancel handle (the
    /// pause between two rounds ends at once; a round under way ends
    /// within the node timeout).
    ///
    /// # Errors
    /// As [`lock`](Self::lock), plus [`Error::WaitTimedOut`] and
    /// [`Error::Cancelled`].
    pub fn lock_with(&self, name: &str, options: RedlockOptions) -> Result<RedlockGuard> {
        let wait = options.wait_time();
        let got = self.acquire(name, options.common(), wait.map(deadline_after))?;
        or_timed_out(got, name, wait)
    }

    /// As [`lock_with`](Self::lock_with), but `None` when the wait runs
    /// out; without [`RedlockOptions::wait`] one attempt.
    ///
    /// # Errors
    /// As [`lock_with`](Self::lock_with).
    pub fn try_lock_with(
        &self,
        name: &str,
        options: RedlockOptions,
    ) -> Result<Option<RedlockGuard>> {
        let wait = options.wait_time().unwrap_or_default();
        self.acquire(name, options.common(), Some(deadline_after(wait)))
    }

    /// Waits until `deadline`: the guard, or `None` when it passed.
    ///
    /// # Errors
    /// As [`lock`](Self::lock).
    pub fn try_lock_until(&self, name: &str, deadline: Instant) -> Result<Option<RedlockGuard>> {
        self.acquire(name, &Common::default(), Some(deadline))
    }

    /// [`rounds`](Self::rounds), counted as every hold's acquisitions are
    /// (`meter`; an error counts as an attempt only).
    fn acquire(
        &self,
        name: &str,
        options: &Common,
        deadline: Option<Instant>,
    ) -> Result<Option<RedlockGuard>> {
        crate::meter::attempt(METER);
        let got = self.rounds(name, options, deadline);
        match &got {
            Ok(Some(_)) => crate::meter::acquired(METER),
            Ok(None) => crate::meter::busy(METER),
            Err(_) => {}
        }
        got
    }

    fn rounds(
        &self,
        name: &str,
        options: &Common,
        deadline: Option<Instant>,
    ) -> Result<Option<RedlockGuard>> {
        check_name(name)?;
        let lease = options.lease;
        if let Some(lease) = lease {
            check_lease("lease", lease)?;
            // What an attempt leaves of the lease, less the drift, is the
            // hold's validity: none at all, and every round would take the
            // lock and give it back.
            let floor = self
                .inner
                .settings
                .node_timeout
                .saturating_add(drift(lease));
            if lease <= floor {
                return Err(Error::invalid(format_args!(
                    "the lease ({lease:?}) must be longer than a node timeout plus the drift allowance ({floor:?}): an attempt may take a node timeout, and what is left of the lease less the drift allowance is the hold's validity; raise the lease or lower the node timeout"
                )));
            }
        }
        // A cancel unparks this thread: a pause between rounds ends at once
        // (an unpark before the park is kept, so none is missed).
        let cancelled = || options.cancel.as_ref().is_some_and(Cancel::is_cancelled);
        let _on_cancel = options.cancel.as_ref().map(|cancel| {
            let me = std::thread::current();
            cancel.on_cancel(Arc::new(move || me.unpark()))
        });
        blocking_wait_allowed(
            name,
            deadline,
            false,
            "a Redlock's call inside tokio::task::spawn_blocking (it has no async face)",
        )?;
        let inner = &self.inner;
        // A bounded wait's round trips end by its deadline; a single try's
        // (a deadline already passed) take the node timeout.
        let bound = Bound::until(deadline.filter(|d| *d > Instant::now()));
        let mut unreachable_since: Option<Instant> = None;
        // The last round was answered by a majority (the lock was busy).
        let mut answered = false;
        loop {
            if cancelled() {
                return Err(Error::Cancelled {
                    name: name.to_owned(),
                });
            }
            let owner = self.new_owner();
            let (acquired, busy, errors) = match self.round(name, &owner, lease, bound) {
                Ok(guard) => return Ok(Some(guard)),
                Err(failed) => failed,
            };
            // Fewer than a majority answered at all: we cannot tell whether
            // anyone holds it (and nobody can take it either).
            let now = Instant::now();
            if acquired + busy < self.majority() {
                // The round the deadline cut short, its nodes having
                // answered the round before: the wait ran out, nothing
                // failed (as the one-server wait's last try).
                if std::mem::replace(&mut answered, false) && deadline.is_some_and(|d| d <= now) {
                    return Ok(None);
                }
                let since = *unreachable_since.get_or_insert(now);
                if deadline.map_or(now - since >= inner.settings.give_up_after, |d| d <= now) {
                    // At a deadline, the last round's silent nodes are the
                    // wait running out of time, whatever ended that round.
                    let first = errors.into_iter().next().map(|e| match deadline {
                        Some(_) => e.at_deadline(),
                        None => e,
                    });
                    return Err(Error::NoQuorum {
                        name: name.to_owned(),
                        acquired,
                        needed: self.majority(),
                        nodes: inner.nodes.len(),
                        first_error: first.map(Box::new),
                    });
                }
            } else {
                unreachable_since = None;
                answered = true;
                if deadline.is_some_and(|d| d <= now) {
                    return Ok(None);
                }
            }
            let pause = self.random_delay();
            let until = deadline_min(deadline, now + pause);
            loop {
                let left = until.saturating_duration_since(Instant::now());
                if left.is_zero() || cancelled() {
                    break;
                }
                std::thread::park_timeout(left);
            }
        }
    }

    /// One attempt on all nodes at once; each node's round trip ends by the
    /// node timeout, and within `bound` (a bounded wait's deadline). A node
    /// that took the request but did not answer undoes it in the background
    /// once it answers (the owner is this attempt's alone). The guard, or —
    /// no majority — how many nodes granted it, how many said someone else
    /// holds it, and the errors of those that could not be reached.
    fn round(
        &self,
        name: &str,
        owner: &str,
        lease: Option<Duration>,
        bound: Bound,
    ) -> std::result::Result<RedlockGuard, (usize, usize, Vec<Error>)> {
        let inner = &self.inner;
        let key = format!("{}{name}", inner.settings.key_prefix);
        let watchdog = lease.is_none();
        let lease = lease.unwrap_or(inner.settings.lease);
        let started = Instant::now();
        let answers = on_every_node(&inner.nodes, |node| {
            node.raw().attempt_unique(name, &key, owner, lease, bound)
        });
        let drift = drift(lease);
        let validity = lease.checked_sub(started.elapsed() + drift);
        let held: Vec<usize> = (0..answers.len())
            .filter(|&i| matches!(answers[i], Ok(true)))
            .collect();
        let busy = answers.iter().filter(|a| matches!(a, Ok(false))).count();
        let errors: Vec<Error> = answers.into_iter().filter_map(Result::err).collect();
        let Some(validity) = validity.filter(|v| !v.is_zero() && held.len() >= self.majority())
        else {
            // Not held: give back what we got at once, each node within the
            // node timeout — not the wait's deadline, which may have passed
            // (cut by it, nothing would be sent and the nodes would keep the
            // hold until the background undo came round); a release not
            // answered is sent again in the background.
            let took: Vec<&LockClient> = held.iter().map(|&i| &inner.nodes[i]).collect();
            on_every_node(&took, |node| {
                let _ = node.raw().release_unique(&key, owner, lease);
            });
            return Err((held.len(), busy, errors));
        };
        let state = LeaseState::new(started + validity);
        let quorum = Quorum::new(
            held.len(),
            self.majority(),
            Arc::clone(&state),
            Arc::clone(&inner.leases_lost),
        );
        let nodes = held
            .iter()
            .map(|&i| {
                let hold = inner.nodes[i]
                    .raw()
                    .hold_unique(name, &key, owner, lease, watchdog, started);
                if watchdog {
                    hold.state.join(&quorum);
                }
                (i, hold)
            })
            .collect();
        Ok(RedlockGuard {
            redlock: self.clone(),
            name: name.to_owned(),
            key,
            lease,
            valid_until: started + validity,
            watchdog,
            watch: LeaseWatch::of([Arc::clone(&state)]),
            state,
            nodes,
            since: crate::meter::Since::now(),
        })
    }

    /// A fresh owner per acquisition (the algorithm's random value): Redlock
    /// holds are not reentrant.
    fn new_owner(&self) -> String {
        let n = self.inner.next_owner.fetch_add(1, Ordering::Relaxed);
        format!("{}:redlock-{n}", self.inner.id)
    }

    fn random_delay(&self) -> Duration {
        let max = self.inner.settings.retry_delay.as_micros().max(1) as u64;
        let mut x = self.inner.rng.lock();
        // xorshift64: enough to spread retries of competing clients.
        *x ^= *x << 13;
        *x ^= *x >> 7;
        *x ^= *x << 17;
        Duration::from_micros(*x % max)
    }

    /// Holds lost (fewer than a majority of nodes still had them) so far.
    pub fn leases_lost(&self) -> u64 {
        self.inner.leases_lost.load(Ordering::Relaxed)
    }
}

impl fmt::Debug for Redlock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Redlock")
            .field("id", &short_id(&self.inner.id))
            .field("nodes", &self.inner.nodes.len())
            .field("lease", &self.inner.settings.lease)
            .field("node_timeout", &self.inner.settings.node_timeout)
            .finish_non_exhaustive()
    }
}

/// ⌊n/2⌋ + 1.
/// What the counters call a Redlock's holds (`meter::Kind`).
const METER: crate::meter::Kind = "redlock";

fn majority(n: usize) -> usize {
    n / 2 + 1
}

/// Runs `f` on every node at once (a scoped thread per node but the first),
/// answers in node order.
fn on_every_node<N: Sync, T: Send>(nodes: &[N], f: impl Fn(&N) -> T + Sync) -> Vec<T> {
    let Some((first, rest)) = nodes.split_first() else {
        return Vec::new();
    };
    std::thread::scope(|scope| {
        let others: Vec<_> = rest
            .iter()
            .map(|node| {
                let f = &f;
                std::thread::Builder::new()
                    .name("leasehold-redlock".into())
                    .spawn_scoped(scope, move || f(node))
            })
            .collect();
        let mut answers = vec![f(first)];
        for (i, handle) in others.into_iter().enumerate() {
            answers.push(match handle {
                Ok(h) => h.join().unwrap_or_else(|_| f(&nodes[i + 1])),
                Err(_) => f(&nodes[i + 1]), // no thread: ask it here
            });
        }
        answers
    })
}

/// A Redlock hold; dropping it releases the lock on every node.
#[must_use = "if unused the lock is released at once"]
pub struct RedlockGuard {
    redlock: Redlock,
    name: String,
    /// The key on every node: the key prefix followed by the name.
    key: String,
    lease: Duration,
    /// The end of the validity computed at acquire time.
    valid_until: Instant,
    watchdog: bool,
    /// The hold's own state: its lost signal.
    state: Arc<LeaseState>,
    /// That signal, one for the guard (`lost()` hands out clones).
    watch: LeaseWatch,
    /// When it was taken (for the held-time histogram, `meter`).
    since: crate::meter::Since,
    /// The nodes that granted the hold, with the hold each keeps (renewed
    /// there with a watchdog lease); empty once released.
    nodes: Vec<(usize, Hold)>,
}

impl RedlockGuard {
    /// Whether the hold is still valid as far as this client knows: a
    /// majority of nodes still renew it (watchdog), and the validity —
    /// the nodes' leases less the drift allowance — has not run out (see
    /// [`valid_until`](Self::valid_until)). Never touches the network.
    pub fn is_held(&self) -> bool {
        self.held_until().is_some()
    }

    /// The lease-lost signal of this hold (see [`LeaseWatch`]): lost when
    /// fewer than a majority of the nodes still renew it (watchdog leases
    /// only).
    pub fn lost(&self) -> LeaseWatch {
        self.watch.clone()
    }

    /// The lock name as given.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The Redis key of the lock on every node: the key prefix followed by
    /// the name.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The lease this hold was taken with (the watchdog's, renewed while
    /// the guard lives, or the explicit one).
    pub fn lease(&self) -> Duration {
        self.lease
    }

    /// How many nodes granted the hold.
    pub fn nodes_held(&self) -> usize {
        self.nodes.len()
    }

    /// Until when the hold is known to be valid: with an explicit lease,
    /// the validity computed at acquire time (lease − time the attempt took
    /// − drift allowance); with the watchdog, until when a majority of the
    /// nodes' renewed leases last, less the drift. `None` once it is not
    /// held (as [`LockGuard::valid_until`](crate::LockGuard::valid_until)).
    pub fn valid_until(&self) -> Option<Instant> {
        self.held_until()
    }

    /// The validity, while it lasts: `None` once the hold is lost or the
    /// validity ran out.
    fn held_until(&self) -> Option<Instant> {
        if self.state.is_lost() {
            return None;
        }
        let until = if self.watchdog {
            // Renewed: until when a majority of the nodes' leases is known
            // to last (each from its last renewal's send time), less the
            // drift.
            let mut ends: Vec<Instant> = (self.nodes.iter())
                .filter(|(_, hold)| hold.state.is_held())
                .map(|(_, hold)| hold.state.valid_until())
                .collect();
            ends.sort_unstable_by(|a, b| b.cmp(a));
            let until = *ends.get(self.redlock.majority().checked_sub(1)?)?;
            until.checked_sub(drift(self.lease)).unwrap_or(until)
        } else {
            self.valid_until
        };
        (Instant::now() < until).then_some(until)
    }

    /// How long the hold is known to stay valid from now, by
    /// [`valid_until`](Self::valid_until) (zero once it is not held).
    pub fn remaining(&self) -> Duration {
        crate::options::left_until(self.valid_until())
    }

    /// Releases the hold on every node.
    ///
    /// # Errors
    /// [`Error::NotHeld`] when fewer than a majority of nodes still had it
    /// as ours; the first connection error when too many nodes could not be
    /// reached to tell.
    pub fn unlock(mut self) -> Result<()> {
        crate::meter::held(METER, self.since);
        let holds = std::mem::take(&mut self.nodes);
        release(&self.redlock, &self.name, &self.state, &holds)
    }
}

/// Releases `holds` on the nodes of `redlock` that granted them, by the
/// raw layer's one release path (renewal stops, a lost reply is sent
/// again); as [`RedlockGuard::unlock`] answers.
fn release(
    redlock: &Redlock,
    name: &str,
    state: &LeaseState,
    holds: &[(usize, Hold)],
) -> Result<()> {
    let nodes = &redlock.inner.nodes;
    let answers = on_every_node(holds, |(i, hold)| match nodes.get(*i) {
        Some(node) => block_on(node.raw().release(Park::Thread, hold, Bound::default())),
        None => Ok(()),
    });
    // Given back, whatever the nodes answered: the hold's watchers stop.
    state.released();
    let ours = answers.iter().filter(|a| a.is_ok()).count();
    let first_error = answers
        .into_iter()
        .filter_map(Result::err)
        .find(|e| !e.is_not_held());
    let not_held = || Error::NotHeld {
        name: name.to_owned(),
        lost: state.lost_why(),
    };
    if state.is_lost() {
        return Err(not_held());
    }
    if ours >= redlock.majority() {
        return Ok(());
    }
    Err(first_error.unwrap_or_else(not_held))
}

impl Drop for RedlockGuard {
    fn drop(&mut self) {
        if self.nodes.is_empty() {
            return;
        }
        crate::meter::held(METER, self.since);
        let (redlock, state) = (self.redlock.clone(), Arc::clone(&self.state));
        let (name, holds) = (self.name.clone(), std::mem::take(&mut self.nodes));
        let release = move || {
            if let Err(e) = release(&redlock, &name, &state, &holds) {
                tracing::warn!(lock = %name, error = ?e, "leasehold: releasing a Redlock on drop failed");
            }
        };
        // On an async runtime's thread in the background (counted as the
        // first node's client's work), never stalling the thread's tasks
        // for the nodes' round trips.
        match self.redlock.inner.nodes.first() {
            Some(node) if on_executor() => node.raw().detach(Park::Task, release),
            _ => release(),
        }
    }
}

impl fmt::Debug for RedlockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedlockGuard")
            .field("name", &self.name)
            .field("lease", &self.lease)
            .field("nodes_held", &self.nodes.len())
            .finish_non_exhaustive()
    }
}

/// The clock drift allowance of a hold with `lease` (the algorithm's):
/// lease / 100 + 2 ms.
fn drift(lease: Duration) -> Duration {
    lease / 100 + Duration::from_millis(2)
}

#[cfg(test)]
mod tests;
