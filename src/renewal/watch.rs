//! [`LeaseWatch`], the one lease-lost signal every guard hands out
//! (`lost()`), blocking and async alike, over the leases' states.

use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;

use super::lease::{LeaseLost, LeaseState};
use crate::park::{block_on, Park};

/// Whether a guard's lease is gone, and why: the lease-lost signal of every
/// guard (`lost()` on each, blocking and async alike). The watchdog's
/// verdict — renewal found the lease no longer ours, or could not confirm
/// it before it ran out — given before Redis expires the key, so work under
/// the lock can stop.
///
/// - **checked** without blocking: [`check`](Self::check);
/// - **waited for** by a thread: [`wait`](Self::wait),
///   [`wait_timeout`](Self::wait_timeout); by a task: `.await` it, or
///   [`until_lost`](Self::until_lost) (a `'static`, `Send` future that may
///   be spawned);
/// - **selected** beside other events: `tokio::select!` (or any
///   executor's) on [`until_lost`](Self::until_lost); crossbeam's `select!` on
///   [`receiver`](Self::receiver) — the one third-party type here, as
///   crossbeam's macro selects over its own channels only (re-exported as
///   `leasehold::crossbeam_channel`).
///
/// Each answers `None` once the hold was released (by its guard's unlock or
/// drop) without being lost; a wait in progress then returns. A hold with
/// an explicit lease (`LockOptions::lease`) is not renewed and so never
/// reported lost: it runs out (`is_held()` turns false). A guard of several
/// holds (`lock_all`) is lost when any of them is. Clones watch the same
/// holds.
///
/// ```no_run
/// # fn main() -> leasehold::Result<()> {
/// # let client = leasehold::LockClient::new("redis://127.0.0.1/")?;
/// use std::time::Duration;
/// use leasehold::crossbeam_channel::{select, tick};
///
/// let guard = client.lock("keys:rotate")?;
/// let lost = guard.lost();
/// let (step, until_lost) = (tick(Duration::from_millis(100)), lost.receiver());
/// for n in 0..50 {
///     select! {
///         recv(until_lost) -> why => {
///             eprintln!("stopping at step {n}: {why:?}"); // another may hold it now
///             return Ok(());
///         }
///         recv(step) -> _ => { /* … step n … */ }
///     }
/// }
/// assert_eq!(lost.check(), None);
/// guard.unlock()
/// # }
/// ```
#[derive(Clone)]
pub struct LeaseWatch {
    leases: Arc<[Arc<LeaseState>]>,
    /// The channel of [`receiver`](Self::receiver), made at its first call
    /// and shared by the watch's clones (a loop asking for it again and
    /// again does not make one each time).
    channel: Arc<OnceLock<Receiver<LeaseLost>>>,
}

impl LeaseWatch {
    /// The watch of `leases` (lost when any is).
    pub(crate) fn of(leases: impl IntoIterator<Item = Arc<LeaseState>>) -> Self {
        LeaseWatch {
            leases: leases.into_iter().collect(),
            channel: Arc::default(),
        }
    }

    /// The watch of every hold of `watches` (lost when any is): a guard of
    /// several holds.
    pub(crate) fn all(watches: impl IntoIterator<Item = LeaseWatch>) -> Self {
        Self::of(watches.into_iter().flat_map(|w| w.leases.to_vec()))
    }

    /// Why the lease was lost, if it was; never blocks, never touches the
    /// network.
    pub fn check(&self) -> Option<LeaseLost> {
        self.leases.iter().find_map(|lease| lease.lost_why())
    }

    /// Blocks the thread until the lease is lost (why), or its hold is
    /// released (`None`).
    pub fn wait(&self) -> Option<LeaseLost> {
        self.wait_until(None)
    }

    /// As [`wait`](Self::wait), for at most `timeout` (`None` also when it
    /// ran out).
    pub fn wait_timeout(&self, timeout: Duration) -> Option<LeaseLost> {
        self.wait_until(Instant::now().checked_add(timeout))
    }

    fn wait_until(&self, until: Option<Instant>) -> Option<LeaseLost> {
        match &*self.leases {
            [lease] => block_on(lease.lost_until(Park::Thread, until)).flatten(),
            // Several holds: the thread blocks on the watch's channel (told
            // by any hold's loss, closed once every hold went); what it
            // says, or what another receiver took first, `check` reads.
            _ => {
                let rx = self.receiver();
                let got = match until {
                    Some(until) => rx.recv_deadline(until).ok(),
                    None => rx.recv().ok(),
                };
                got.or_else(|| self.check())
            }
        }
    }

    /// The loss as a future for a task (`'static`, `Send`: it may be
    /// spawned): why, or `None` once the hold was released first. Dropping
    /// it stops the wait. (`.await` on the watch itself does the same.)
    pub fn until_lost(&self) -> UntilLost {
        UntilLost::of(&self.leases, None)
    }

    /// A channel for crossbeam's `select!`: when the lease is lost (also
    /// before this call) it receives the reason and is then closed, so
    /// every clone of the receiver wakes — one of them with the reason, the
    /// others with the channel closed ([`check`](Self::check) says why);
    /// once the hold is released without being lost it is closed with
    /// nothing in it. One channel per watch and its clones (a guard's
    /// `lost()` is one watch): asking again gives the same.
    pub fn receiver(&self) -> Receiver<LeaseLost> {
        self.channel
            .get_or_init(|| {
                let (tx, rx) = crossbeam_channel::bounded(1);
                for lease in self.leases.iter() {
                    lease.tell(&tx);
                }
                rx
            })
            .clone()
    }
}

impl std::fmt::Debug for UntilLost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UntilLost").finish_non_exhaustive()
    }
}

impl std::fmt::Debug for LeaseWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaseWatch")
            .field("lost", &self.check())
            .finish()
    }
}

impl IntoFuture for LeaseWatch {
    type Output = Option<LeaseLost>;
    type IntoFuture = UntilLost;

    fn into_future(self) -> UntilLost {
        self.until_lost()
    }
}

/// The future of [`LeaseWatch::until_lost`]: why the lease was lost, or
/// `None` once its hold was released first.
#[must_use = "a future does nothing unless awaited"]
pub struct UntilLost {
    /// Each lease's wait (see `LeaseState::lost_until`); `None` once its
    /// hold was released.
    waits: Vec<Option<LeaseWait>>,
}

/// One lease's wait for its loss, as `LeaseState::lost_until` answers.
type LeaseWait = Pin<Box<dyn Future<Output = Option<Option<LeaseLost>>> + Send>>;

impl UntilLost {
    /// The first loss among the leases' waits (a task's: each parks it),
    /// `None` once every hold was released, or `until` passed.
    fn of(leases: &Arc<[Arc<LeaseState>]>, until: Option<Instant>) -> UntilLost {
        let waits = leases
            .iter()
            .map(|lease| {
                let lease = Arc::clone(lease);
                let wait: LeaseWait =
                    Box::pin(async move { lease.lost_until(Park::Task, until).await });
                Some(wait)
            })
            .collect();
        UntilLost { waits }
    }
}

impl Future for UntilLost {
    type Output = Option<LeaseLost>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let (mut open, mut timed_out) = (false, false);
        for slot in self.waits.iter_mut() {
            let Some(wait) = slot else { continue };
            match wait.as_mut().poll(cx) {
                Poll::Ready(Some(Some(why))) => return Poll::Ready(Some(why)),
                // Timed out — so are the others (one deadline), but each is
                // asked still: one may have been lost by then.
                Poll::Ready(None) => (*slot, timed_out) = (None, true),
                Poll::Ready(Some(None)) => *slot = None, // released
                Poll::Pending => open = true,
            }
        }
        match open && !timed_out {
            true => Poll::Pending,
            false => Poll::Ready(None),
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use std::sync::atomic::AtomicU64;

    use super::*;

    fn lease() -> Arc<LeaseState> {
        LeaseState::new(Instant::now() + Duration::from_secs(60))
    }

    #[test]
    fn every_form_gets_the_reason_once_the_lease_is_lost_also_when_asked_late() {
        let count = AtomicU64::new(0);
        let held = lease();
        let watch = LeaseWatch::of([Arc::clone(&held)]);
        let early = watch.receiver();
        assert!(early.try_recv().is_err());
        assert_eq!(watch.check(), None);
        assert_eq!(
            watch.wait_timeout(Duration::from_millis(1)),
            None,
            "not lost"
        );
        let waiter = std::thread::spawn({
            let watch = watch.clone();
            move || watch.wait()
        });
        assert!(held.mark_lost(LeaseLost::NotOurs, &count));
        assert!(
            !held.mark_lost(LeaseLost::Unreachable, &count),
            "marked once"
        );
        assert_eq!(count.load(std::sync::atomic::Ordering::Relaxed), 1);
        assert_eq!(waiter.join().unwrap(), Some(LeaseLost::NotOurs));
        assert_eq!(early.try_recv(), Ok(LeaseLost::NotOurs));
        assert!(early.try_recv().is_err(), "once");
        assert!(
            watch.receiver().try_recv().is_err(),
            "one channel: told, then closed"
        );
        let late = LeaseWatch::of([Arc::clone(&held)]).receiver();
        assert_eq!(late.try_recv(), Ok(LeaseLost::NotOurs), "a watch made late");
        assert_eq!(watch.check(), Some(LeaseLost::NotOurs));
        assert_eq!(block_on(watch.until_lost()), Some(LeaseLost::NotOurs));
        assert!(!held.is_held());
    }

    #[test]
    fn receivers_asked_for_again_and_again_share_one_channel() {
        let held = lease();
        let watch = LeaseWatch::of([Arc::clone(&held)]);
        for _ in 0..1_000 {
            drop(watch.clone().receiver());
        }
        assert_eq!(
            held.senders(),
            1,
            "a loop asking for the receiver piles up senders"
        );
        let (a, b) = (watch.receiver(), watch.receiver());
        assert!(held.mark_lost(LeaseLost::NotOurs, &AtomicU64::new(0)));
        // One of them gets the reason, and the channel closes: both wake.
        let got = [a.recv(), b.recv()];
        assert_eq!(got.iter().filter(|r| r.is_ok()).count(), 1, "{got:?}");
        assert!(got.contains(&Ok(LeaseLost::NotOurs)), "{got:?}");
        assert_eq!(watch.check(), Some(LeaseLost::NotOurs));
    }

    #[test]
    fn a_release_ends_every_wait_and_disconnects_the_receiver() {
        let held = lease();
        let watch = LeaseWatch::of([Arc::clone(&held)]);
        let rx = watch.receiver();
        let waiter = std::thread::spawn({
            let watch = watch.clone();
            move || watch.wait()
        });
        held.released();
        assert_eq!(waiter.join().unwrap(), None);
        assert!(rx.recv().is_err(), "disconnected at the release");
        assert!(watch.receiver().recv().is_err(), "and made after it");
        assert_eq!(block_on(watch.until_lost()), None);
        assert_eq!(watch.check(), None);
    }

    #[test]
    fn a_watch_of_several_holds_is_lost_when_any_is_and_ends_when_all_went() {
        let count = AtomicU64::new(0);
        let (a, b) = (lease(), lease());
        let both = LeaseWatch::of([Arc::clone(&a), Arc::clone(&b)]);
        let rx = both.receiver();
        a.released();
        assert!(rx.try_recv().is_err(), "b still holds: not disconnected");
        assert_eq!(both.wait_timeout(Duration::from_millis(1)), None);
        let waiter = std::thread::spawn({
            let both = both.clone();
            move || both.wait()
        });
        assert!(b.mark_lost(LeaseLost::Unreachable, &count));
        assert_eq!(waiter.join().unwrap(), Some(LeaseLost::Unreachable));
        // The waiter blocked on the watch's one channel and took the reason:
        // the channel is closed now (every receiver woke), `check` says why.
        assert!(rx.try_recv().is_err_and(|e| e.is_disconnected()));
        assert_eq!(both.check(), Some(LeaseLost::Unreachable));
        assert_eq!(block_on(both.until_lost()), Some(LeaseLost::Unreachable));

        // A loss already there is said even by a wait that runs out at once,
        // whichever hold it is (the review found the first hold's timeout
        // answered first).
        let (e, f) = (lease(), lease());
        let second_lost = LeaseWatch::of([Arc::clone(&e), Arc::clone(&f)]);
        assert!(f.mark_lost(LeaseLost::NotOurs, &count));
        assert_eq!(
            second_lost.wait_timeout(Duration::ZERO),
            Some(LeaseLost::NotOurs)
        );

        let (c, d) = (lease(), lease());
        let gone = LeaseWatch::of([Arc::clone(&c), Arc::clone(&d)]);
        c.released();
        d.released();
        assert_eq!(gone.wait(), None);
        assert!(gone.receiver().recv().is_err());
    }
}
