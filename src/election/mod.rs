//! Leader election with a fenced term: [`Election`] (candidates campaign on
//! a name; one leads at a time), [`Leadership`] (the leader's hold: its term
//! — a fencing token that only grows — its role, its lease-lost signal,
//! `resign`), [`Leader`] (who leads, for anyone), and the async face
//! ([`AsyncElection`], in `tasks`). Thin: a leadership is a fenced plain
//! lock (its line hands the lock to one waiting candidate at a resignation;
//! its renewal keeps the leader's lease), plus a record of when the term
//! began.

mod tasks;

use std::fmt;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

pub use tasks::{AsyncElection, AsyncLeadership};

use crate::client::LockClient;
use crate::error::Result;
use crate::guard::OwnedLockGuard;
use crate::inspect::ClientInfo;
use crate::options::{check_name, deadline_after, LockOptions};
use crate::renewal::{LeaseLost, LeaseWatch};

/// Leader election on a name: candidates — threads, tasks, processes —
/// [`campaign`](Self::campaign); one at a time leads, holding a
/// [`Leadership`] whose [`term`](Leadership::term) is a fencing token that
/// only grows (give it to what the leader writes, and let that refuse a
/// smaller term: a deposed leader paused past its lease cannot write).
///
/// The leader's lease is the client's watchdog lease, renewed while it
/// leads: when the leader dies or pauses, a follower takes over within
/// about one lease; when it [`resign`](Leadership::resign)s, the first
/// follower in line is handed the leadership at once (woken, not polled;
/// the others stay parked). A leader knows its lease by its own clock and
/// stops believing it leads when the lease it could confirm runs out
/// ([`Leadership::is_held`]) — before a follower can be elected — and is
/// told by [`Leadership::lost`].
///
/// ```no_run
/// # fn run_scheduler_until(_stop: leasehold::LeaseWatch, _term: u64) {}
/// # fn main() -> Result<(), leasehold::Error> {
/// let client = leasehold::LockClient::builder("redis://127.0.0.1/")
///     .watchdog_lease(std::time::Duration::from_secs(10)) // a dead leader is replaced within ~10 s
///     .connect()?;
/// let election = client.election("scheduler");
/// loop {
///     let leadership = election.campaign()?; // a follower until this returns
///     run_scheduler_until(leadership.lost(), leadership.term());
///     // Lost (or the work ended): campaign again.
/// }
/// # }
/// ```
///
/// The lock is `leasehold_election:<name>` (under the client's key
/// prefix); [`Election::leader`] reads who holds it.
#[derive(Clone)]
pub struct Election {
    client: LockClient,
    name: String,
}

impl LockClient {
    /// The election `name` (see [`Election`]); nothing is sent until a
    /// candidate campaigns or someone asks who leads.
    pub fn election(&self, name: &str) -> Election {
        Election {
            client: self.clone(),
            name: name.to_owned(),
        }
    }
}

/// The lock name of election `name`.
fn lock_name(name: &str) -> String {
    format!("leasehold_election:{name}")
}

/// The options of every campaign: a fenced plain lock (the term is its
/// token).
fn fenced() -> LockOptions {
    LockOptions::new().fenced()
}

impl Election {
    /// The election's name, as given.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Campaigns until this candidate leads, waiting as long as it takes
    /// (a follower meanwhile).
    ///
    /// # Errors
    /// As [`LockClient::lock`].
    pub fn campaign(&self) -> Result<Leadership> {
        check_name(&self.name)?;
        let guard = self
            .client
            .lock_owned_with(&lock_name(&self.name), fenced())?;
        self.lead(guard, None)
    }

    /// One attempt: the leadership, or `None` when another leads.
    ///
    /// # Errors
    /// As [`LockClient::try_lock`].
    pub fn try_campaign(&self) -> Result<Option<Leadership>> {
        self.try_with(Duration::ZERO)
    }

    /// Campaigns for up to `wait`: the leadership, or `None`.
    ///
    /// # Errors
    /// As [`LockClient::try_lock_for`].
    pub fn try_campaign_for(&self, wait: Duration) -> Result<Option<Leadership>> {
        self.try_with(wait)
    }

    /// Campaigns until `deadline`: the leadership, or `None`.
    ///
    /// # Errors
    /// As [`LockClient::try_lock_until`].
    pub fn try_campaign_until(&self, deadline: Instant) -> Result<Option<Leadership>> {
        self.try_with(deadline.saturating_duration_since(Instant::now()))
    }

    /// A campaign of up to `wait`, its term recorded within it.
    fn try_with(&self, wait: Duration) -> Result<Option<Leadership>> {
        check_name(&self.name)?;
        let name = lock_name(&self.name);
        // A single attempt (no wait) is bounded as `try_lock`'s: its
        // record too.
        let deadline = (!wait.is_zero()).then(|| deadline_after(wait));
        match self
            .client
            .try_lock_owned_with(&name, fenced().wait(wait))?
        {
            Some(guard) => self.lead(guard, deadline).map(Some),
            None => Ok(None),
        }
    }

    /// A new term: its record (when it began, written by `deadline` when
    /// the campaign has one), then the leadership.
    fn lead(&self, guard: OwnedLockGuard, deadline: Option<Instant>) -> Result<Leadership> {
        let term = guard.fence().unwrap_or(0);
        let since = now_ms();
        record(&self.client, guard.key(), term, since, deadline);
        Ok(Leadership {
            name: self.name.clone(),
            since,
            guard,
        })
    }

    /// Who leads now, for anyone (candidates or not): `None` when nobody
    /// does (between terms, or before the first).
    ///
    /// # Errors
    /// Redis errors.
    pub fn leader(&self) -> Result<Option<Leader>> {
        check_name(&self.name)?;
        leader_of(&self.client, &self.name)
    }
}

impl fmt::Debug for Election {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Election")
            .field("name", &self.name)
            .finish()
    }
}

/// Now, to the millisecond the record keeps.
fn now_ms() -> SystemTime {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    UNIX_EPOCH + Duration::from_millis(since.as_millis() as u64)
}

/// Records when term `term` of the election whose lock is `key` began —
/// best effort: a leader that could not write it still leads (observers
/// then see no `since`), so a failure is logged, not returned.
fn record(client: &LockClient, key: &str, term: u64, since: SystemTime, deadline: Option<Instant>) {
    let since_ms = since
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis() as u64;
    if let Err(e) = client.raw().record_term(key, term, since_ms, deadline) {
        tracing::warn!(election = %key, error = %e, "leasehold: could not record when a term began");
    }
}

/// Who leads election `name`, through `client`.
fn leader_of(client: &LockClient, name: &str) -> Result<Option<Leader>> {
    let info = client.inspect(&lock_name(name))?;
    let Some(holder) = info.holders.into_iter().next() else {
        return Ok(None);
    };
    let term = info.fence.unwrap_or(0);
    let (recorded, since_ms) = client.raw().recorded_term(&info.key)?;
    let since = (recorded == Some(term))
        .then_some(since_ms)
        .flatten()
        .map(|ms| UNIX_EPOCH + Duration::from_millis(ms));
    Ok(Some(Leader {
        term,
        since,
        owner: holder.owner,
        client: holder.client,
    }))
}

/// Who leads an election ([`Election::leader`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Leader {
    /// The leader's term (its fencing token).
    pub term: u64,
    /// When its term began, by its own clock (`None` when it left no
    /// record: an older or foreign holder).
    pub since: Option<SystemTime>,
    /// Its owner as Redis stores it (`<client-uuid>:<n>`).
    pub owner: String,
    /// Its client — host, pid, `client_name` — when it registered (leasehold
    /// clients do while active).
    pub client: Option<ClientInfo>,
}

/// Where a leadership stands ([`Leadership::role`]). A candidate without a
/// `Leadership` (its campaign waiting) is a follower.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Role {
    /// Leading in `term`: the lease is known to be ours.
    Leader {
        /// The term.
        term: u64,
    },
    /// Led in `term`, no longer: the lease was lost (`why`, when the
    /// renewal found out) or ran out unconfirmed.
    Lost {
        /// The term that ended.
        term: u64,
        /// Why, when the renewal found out.
        why: Option<LeaseLost>,
    },
}

impl Role {
    /// The role of term `term`'s leadership, held or not, lost for the
    /// reason `lost` gives.
    fn of(term: u64, held: bool, lost: &LeaseWatch) -> Role {
        match held {
            true => Role::Leader { term },
            false => Role::Lost {
                term,
                why: lost.check(),
            },
        }
    }
}

/// The leader's hold of an election: while it lives and
/// [`is_held`](Self::is_held), this candidate leads in [`term`](Self::term).
/// Dropping it resigns.
#[must_use = "if unused the leadership is resigned at once"]
pub struct Leadership {
    name: String,
    since: SystemTime,
    guard: OwnedLockGuard,
}

impl Leadership {
    /// The election's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The Redis key of the election's lock.
    pub fn key(&self) -> &str {
        self.guard.key()
    }

    /// The term: a fencing token greater than every earlier term's.
    pub fn term(&self) -> u64 {
        self.guard.fence().unwrap_or(0)
    }

    /// When this term began (this client's clock).
    pub fn since(&self) -> SystemTime {
        self.since
    }

    /// Whether this candidate still leads as far as it knows: the lease it
    /// last confirmed has not run out and was not lost. Never touches the
    /// network; act as leader only while it is true.
    pub fn is_held(&self) -> bool {
        self.guard.is_held()
    }

    /// Until when the lease is known to be ours; `None` once it is not.
    pub fn valid_until(&self) -> Option<Instant> {
        self.guard.valid_until()
    }

    /// How long the lease is known to last from now (zero once lost).
    pub fn remaining(&self) -> Duration {
        self.guard.remaining()
    }

    /// The leader's lease (the client's watchdog lease, renewed).
    pub fn lease(&self) -> Duration {
        self.guard.lease()
    }

    /// The lease-lost signal (see [`LeaseWatch`]): the leadership is gone —
    /// wait for it beside the leader's work and stop.
    pub fn lost(&self) -> LeaseWatch {
        self.guard.lost()
    }

    /// Leader or lost, and why.
    pub fn role(&self) -> Role {
        Role::of(self.term(), self.is_held(), &self.lost())
    }

    /// Steps down now: the first follower in line is handed the leadership
    /// at once.
    ///
    /// # Errors
    /// [`Error::NotHeld`](crate::Error::NotHeld) when the leadership was
    /// lost already; Redis errors (it then ends at its lease).
    pub fn resign(self) -> Result<()> {
        self.guard.unlock()
    }
}

impl fmt::Debug for Leadership {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Leadership")
            .field("name", &self.name)
            .field("term", &self.term())
            .field("held", &self.is_held())
            .finish_non_exhaustive()
    }
}
