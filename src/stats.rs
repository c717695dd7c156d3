//! The counters a client keeps for export to metrics: the public snapshot
//! [`Stats`] and the atomics behind it, shared by the renewal thread, the
//! wait loop and the in-process queue. Atomics only; nothing here blocks.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

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
    /// Locks taken since the client was built (every kind; a reentrant hold
    /// counts too).
    pub acquisitions: u64,
    /// Of those, locks taken by a waiter (an attempt had found the lock
    /// held) that a message woke: a release's unlock message, or a grant of
    /// the lock to its place.
    pub woken_acquisitions: u64,
    /// Of those, locks taken by a waiter at a retry of its own: its timer
    /// (the holder's lease ran out, its place's confirmation fell due, it
    /// could not hear messages), the retry after it subscribed, or one
    /// after an outage. While the subscriber is connected, most waits
    /// should end woken instead: many of these say releases do not reach
    /// the waiters (a lost message, another library that publishes
    /// nothing).
    pub retried_acquisitions: u64,
    /// Bounded waits (`try_lock_for`, `lock_with` with a wait, …) that ran
    /// out without the lock, single tries that found it held included.
    pub wait_timeouts: u64,
    /// Waits cancelled through a [`Cancel`](crate::Cancel) handle.
    pub waits_cancelled: u64,
    /// How long the acquisitions took (call to guard), counted in buckets:
    /// `wait_time[i]` counts those up to [`WAIT_BUCKETS_MS`]`[i]` ms (and
    /// above the bucket before), the last one those above 60 s. Cumulative
    /// sums give a histogram's `le` buckets; p50/p99 can be read off them.
    pub wait_time: [u64; WAIT_BUCKETS_MS.len() + 1],
}

/// The upper bounds (ms) of the [`Stats::wait_time`] buckets; the last bucket
/// holds everything above the last bound.
pub const WAIT_BUCKETS_MS: [u64; 6] = [1, 10, 100, 1_000, 10_000, 60_000];

/// The live atomics behind [`Stats`] (the in-process queue keeps its own).
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) live_leases: AtomicU64,
    pub(crate) renewals_sent: AtomicU64,
    pub(crate) renewal_round_trips: AtomicU64,
    pub(crate) leases_lost: AtomicU64,
    pub(crate) waiters_parked: AtomicU64,
    pub(crate) acquisitions: AtomicU64,
    pub(crate) woken_acquisitions: AtomicU64,
    pub(crate) retried_acquisitions: AtomicU64,
    pub(crate) wait_timeouts: AtomicU64,
    pub(crate) waits_cancelled: AtomicU64,
    pub(crate) wait_time: [AtomicU64; WAIT_BUCKETS_MS.len() + 1],
}

impl Counters {
    pub(crate) fn snapshot(&self) -> Stats {
        Stats {
            live_leases: self.live_leases.load(Ordering::Relaxed),
            renewals_sent: self.renewals_sent.load(Ordering::Relaxed),
            renewal_round_trips: self.renewal_round_trips.load(Ordering::Relaxed),
            leases_lost: self.leases_lost.load(Ordering::Relaxed),
            waiters_parked: self.waiters_parked.load(Ordering::Relaxed),
            acquisitions: self.acquisitions.load(Ordering::Relaxed),
            woken_acquisitions: self.woken_acquisitions.load(Ordering::Relaxed),
            retried_acquisitions: self.retried_acquisitions.load(Ordering::Relaxed),
            wait_timeouts: self.wait_timeouts.load(Ordering::Relaxed),
            waits_cancelled: self.waits_cancelled.load(Ordering::Relaxed),
            wait_time: std::array::from_fn(|i| self.wait_time[i].load(Ordering::Relaxed)),
            // The in-process queues' and the subscriber's: the client's.
            ..Stats::default()
        }
    }

    /// One acquisition that took `waited`.
    pub(crate) fn acquired(&self, waited: Duration) {
        self.acquisitions.fetch_add(1, Ordering::Relaxed);
        let bucket = WAIT_BUCKETS_MS
            .iter()
            .position(|&bound| waited <= Duration::from_millis(bound))
            .unwrap_or(WAIT_BUCKETS_MS.len());
        self.wait_time[bucket].fetch_add(1, Ordering::Relaxed);
    }

    /// One acquire (of a lock or of permits) ended after `waited`: held,
    /// else cancelled or timed out — counted; what to call it in a trace.
    pub(crate) fn ended(&self, waited: Duration, held: bool, cancelled: bool) -> &'static str {
        if held {
            self.acquired(waited);
            "acquired"
        } else if cancelled {
            self.waits_cancelled.fetch_add(1, Ordering::Relaxed);
            "cancelled"
        } else {
            self.wait_timeouts.fetch_add(1, Ordering::Relaxed);
            "timed out"
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_land_in_their_bucket() {
        let c = Counters::default();
        for ms in [0, 1, 5, 10, 99, 100, 250, 999, 5_000, 60_000, 61_000] {
            c.acquired(Duration::from_millis(ms));
        }
        c.acquired(Duration::from_micros(1_500));
        let s = c.snapshot();
        assert_eq!(s.acquisitions, 12);
        assert_eq!(s.wait_time, [2, 3, 2, 2, 1, 1, 1]);
    }
}
