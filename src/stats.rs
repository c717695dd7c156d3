//! The counters a client keeps for export to metrics: the public snapshot
//! [`Stats`] and the atomics behind it, shared by the renewal thread, the
//! wait loop and the in-process queue. Atomics only; nothing here blocks.

use std::sync::atomic::{AtomicU64, Ordering};

/// A snapshot of a client's counters, from
/// [`LockClient::stats`](crate::LockClient::stats), for export to metrics.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
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
    /// The pub/sub subscriber is connected now (it connects when a waiter
    /// first needs it, so `false` before any wait). While it is not, waiters
    /// retry at least every second instead of being woken.
    pub subscriber_connected: bool,
    /// Times the subscriber connected since the client was built (more than
    /// one: it reconnected).
    pub subscriber_connects: u64,
    /// Why the subscriber last failed — to connect (until it connects), or to
    /// subscribe (e.g. a `NOPERM` for the channels, until it reconnects). One
    /// WARN is logged per outage, not per retry.
    pub subscriber_error: Option<String>,
}

/// The live atomics behind [`Stats`] (the in-process queue keeps its own).
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
            // Filled in by the client from its in-process queues and its
            // subscriber.
            waiters_queued: 0,
            handoffs: 0,
            subscriber_connected: false,
            subscriber_connects: 0,
            subscriber_error: None,
        }
    }
}
