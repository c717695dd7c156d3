//! The shared pub/sub subscriber that wakes local waiters.
//!
//! One connection and one thread (`leasehold-sub`) per client, started for
//! the first waiter — or, in a cluster with sharded pub/sub (Redis ≥ 7, see
//! `ShardedPubSub`), one per node serving a waited-on channel's slot, which
//! `SSUBSCRIBE`s there: a `MOVED` reply, a `sunsubscribe` nobody asked for
//! (the slot left the node) or the router naming another node marks the
//! subscription moved, and its waiters subscribe again where the slot is
//! now (`Subscription::moved`). Subscriptions are counted per channel (a
//! hundred threads waiting on one name cost one `SUBSCRIBE`); the last
//! waiter's leaves it lingering for [`LINGER`] (at most [`LINGER_MAX`] of
//! them) before `UNSUBSCRIBE`, so a busy name is not resubscribed for every
//! wait, and a waiter that finds its channel subscribed parks at once.
//!
//! A plain lock's waiters listen to their client's own grant channel
//! ([`Listen::Line`]), where a release that gives the lock to this client's
//! waiter says so (or wakes it), and to the lock's unlock channel only
//! while another library (Redisson) holds the lock
//! ([`Subscription::listen_unlock`]): that holder's release only publishes
//! there. So `PUBSUB NUMSUB` (`SHARDNUMSUB`) of the unlock channel counts
//! other libraries' waiters, which a release reads to let them in now and
//! then, and no pattern is ever subscribed (Redis matches every `PUBLISH`
//! against every pattern of the server: 55 µs per publish with 1,000 of
//! them). A grant (a message naming a place, `…#…`, there or on a fair
//! waiter's own channel) is kept for the waiter to take
//! ([`Subscription::take_grants`]).
//!
//! The thread blocks reading the connection while a waiter writes its own
//! `SUBSCRIBE` on the shared socket (under the state mutex): one round trip
//! per subscription, nothing polls. A waiter counts as subscribed only once
//! Redis acknowledged every command sent for its channel, so no unlock
//! published after that can be missed.
//!
//! Each unlock message grants one permit (capped at the local waiters),
//! which one waiter takes to retry, as Redisson's semaphore does; the
//! message `1` (a read/write lock's write unlock) wakes every waiter of it
//! (counted per channel: no waiter takes another's turn). When the
//! connection drops, every waiter gets a permit, and again once its channel
//! is subscribed on the new one: a message lost in between costs one retry,
//! never a lease. A subscription Redis refuses (NOPERM) is never confirmed;
//! its waiters retry on their own (the wait loop), and `stats()` says why.
//!
//! This file routes a channel to its subscriber; `book` (channels),
//! `subscription` (the waiters' side) and `reader` (the thread) say what
//! they own.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

mod book;
mod reader;
mod subscription;
use crate::conn::stream::Stream;
use crate::conn::{Router, Target, TlsConfig};
use crate::park::Park;
use crate::protocol::PubSub;
use crate::sync::{Condvar, Mutex};
use book::{toggle, toggle_unlock, Channel, State};
use redis::ConnectionInfo;
pub(crate) use subscription::Subscription;

/// Writes a command on the shared socket; on failure shuts it down so the
/// reader notices, reconnects and resubscribes.
fn send(w: &mut Stream, bytes: &[u8]) {
    use std::io::Write;
    if let Err(e) = w.write_all(bytes) {
        tracing::debug!(error = %e, "leasehold: subscriber write failed; reconnecting");
        w.shutdown();
    }
}

/// How long the subscriber connection may stay silent before we PING it;
/// a second silent period means it is dead and we reconnect.
const KEEPALIVE: Duration = Duration::from_secs(10);
const BACKOFF_MIN: Duration = Duration::from_millis(10);
/// How long a subscription nobody uses any more stays subscribed.
pub(crate) const LINGER: Duration = Duration::from_secs(1);
/// Most lingering subscriptions per client; past this, the last waiter of a
/// channel unsubscribes at once.
const LINGER_MAX: usize = 256;
/// How often the subscriber thread looks for lingering subscriptions to end
/// (its read timeout).
const SWEEP: Duration = Duration::from_millis(250);
/// Grants kept per channel for a waiter to take.
const GRANTS_MAX: usize = 16;
/// Claimed grants kept per channel (a semaphore's: one per waiting
/// acquisition of the client that a release may grant at once); past this
/// the oldest goes (its waiter left, or confirms its place within a
/// second).
const CLAIMED_GRANTS_MAX: usize = 256;
const BACKOFF_MAX: Duration = Duration::from_secs(1);

/// The shared subscriber of one client: one connection (classic pub/sub),
/// or one per cluster node that serves a waited-on channel (sharded).
pub(crate) struct Notifier {
    /// The classic subscriber (unused while a cluster shards).
    shared: Arc<Shared>,
    /// A cluster: its router, and the sharded subscribers by node.
    shards: Option<Shards>,
}

struct Shards {
    router: Arc<Router>,
    nodes: Mutex<HashMap<Arc<str>, Arc<Shared>>>,
}

/// One subscriber connection and its thread.
struct Shared {
    /// The configured server (its address, user and password).
    info: ConnectionInfo,
    client_name: String,
    connect_timeout: Duration,
    io_timeout: Duration,
    tls: TlsConfig,
    /// Where the primary is now (Sentinel); `info` otherwise.
    target: Option<Arc<crate::conn::Target>>,
    state: Mutex<State>,
    /// Wakes the subscriber thread (new channel while disconnected, shutdown).
    thread_cv: Condvar,
    /// The connection is up (for `stats()`).
    connected: AtomicBool,
    /// Times it connected since the client was built.
    connects: AtomicU64,
    /// Why it last failed to connect (cleared when it connects).
    last_error: Mutex<Option<String>>,
    /// Sharded pub/sub: the cluster node this subscriber serves (it
    /// `SSUBSCRIBE`s there) and the router told of a `MOVED` reply.
    shard: Option<(Arc<str>, Arc<Router>)>,
}

/// What a waiter listens to.
#[derive(Clone, Copy)]
pub(crate) enum Listen<'a> {
    /// One channel (`SUBSCRIBE`).
    Channel(&'a str),
    /// A plain lock (`key`): the client's grant channel for it, and its
    /// unlock channel `channel` too when `unlock` (another library holds
    /// the lock). The subscription is named after the unlock channel.
    /// A semaphore's subscription is one too (`key`: its line, `channel`:
    /// Redisson's, heard always), whose grants are claimed (`claims`).
    Line {
        key: &'a str,
        channel: &'a str,
        grant: &'a str,
        unlock: bool,
        claims: bool,
    },
}

impl Listen<'_> {
    /// The channel that names the subscription.
    fn channel(&self) -> &str {
        match self {
            Listen::Channel(c) | Listen::Line { channel: c, .. } => c,
        }
    }
}

impl Notifier {
    /// A notifier for the server of `info`; nothing connects until a waiter
    /// subscribes. `target`: Sentinel's or a cluster's (where to connect;
    /// a cluster also decides between classic and sharded pub/sub).
    pub(crate) fn new(
        info: &ConnectionInfo,
        client_name: String,
        connect_timeout: Duration,
        io_timeout: Duration,
        tls: TlsConfig,
        target: Option<Arc<Target>>,
    ) -> Self {
        let shards = match target.as_deref() {
            Some(Target::Cluster(router)) => Some(Shards {
                router: Arc::clone(router),
                nodes: Mutex::new(HashMap::new()),
            }),
            _ => None,
        };
        Notifier {
            shared: Shared::new(
                info.clone(),
                client_name,
                (connect_timeout, io_timeout),
                tls,
                target,
                None,
            ),
            shards,
        }
    }

    /// The subscriber for `channel`: the classic one, or (a cluster with
    /// sharded pub/sub) the one of the node serving its slot, started on
    /// first use. `None`: sharded, and no node is known for the slot — as
    /// the table last read says, unless `refresh` lets it read the table
    /// again (a round trip: never on a task's path, whose next attempt, on
    /// an I/O thread, reads it).
    fn subscriber(&self, channel: &str, refresh: bool) -> Option<Arc<Shared>> {
        let Some(shards) = self.sharded() else {
            return Some(Arc::clone(&self.shared));
        };
        let node = if refresh {
            shards.router.node_for(channel).ok()?
        } else {
            shards.router.known_node(channel)?
        };
        let mut nodes = shards.nodes.lock();
        if let Some(s) = nodes.get(&node) {
            return Some(Arc::clone(s));
        }
        let info = shards.router.info_for(&node).ok()?;
        let base = &self.shared;
        let shared = Shared::new(
            info,
            base.client_name.clone(),
            (base.connect_timeout, base.io_timeout),
            base.tls.clone(),
            None,
            Some((Arc::clone(&node), Arc::clone(&shards.router))),
        );
        nodes.insert(node, Arc::clone(&shared));
        Some(shared)
    }

    /// A cluster's shards, while it uses sharded pub/sub.
    fn sharded(&self) -> Option<&Shards> {
        (self.shards.as_ref()).filter(|s| s.router.pubsub() == PubSub::Sharded)
    }

    /// Every subscriber started so far.
    fn all(&self) -> Vec<Arc<Shared>> {
        let mut all = vec![Arc::clone(&self.shared)];
        if let Some(shards) = &self.shards {
            all.extend(shards.nodes.lock().values().cloned());
        }
        all
    }

    /// Registers interest in `listen` and waits until Redis confirmed the
    /// subscription (a lingering one is: no round trip), or `confirm_by`
    /// (the caller's waits are still capped by the holder's lease).
    pub(crate) async fn subscribe(
        &self,
        park: Park,
        listen: Listen<'_>,
        confirm_by: Instant,
    ) -> Subscription {
        match self.subscriber(listen.channel(), park == Park::Thread) {
            Some(shared) => {
                let sub = shared.subscribe(listen);
                sub.confirm(park, confirm_by).await;
                sub
            }
            // Sharded, and the slot's node unknown (the cluster is down):
            // a subscription that hears nothing and says so, so its waiter
            // retries and subscribes again once the slot is served.
            None => Subscription::new(&self.shared, listen.channel(), None),
        }
    }

    /// The subscription of line `key` (a plain lock's key, a semaphore's
    /// line) when it is still confirmed (it lingers, or other waiters hold
    /// it): a waiter that takes it before its first attempt hears everything
    /// after that attempt, so it parks at once when the lock is held.
    /// `channel` names the channel it is named after (needed in a sharded
    /// cluster only: no allocation with classic pub/sub).
    pub(crate) fn resume_line_on(
        &self,
        key: &str,
        channel: impl FnOnce() -> String,
    ) -> Option<Subscription> {
        let shared = match self.sharded() {
            Some(_) => self.subscriber(&channel(), false)?,
            None => Arc::clone(&self.shared),
        };
        let mut st = shared.state.lock();
        let channel = st.lines.get(key)?.clone();
        Shared::resume_in(&shared, &mut st, &channel)
    }

    /// The subscription of `channel` when it is still confirmed (see
    /// [`resume_line`](Self::resume_line)).
    pub(crate) fn resume(&self, channel: &str) -> Option<Subscription> {
        let shared = self.subscriber(channel, false)?;
        let mut st = shared.state.lock();
        Shared::resume_in(&shared, &mut st, channel)
    }

    /// Whether every subscriber with waiters is connected now, how many
    /// times they connected so far, and why one last failed to.
    pub(crate) fn health(&self) -> (bool, u64, Option<String>) {
        let mut health = (true, 0, None);
        let classic = self.sharded().is_none();
        for (i, s) in self.all().iter().enumerate() {
            let in_use =
                (i == 0 && classic) || s.state.lock().channels.values().any(|c| c.refs > 0);
            health.0 &= !in_use || s.connected.load(Ordering::Relaxed);
            health.1 += s.connects.load(Ordering::Relaxed);
            health.2 = health.2.or_else(|| s.last_error.lock().clone());
        }
        health
    }

    /// Stops the subscriber threads: closes the sockets they read.
    pub(crate) fn close(&self) {
        for shared in self.all() {
            let mut st = shared.state.lock();
            st.closed = true;
            if let Some(w) = st.writer.take() {
                w.shutdown();
            }
            shared.thread_cv.notify_all();
        }
    }
}

impl Shared {
    fn new(
        info: ConnectionInfo,
        client_name: String,
        (connect_timeout, io_timeout): (Duration, Duration),
        tls: TlsConfig,
        target: Option<Arc<Target>>,
        shard: Option<(Arc<str>, Arc<Router>)>,
    ) -> Arc<Self> {
        let state = State {
            sharded: shard.is_some(),
            ..State::default()
        };
        Arc::new(Shared {
            info,
            client_name,
            connect_timeout,
            io_timeout,
            tls,
            target,
            state: Mutex::new(state),
            thread_cv: Condvar::new(),
            connected: AtomicBool::new(false),
            connects: AtomicU64::new(0),
            last_error: Mutex::new(None),
            shard,
        })
    }

    /// See [`Notifier::subscribe`]: registers (sending `SUBSCRIBE` when
    /// needed); the caller awaits the confirmation.
    fn subscribe(self: &Arc<Self>, listen: Listen<'_>) -> Subscription {
        let channel = listen.channel();
        let mut st = self.state.lock();
        if !st.thread_started && !st.closed {
            st.thread_started = true;
            let worker = Arc::clone(self);
            let spawned = std::thread::Builder::new()
                .name("leasehold-sub".into())
                .spawn(move || worker.run());
            if let Err(e) = spawned {
                st.thread_started = false;
                tracing::warn!(error = %e, "leasehold: could not start the subscriber thread; waiters fall back to lease-capped retries");
            }
        }
        if !st.channels.contains_key(channel) {
            let c = Channel::new(listen);
            for wire in c.grant.iter().chain(&c.also) {
                st.routes.insert(wire.clone(), channel.to_owned());
            }
            if let Some(key) = &c.key {
                st.lines.insert(key.clone(), channel.to_owned());
            }
            st.channels.insert(channel.to_owned(), c);
        }
        let unlock = matches!(listen, Listen::Line { unlock: true, .. });
        let cv = match st.parts(channel) {
            (Some(entry), link) => {
                entry.refs += 1;
                entry.idle_since = None;
                match link {
                    // A lingering line subscription, and this waiter needs
                    // the unlock channel too (confirmed below).
                    Some(link) if entry.live && unlock && !entry.unlock => {
                        toggle_unlock(link, channel, entry, true);
                    }
                    Some(_) if entry.live => {}
                    None if entry.live => entry.unlock |= unlock && entry.grant.is_some(),
                    link => {
                        entry.moved = false;
                        if entry.grant.is_some() {
                            entry.unlock = unlock;
                        }
                        match link {
                            Some(mut link) => toggle(&mut link, channel, entry, true),
                            // The thread subscribes every registered
                            // channel, as it is then, when it connects.
                            None => {
                                entry.live = true;
                                self.thread_cv.notify_all();
                            }
                        }
                    }
                }
                Arc::clone(&entry.cv)
            }
            // Registered above: never; a subscription that never confirms.
            (None, _) => Arc::default(),
        };
        drop(st);
        Subscription::new(self, channel, Some(cv))
    }

    fn resume_in(shared: &Arc<Shared>, st: &mut State, channel: &str) -> Option<Subscription> {
        st.writer.as_ref()?; // disconnected: nothing is confirmed
        let c = st
            .channels
            .get_mut(channel)
            .filter(|c| c.live && c.inflight == 0)?;
        c.refs += 1;
        c.idle_since = None;
        Some(Subscription::new(shared, channel, Some(Arc::clone(&c.cv))))
    }
}
