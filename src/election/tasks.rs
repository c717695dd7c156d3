//! The async face of leader election: [`AsyncElection`] (a campaign parks
//! the task: a thousand followers cost no thread each) and
//! [`AsyncLeadership`] (dropped, it resigns in the background).

use std::fmt;
use std::time::{Duration, Instant, SystemTime};

use super::{fenced, leader_of, lock_name, now_ms, record, Leader, Role};
use crate::error::Result;
use crate::options::{check_name, deadline_after};
use crate::park::Park;
use crate::renewal::LeaseWatch;
use crate::task::{AsyncLockClient, AsyncLockGuard};

/// An [`Election`](super::Election) for async code.
///
/// ```no_run
/// # async fn schedule(_term: u64) {}
/// # async fn run(client: leasehold::AsyncLockClient) -> Result<(), leasehold::Error> {
/// let election = client.election("scheduler");
/// let leadership = election.campaign().await?; // the task waits; no thread does
/// tokio::select! {
///     _ = leadership.lost() => {}               // deposed: stop at once
///     () = schedule(leadership.term()) => {}
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct AsyncElection {
    client: AsyncLockClient,
    name: String,
}

impl AsyncLockClient {
    /// The election `name` (see [`LockClient::election`](crate::LockClient::election)).
    pub fn election(&self, name: &str) -> AsyncElection {
        AsyncElection {
            client: self.clone(),
            name: name.to_owned(),
        }
    }
}

impl AsyncElection {
    /// The election's name, as given.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// [`Election::campaign`](super::Election::campaign) for a task.
    ///
    /// # Errors
    /// As [`AsyncLockClient::lock`].
    pub async fn campaign(&self) -> Result<AsyncLeadership> {
        check_name(&self.name)?;
        let guard = self
            .client
            .lock_with(&lock_name(&self.name), fenced())
            .await?;
        self.lead(guard, None).await
    }

    /// [`Election::try_campaign`](super::Election::try_campaign) for a task.
    ///
    /// # Errors
    /// As [`AsyncLockClient::try_lock`].
    pub async fn try_campaign(&self) -> Result<Option<AsyncLeadership>> {
        self.try_with(Duration::ZERO).await
    }

    /// [`Election::try_campaign_for`](super::Election::try_campaign_for) for a task.
    ///
    /// # Errors
    /// As [`AsyncLockClient::try_lock_for`].
    pub async fn try_campaign_for(&self, wait: Duration) -> Result<Option<AsyncLeadership>> {
        self.try_with(wait).await
    }

    /// [`Election::try_campaign_until`](super::Election::try_campaign_until) for a task.
    ///
    /// # Errors
    /// As [`AsyncLockClient::try_lock_until`].
    pub async fn try_campaign_until(&self, deadline: Instant) -> Result<Option<AsyncLeadership>> {
        self.try_with(deadline.saturating_duration_since(Instant::now()))
            .await
    }

    /// A campaign of up to `wait`, its term recorded within it.
    async fn try_with(&self, wait: Duration) -> Result<Option<AsyncLeadership>> {
        check_name(&self.name)?;
        let name = lock_name(&self.name);
        // A single attempt (no wait) is bounded as `try_lock`'s: its
        // record too.
        let deadline = (!wait.is_zero()).then(|| deadline_after(wait));
        match self
            .client
            .try_lock_with(&name, fenced().wait(wait))
            .await?
        {
            Some(guard) => self.lead(guard, deadline).await.map(Some),
            None => Ok(None),
        }
    }

    /// A new term: its record (written by `deadline` when the campaign
    /// has one), then the leadership.
    async fn lead(
        &self,
        guard: AsyncLockGuard,
        deadline: Option<Instant>,
    ) -> Result<AsyncLeadership> {
        let term = guard.fence().unwrap_or(0);
        let since = now_ms();
        let (client, key) = (self.client.blocking(), guard.key().to_owned());
        let raw = std::sync::Arc::clone(client.raw());
        raw.io(Park::Task, move || {
            record(&client, &key, term, since, deadline)
        })
        .await?;
        Ok(AsyncLeadership {
            name: self.name.clone(),
            since,
            guard,
        })
    }

    /// [`Election::leader`](super::Election::leader) for a task.
    ///
    /// # Errors
    /// Redis errors.
    pub async fn leader(&self) -> Result<Option<Leader>> {
        check_name(&self.name)?;
        let (client, name) = (self.client.blocking(), self.name.clone());
        let raw = std::sync::Arc::clone(client.raw());
        raw.io(Park::Task, move || leader_of(&client, &name))
            .await?
    }
}

impl fmt::Debug for AsyncElection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AsyncElection")
            .field("name", &self.name)
            .finish()
    }
}

/// A task's [`Leadership`](super::Leadership); dropped, it resigns in the
/// background.
#[must_use = "if unused the leadership is resigned at once"]
pub struct AsyncLeadership {
    name: String,
    since: SystemTime,
    guard: AsyncLockGuard,
}

impl AsyncLeadership {
    /// As [`Leadership::name`](super::Leadership::name).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// As [`Leadership::key`](super::Leadership::key).
    pub fn key(&self) -> &str {
        self.guard.key()
    }

    /// As [`Leadership::term`](super::Leadership::term).
    pub fn term(&self) -> u64 {
        self.guard.fence().unwrap_or(0)
    }

    /// As [`Leadership::since`](super::Leadership::since).
    pub fn since(&self) -> SystemTime {
        self.since
    }

    /// As [`Leadership::is_held`](super::Leadership::is_held).
    pub fn is_held(&self) -> bool {
        self.guard.is_held()
    }

    /// As [`Leadership::valid_until`](super::Leadership::valid_until).
    pub fn valid_until(&self) -> Option<Instant> {
        self.guard.valid_until()
    }

    /// As [`Leadership::remaining`](super::Leadership::remaining).
    pub fn remaining(&self) -> Duration {
        self.guard.remaining()
    }

    /// As [`Leadership::lease`](super::Leadership::lease).
    pub fn lease(&self) -> Duration {
        self.guard.lease()
    }

    /// As [`Leadership::lost`](super::Leadership::lost) (a task awaits it).
    pub fn lost(&self) -> LeaseWatch {
        self.guard.lost()
    }

    /// As [`Leadership::role`](super::Leadership::role).
    pub fn role(&self) -> Role {
        Role::of(self.term(), self.is_held(), &self.lost())
    }

    /// [`Leadership::resign`](super::Leadership::resign) for a task.
    ///
    /// # Errors
    /// As [`Leadership::resign`](super::Leadership::resign).
    pub async fn resign(self) -> Result<()> {
        self.guard.unlock().await
    }
}

impl fmt::Debug for AsyncLeadership {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AsyncLeadership")
            .field("name", &self.name)
            .field("term", &self.term())
            .field("held", &self.is_held())
            .finish_non_exhaustive()
    }
}
