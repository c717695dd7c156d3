//! What an operator sees of a semaphore ([`SemaphoreInfo`]): the permits
//! available, each permit out, the line of waiting acquisitions.

use std::time::Duration;

use crate::names::hex;
use crate::protocol::semaphore::{State, NO_LEASE_SCORE};
use crate::raw::permit_client;

/// A semaphore as [`Semaphore::inspect`](crate::Semaphore::inspect) found
/// it (the first 1,000 permits out and places in line).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SemaphoreInfo {
    /// The semaphore's name, as given.
    pub name: String,
    /// Permits available (`None`: no permits were ever set).
    pub available: Option<i64>,
    /// Each permit out, soonest lease end first.
    pub holders: Vec<PermitInfo>,
    /// Waiting acquisitions, first in line first.
    pub waiters: Vec<SemaphoreWaiter>,
}

/// One permit out.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PermitInfo {
    /// Its id (32 hex digits, as Redisson shows it).
    pub id: String,
    /// How long its lease lasts from the server's now (`None`: no lease, a
    /// Redisson permit taken without one). Zero: expired, given back by the
    /// next script that runs on the semaphore.
    pub expires_in: Option<Duration>,
    /// The leasehold client that took it: the start of its id
    /// (`xxxxxxxx-xxxx-8xxx`, what [`LockClient::inspect`](crate::LockClient::inspect)
    /// shows of owners in full); `None` for another library's permit
    /// (Redisson's ids are random).
    pub client: Option<String>,
    /// Taken by this very client.
    pub ours: bool,
}

/// One waiting acquisition in line.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SemaphoreWaiter {
    /// Its owner, `<client id>:<n>` (a leasehold client's id: see
    /// [`LockClient::inspect`](crate::LockClient::inspect) for who it is).
    pub owner: String,
    /// Permits it asks for.
    pub permits: u32,
    /// How long its place lives unless its waiter confirms it.
    pub place_expires_in: Duration,
}

impl SemaphoreInfo {
    pub(crate) fn of(name: &str, client: &uuid::Uuid, state: State) -> Self {
        let mine = &client.as_bytes()[..8];
        let holders = state
            .held
            .iter()
            .map(|p| {
                let by = permit_client(&p.id);
                PermitInfo {
                    id: hex(&p.id),
                    expires_in: (p.expiry_ms < NO_LEASE_SCORE)
                        .then(|| Duration::from_millis(p.expiry_ms.saturating_sub(state.now_ms))),
                    client: by.map(|c| {
                        let h = hex(c);
                        format!("{}-{}-{}", &h[..8], &h[8..12], &h[12..])
                    }),
                    ours: by == Some(mine),
                }
            })
            .collect();
        let waiters = state
            .line
            .into_iter()
            .map(|w| SemaphoreWaiter {
                owner: w.place.split('#').next().unwrap_or_default().to_owned(),
                permits: w.permits,
                place_expires_in: w.ttl,
            })
            .collect();
        SemaphoreInfo {
            name: name.to_owned(),
            available: state.available,
            holders,
            waiters,
        }
    }
}
