//! A waiter's side of a subscription: its interest in one channel (given
//! back on drop, lingering), and how it parks, takes wake-ups and grants,
//! and learns that its channel's slot moved (sharded pub/sub).

use std::sync::Arc;
use std::time::Instant;

use super::book::Channel;
use super::{toggle, toggle_unlock, Shared, LINGER_MAX};
use crate::options::Cancel;
use crate::park::{Park, Signal};

/// One waiter's interest in one channel; dropping it gives the interest back.
pub(crate) struct Subscription {
    pub(super) shared: Arc<Shared>,
    pub(super) channel: String,
    pub(super) cv: Arc<Signal>,
    /// Made without a subscriber (sharded, no node known for the slot).
    pub(super) stale: bool,
}

impl Subscription {
    /// A subscription parked on `cv`; none: a stale one (see `stale`).
    pub(super) fn new(shared: &Arc<Shared>, channel: &str, cv: Option<Arc<Signal>>) -> Self {
        Subscription {
            shared: Arc::clone(shared),
            channel: channel.to_owned(),
            stale: cv.is_none(),
            cv: cv.unwrap_or_default(),
        }
    }

    /// Whether Redis has acknowledged this channel's subscription on the live
    /// connection (so it counts in `PUBSUB NUMSUB`).
    pub(crate) fn confirmed(&self) -> bool {
        if self.moved() {
            return false;
        }
        let st = self.shared.state.lock();
        let c = st.channels.get(&self.channel);
        st.writer.is_some() && c.is_some_and(|c| c.refs > 0 && c.inflight == 0 && !c.refused)
    }

    /// Sharded pub/sub: the channel's slot is served by another node now
    /// (or was unknown when subscribing), so nothing published for it can
    /// reach this subscription: its waiter should subscribe again.
    pub(crate) fn moved(&self) -> bool {
        if self.stale {
            return true;
        }
        let Some((node, router)) = &self.shared.shard else {
            return false;
        };
        self.on_channel(|c| c.moved) || router.known_node(&self.channel).as_ref() != Some(node)
    }

    /// A plain lock's subscription: hears its unlock channel too (`on`:
    /// another library holds the lock, and only publishes there when it
    /// lets go), or no longer. Returns true when it starts to — after Redis
    /// confirmed it, or `confirm_by` — so the waiter attempts again before
    /// parking: an unlock published before the confirmation reached nobody.
    /// Other subscriptions hear their channel always: false.
    pub(crate) async fn listen_unlock(&self, park: Park, on: bool, confirm_by: Instant) -> bool {
        if self.stale {
            return false;
        }
        {
            let mut st = self.shared.state.lock();
            let (Some(c), link) = st.parts(&self.channel) else {
                return false;
            };
            if c.grant.is_none() || c.unlock == on {
                return false;
            }
            let Some(link) = link.filter(|_| c.live) else {
                // Disconnected: the reconnect subscribes it as it is now.
                c.unlock = on;
                return on;
            };
            toggle_unlock(link, &self.channel, c, on);
            if !on {
                return false;
            }
        }
        self.confirm(park, confirm_by).await;
        true
    }

    /// The one wait of every method below, for a thread or a task: until
    /// `check` (on the book, under its mutex, with this subscription's
    /// channel) answers, `until`, or `stop` is cancelled (`None` then, as at
    /// `until`; registered with the handle, a cancel wakes it at once).
    async fn wait_on<R>(
        &self,
        park: Park,
        until: Instant,
        stop: Option<&Cancel>,
        mut check: impl FnMut(&mut super::book::State, &str) -> Option<R>,
    ) -> Option<R> {
        let channel = self.channel.as_str();
        // A cancel notifies the signal under the subscriber's mutex (which
        // the wait looks at its state under).
        let _on_cancel = stop.map(|c| {
            let (shared, cv) = (Arc::clone(&self.shared), Arc::clone(&self.cv));
            c.on_cancel(Arc::new(move || {
                let _st = shared.state.lock();
                cv.notify_all();
            }))
        });
        self.cv
            .wait(park, &self.shared.state, Some(until), |st| {
                if stop.is_some_and(Cancel::is_cancelled) {
                    return Some(None);
                }
                check(st, channel).map(Some)
            })
            .await
            .flatten()
    }

    /// Waits until Redis has acknowledged every command sent for the
    /// channel on the live connection, or `confirm_by`. Past it, the caller
    /// retries unsubscribed: the channel's waiters are woken again once
    /// Redis confirms, or a message published before then is lost to them.
    pub(crate) async fn confirm(&self, park: Park, confirm_by: Instant) {
        let confirmed = self
            .wait_on(park, confirm_by, None, |st, channel| {
                let done = st.writer.is_some()
                    && st.channels.get(channel).is_some_and(|c| c.inflight == 0);
                done.then_some(())
            })
            .await;
        if confirmed.is_none() {
            let mut st = self.shared.state.lock();
            let live = st.writer.is_some();
            if let Some(c) = st.channels.get_mut(&self.channel) {
                // Confirmed meanwhile (between the wait and this lock):
                // nothing to resync.
                c.resync |= !(live && c.inflight == 0);
            }
        }
    }

    /// `f` on this subscription's channel (`Default` when it is gone).
    fn on_channel<R: Default>(&self, f: impl FnOnce(&mut Channel) -> R) -> R {
        let mut st = self.shared.state.lock();
        st.channels
            .get_mut(&self.channel)
            .map(f)
            .unwrap_or_default()
    }

    /// Unlock messages this client received on the channel so far.
    pub(crate) fn messages(&self) -> u64 {
        self.on_channel(|c| c.messages)
    }

    /// Parks until the channel has received more than `seen` messages, the
    /// connection drops (nothing will count then), or `until`.
    pub(crate) async fn wait_for_message_after(&self, park: Park, seen: u64, until: Instant) {
        self.wait_on(park, until, None, |st, channel| {
            match st.channels.get(channel) {
                Some(c) if c.messages <= seen && st.writer.is_some() => None,
                _ => Some(()),
            }
        })
        .await;
    }

    /// Wake-all messages this client received on the channel so far.
    pub(crate) fn broadcasts(&self) -> u64 {
        self.on_channel(|c| c.broadcasts)
    }

    /// A subscription whose grants are claimed (a semaphore's: several
    /// waiters of one client share it): parks until a grant naming `claim`
    /// arrived (left for [`take_claims`](Self::take_claims)), a wake-up
    /// permit (taken), `until`, or `stop` is cancelled.
    pub(crate) async fn wait_claim_until(
        &self,
        park: Park,
        claim: &str,
        until: Instant,
        stop: Option<&Cancel>,
    ) -> bool {
        self.wait_permit(park, until, stop, |c| {
            c.grants.iter().any(|g| names(g, claim))
        })
        .await
    }

    /// Takes the grants received so far that name `claim`, leaving the
    /// others' for them.
    pub(crate) fn take_claims(&self, claim: &str) -> Vec<Vec<u8>> {
        self.on_channel(|c| {
            let (mine, others) = std::mem::take(&mut c.grants)
                .into_iter()
                .partition(|g| names(g, claim));
            c.grants = others;
            mine
        })
    }

    /// Forgets wake-ups granted so far (right before an attempt, which sees
    /// all they announced).
    pub(crate) fn clear_permits(&self) {
        self.on_channel(|c| c.permits = 0);
    }

    /// Takes the grants received so far (a plain lock's grant channel): the
    /// messages, for the waiter to check that one names its place.
    pub(crate) fn take_grants(&self) -> Vec<Vec<u8>> {
        self.on_channel(|c| std::mem::take(&mut c.grants))
    }

    /// Parks until an unlock message (or a reconnect) grants this waiter a
    /// wake-up (taken), a wake-all message after the first `broadcasts`
    /// (when given), `until`, or `stop` is cancelled. True when woken by a
    /// message (or a reconnect), not by `until` or a cancel.
    pub(crate) async fn wait_until(
        &self,
        park: Park,
        broadcasts: Option<u64>,
        until: Instant,
        stop: Option<&Cancel>,
    ) -> bool {
        let woken = |c: &Channel| broadcasts.is_some_and(|seen| c.broadcasts > seen);
        self.wait_permit(park, until, stop, woken).await
    }

    /// The waits above: until `woken` (nothing taken) or a wake-up permit
    /// (taken). True when either came.
    async fn wait_permit(
        &self,
        park: Park,
        until: Instant,
        stop: Option<&Cancel>,
        woken: impl Fn(&Channel) -> bool,
    ) -> bool {
        self.wait_on(park, until, stop, |st, channel| {
            let c = st.channels.get_mut(channel)?;
            if !woken(c) {
                c.permits = c.permits.checked_sub(1)?;
            }
            Some(())
        })
        .await
        .is_some()
    }
}

/// Whether grant message `grant` names place `claim` (the place, then
/// nothing or a space and what the grant brings).
fn names(grant: &[u8], claim: &str) -> bool {
    grant.starts_with(claim.as_bytes()) && matches!(grant.get(claim.len()), None | Some(b' '))
}

impl Drop for Subscription {
    fn drop(&mut self) {
        if self.stale {
            return;
        }
        let mut st = self.shared.state.lock();
        let lingering = st
            .channels
            .values()
            .filter(|c| c.refs == 0 && c.live)
            .count();
        let (Some(c), link) = st.parts(&self.channel) else {
            return;
        };
        c.refs = c.refs.saturating_sub(1);
        c.permits = c.permits.min(c.refs);
        if c.refs > 0 {
            return;
        }
        c.grants.clear();
        match link {
            // Linger: the next waiter finds it subscribed — a plain lock's
            // to its grant channel only: nobody waits for another library's
            // release now, and a lingering unlock subscription would count
            // as its waiter (a semaphore's waiters hear both always).
            Some(link) if lingering < LINGER_MAX && !c.moved => {
                c.idle_since = Some(Instant::now());
                if c.grant.is_some() && c.unlock && !c.claims {
                    toggle_unlock(link, &self.channel, c, false);
                }
            }
            Some(_) if c.moved => c.live = false, // Redis dropped it already
            Some(mut link) => toggle(&mut link, &self.channel, c, false),
            None => c.live = false,
        }
        if !c.live && c.inflight == 0 {
            st.remove(&self.channel);
        }
    }
}
