//! Connections to Redis: a pool per server, where the primary is (fixed,
//! Sentinel, Cluster), cluster slot routing and redirects. [`Connections::run`]
//! is the one way the lock path sends a script: it picks the node serving the
//! key, takes no pooled connection the server closed while it sat idle
//! (found before anything is sent on it), never sends a request again once
//! it may have run, follows `MOVED`/`ASK`, and re-reads the cluster table
//! after connection errors — every decision by the one error
//! classification, [`Retry`].

mod batch;
pub(crate) mod cluster;
mod pool;
#[cfg(feature = "tokio")]
mod reply;
#[cfg(feature = "tokio")]
mod runtime;
pub(crate) mod sentinel;
pub(crate) mod stream;
mod target;
mod threads;
mod transport;
mod wire;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use redis::IntoConnectionInfo;

pub(crate) use batch::{Batches, Connector, Sent};
pub(crate) use cluster::Router;
pub(crate) use pool::{NodePool, Pooled};
pub(crate) use stream::TlsConfig;
pub(crate) use target::Target;
pub(crate) use threads::{Io, IoThreads};
pub(crate) use transport::{Forsaken, MakeForsaken, Outcome};
pub(crate) use wire::{handshake, Wire};

use crate::error::{redact, Error, Result, Retry};

/// `url` as the `redis` crate reads it; [`Error::InvalidUrl`] naming it
/// (as `what`) when it cannot.
pub(crate) fn parse(url: &str, what: &str) -> Result<redis::ConnectionInfo> {
    url.into_connection_info().map_err(|e| Error::InvalidUrl {
        reason: format!("cannot parse {what}{:?}", redact(url)),
        source: Some(e.into()),
    })
}

/// Checks that a list of node URLs (cluster seeds, Sentinels; `what`) is
/// not empty and reaches every node the same way — all `redis://` or all
/// `rediss://`; returns whether they use TLS.
pub(crate) fn one_scheme(urls: &[String], what: &str) -> Result<bool> {
    let tls = urls.iter().filter(|u| u.starts_with("rediss://")).count();
    if urls.is_empty() || (tls != 0 && tls != urls.len()) {
        return Err(Error::InvalidUrl {
            reason: format!(
                "{what} needs at least one URL, all redis:// or all rediss:// (every node is reached the same way)"
            ),
            source: None,
        });
    }
    Ok(tls != 0)
}

/// What a call with a deadline may take beyond it: one round trip on a
/// loaded machine. Every call of a bounded wait ends by its deadline plus
/// this, all of them together — no call is sent once that end has passed.
pub(crate) const LAST_ROUND_TRIP: Duration = Duration::from_millis(20);

/// How long one call to Redis may take: how long it waits for a pooled
/// connection, and when every wait of it must be over.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Bound {
    /// Wait at most this long for a pooled connection (default: the connect
    /// timeout).
    pub(crate) pool_wait: Option<Duration>,
    /// The hard end of the call (a bounded wait's deadline plus
    /// [`LAST_ROUND_TRIP`]): nothing waits past it or is sent after it;
    /// default: the socket timeout bounds each reply.
    pub(crate) end: Option<Instant>,
}

impl Bound {
    /// Ends by `deadline` plus [`LAST_ROUND_TRIP`]; none: as the default.
    pub(crate) fn until(deadline: Option<Instant>) -> Self {
        Bound {
            pool_wait: None,
            end: deadline.map(|d| d + LAST_ROUND_TRIP),
        }
    }

    /// The same end, waiting at most `wait` for a pooled connection.
    pub(crate) fn with_pool_wait(self, wait: Duration) -> Self {
        Bound {
            pool_wait: Some(wait),
            ..self
        }
    }

    /// What is left before the end (`None` without one).
    pub(crate) fn left(&self) -> Option<Duration> {
        self.end
            .map(|e| e.saturating_duration_since(Instant::now()))
    }
}

/// Where a call went (for its errors and its caller): the server, how long
/// its last reply was waited for (whether by the deadline), whether sent.
#[derive(Default)]
struct At {
    addr: Arc<str>,
    io: Duration,
    by_deadline: bool,
    /// The last try sent its request (a failure may have run in Redis);
    /// false when it failed before — no connection, or one found dead.
    sent: bool,
}

/// Who errors name when no node of a cluster could be asked.
const SEEDS: &str = "the cluster's seeds";

/// The error of a call whose end had passed before it could send anything.
fn out_of_time() -> redis::RedisError {
    std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        "no time was left before the call's deadline",
    )
    .into()
}

/// `MOVED`/`ASK` redirects one command follows before it gives up.
const CLUSTER_REDIRECTS: u32 = 5;

/// The pooled connections of one client: one pool (single server or
/// Sentinel), or one per cluster primary.
pub(crate) struct Connections {
    pool: NodePool,
    /// Redis Cluster: the slot router and a pool per primary.
    cluster: Option<ClusterPools>,
    /// How long a reply may take (named in a timeout error).
    socket_timeout: Duration,
    /// The ACL rules the client needs (named in a `NOPERM` error).
    acl_rules: Vec<String>,
    /// A task's calls on its own tokio runtime (see `runtime`).
    #[cfg(feature = "tokio")]
    tokio: Option<runtime::Runtimes>,
    /// A task's other round trips and background work (see `threads`).
    pub(crate) threads: IoThreads,
}

impl Connections {
    /// Connections to `target`; for a cluster, pools per primary made on
    /// first use with the same settings.
    pub(crate) fn new(
        target: Arc<Target>,
        pool_size: u32,
        connect_timeout: Duration,
        socket_timeout: Duration,
        tls: TlsConfig,
        acl_rules: Vec<String>,
    ) -> Self {
        #[cfg(feature = "tokio")]
        let tokio = match (&*target, &tls) {
            (Target::Fixed(client), None) => {
                runtime::Runtimes::new(client, socket_timeout, pool_size)
            }
            _ => None,
        };
        let cluster = match &*target {
            Target::Cluster(router) => Some(ClusterPools {
                router: Arc::clone(router),
                pools: Mutex::new(HashMap::new()),
                pool_size,
                connect_timeout,
                socket_timeout,
            }),
            _ => None,
        };
        Connections {
            pool: NodePool::new(target, pool_size, connect_timeout, socket_timeout, tls),
            cluster,
            socket_timeout,
            acl_rules,
            #[cfg(feature = "tokio")]
            tokio,
            threads: IoThreads::default(),
        }
    }

    /// The pub/sub the lock scripts use now (see [`Router::pubsub`]).
    pub(crate) fn pubsub(&self) -> crate::protocol::PubSub {
        let classic = crate::protocol::PubSub::Classic;
        self.cluster.as_ref().map_or(classic, |c| c.router.pubsub())
    }

    /// The ACL rules the client needs (see `names::acl_rules`).
    pub(crate) fn acl_rules(&self) -> &[String] {
        &self.acl_rules
    }

    /// How long a new connection may take (how long a waiter rides out
    /// continuous failure).
    pub(crate) fn connect_timeout(&self) -> Duration {
        self.pool.timeout()
    }

    /// Runs `script` for `key` on a pooled connection (in a cluster: of the
    /// primary serving its slot), within `bound`: waiting at most its pool
    /// wait for a connection, and no reply waits longer than the socket
    /// timeout or past its deadline. A pooled connection that the server
    /// closed while it sat idle (Redis was restarted, a proxy dropped it) is
    /// found so on checkout and replaced; a script that may have run is
    /// never sent again here (see [`Wire::check_quiet`]).
    /// A reply that did not come is [`Error::TimedOut`] with how long it was
    /// waited for; every connection error names the server.
    pub(crate) fn run<T>(
        &self,
        key: &str,
        bound: Bound,
        script: impl FnMut(&mut Pooled) -> redis::RedisResult<T>,
    ) -> Result<T> {
        self.run_sent(key, bound, script).0
    }

    /// As [`run`](Self::run), and whether a failure came after the request
    /// went out (it may have run in Redis: what it did is to be undone) —
    /// false when nothing was sent (no connection could be had, the only
    /// one found had died, the call's end had passed).
    pub(crate) fn run_sent<T>(
        &self,
        key: &str,
        bound: Bound,
        script: impl FnMut(&mut Pooled) -> redis::RedisResult<T>,
    ) -> (Result<T>, bool) {
        let mut at = At::default();
        let result = self
            .send(key, bound, &mut at, None, script)
            .map_err(|e| self.explained(e, &at));
        (result, at.sent)
    }

    /// `e` with the server, how long a reply was waited for (a round trip's
    /// timeout is [`Error::TimedOut`]) and the ACL rules this client needs.
    fn explained(&self, e: Error, at: &At) -> Error {
        let waited = (at.sent || at.io.is_zero()).then_some((at.io, at.by_deadline));
        e.at(&at.addr, waited).with_acl_rules(&self.acl_rules)
    }

    /// How long a reply may take within `bound` now, and whether the
    /// deadline (not the socket timeout) decided it.
    fn io_timeout(&self, bound: Bound) -> (Duration, bool) {
        match bound.left() {
            Some(left) if left < self.socket_timeout => (left, true),
            _ => (self.socket_timeout, false),
        }
    }

    /// Runs `script` on `con` within `bound` (after `ASKING` when
    /// `asking`), noting in `at` that it was sent and how long its reply may
    /// take; nothing is sent past the end of `bound`.
    fn on<T>(
        &self,
        con: &mut Pooled,
        bound: Bound,
        at: &mut At,
        asking: bool,
        script: &mut impl FnMut(&mut Pooled) -> redis::RedisResult<T>,
    ) -> redis::RedisResult<T> {
        (at.io, at.by_deadline) = self.io_timeout(bound);
        if at.io.is_zero() {
            at.sent = false;
            return Err(out_of_time());
        }
        con.set_io_timeout(at.io)?;
        at.sent = true;
        if asking {
            redis::cmd("ASKING").query::<()>(&mut *con)?;
        }
        script(con)
    }

    /// How long to wait for a pooled connection within `bound` now.
    fn pool_wait(&self, bound: Bound) -> Option<Duration> {
        match (bound.pool_wait, bound.left()) {
            (Some(wait), Some(left)) => Some(wait.min(left)),
            (None, Some(left)) => Some(self.connect_timeout().min(left)),
            (wait, None) => wait,
        }
    }

    /// Sends `script` for `key` (to `pinned`'s server when given: no
    /// routing, no redirects), noting in `at` where it went.
    fn send<T>(
        &self,
        key: &str,
        bound: Bound,
        at: &mut At,
        pinned: Option<&NodePool>,
        mut script: impl FnMut(&mut Pooled) -> redis::RedisResult<T>,
    ) -> Result<T> {
        let cluster = self.cluster.as_ref().filter(|_| pinned.is_none());
        let mut redirects = 0;
        loop {
            let node = cluster.and_then(|c| c.router.node_for_by(key, bound.end).ok());
            at.sent = false;
            if bound.left().is_some_and(|left| left.is_zero()) {
                (at.io, at.by_deadline) = (Duration::ZERO, true);
                return Err(Error::from(out_of_time()));
            }
            let got = self.connection(key, pinned, bound, &mut at.addr);
            let mut con = match (got, cluster) {
                (Ok(con), _) => con,
                (Err(e), Some(cluster)) if e.is_connection() && redirects < CLUSTER_REDIRECTS => {
                    // Its primary unreachable (failed over?): read the
                    // table again; retry if the slot has a new primary.
                    redirects += 1;
                    let _ = cluster.router.refresh_by(bound.end);
                    if cluster.router.node_for_by(key, bound.end).ok() == node {
                        return Err(e);
                    }
                    continue;
                }
                (Err(e), _) => return Err(e),
            };
            let e = match self.on(&mut con, bound, at, false, &mut script) {
                Ok(v) => return Ok(v),
                Err(e) => e,
            };
            let Some(cluster) = cluster.filter(|_| redirects < CLUSTER_REDIRECTS) else {
                return Err(Error::from_redis(e, key));
            };
            drop(con);
            redirects += 1;
            match (Retry::of(&e), e.code(), e.redirect_node()) {
                (Retry::Redirect, Some("MOVED"), Some((node, slot))) => {
                    tracing::debug!(%node, slot, "leasehold: slot moved; following");
                    cluster.router.moved_by(slot, node, bound.end);
                }
                (Retry::Redirect, _, Some((node, _))) => {
                    // ASK: the slot is being migrated and this key is
                    // already on the target: ASKING, then the command, there.
                    let pool = cluster.pool(&Arc::from(node))?;
                    let mut con = self.connection(key, Some(&pool), bound, &mut at.addr)?;
                    match self.on(&mut con, bound, at, true, &mut script) {
                        Ok(v) => return Ok(v),
                        Err(e) if Retry::of(&e) == Retry::Redirect => {}
                        Err(e) => return Err(Error::from_redis(e, key)),
                    }
                }
                (Retry::Later, Some("TRYAGAIN"), _) => {
                    // A multi-key script during a slot migration, its keys
                    // split between the nodes for a moment.
                    let pause = Duration::from_millis(10 * redirects as u64);
                    std::thread::sleep(bound.left().map_or(pause, |left| left.min(pause)));
                }
                (Retry::Later, Some("CLUSTERDOWN"), _) => {
                    // The caller (a waiter) rides it out; the table may have
                    // changed meanwhile.
                    let _ = cluster.router.refresh_by(bound.end);
                    return Err(Error::from_redis(e, key));
                }
                (Retry::Reconnect, _, _) => {
                    // The node may be gone (a failover): read the table
                    // again, and try the new primary if there is one — only
                    // when the script cannot have run: not sent, or refused
                    // (a replica now). One that may have run is not sent
                    // again: run twice, a reentrant hold's release frees
                    // the lock its outer guard holds (the caller decides,
                    // as for any lost reply).
                    let _ = cluster.router.refresh_by(bound.end);
                    let refused = crate::error::refused_as_no_primary(&e);
                    if (at.sent && !refused)
                        || cluster.router.node_for_by(key, bound.end).ok() == node
                    {
                        return Err(Error::from_redis(e, key));
                    }
                }
                _ => return Err(Error::from_redis(e, key)),
            }
        }
    }

    /// Runs `f` once on every server that holds locks — the server, or each
    /// primary of a cluster — and returns what each returned, in that
    /// order; errors name `what`. A pooled connection found dead is replaced,
    /// as for [`run`](Self::run). For operators' tools, never the lock path.
    pub(crate) fn on_every_primary<T>(
        &self,
        what: &str,
        mut f: impl FnMut(&mut Pooled) -> redis::RedisResult<T>,
    ) -> Result<Vec<T>> {
        let mut on = |pool: &NodePool| {
            let mut at = At::default();
            let done = self.send(what, Bound::default(), &mut at, Some(pool), &mut f);
            done.map_err(|e| self.explained(e, &at))
        };
        match &self.cluster {
            None => Ok(vec![on(&self.pool)?]),
            Some(cluster) => {
                let nodes = cluster.router.primaries().map_err(|e| {
                    let at = At {
                        addr: Arc::from(SEEDS),
                        ..At::default()
                    };
                    self.explained(Error::from_redis(e, what), &at)
                })?;
                nodes.iter().map(|node| on(&*cluster.pool(node)?)).collect()
            }
        }
    }

    /// A pooled connection for `key` (of `pinned`; else in a cluster: to
    /// the primary serving its slot), waiting as `bound` allows (see
    /// [`pool_wait`](Self::pool_wait)); `addr` is set to the server it is
    /// for.
    fn connection(
        &self,
        key: &str,
        pinned: Option<&NodePool>,
        bound: Bound,
        addr: &mut Arc<str>,
    ) -> Result<r2d2::PooledConnection<pool::Manager>> {
        let node_pool;
        let pool = match (pinned, &self.cluster) {
            (Some(pool), _) => pool,
            (None, None) => &self.pool,
            (None, Some(cluster)) => {
                let node = cluster.router.node_for_by(key, bound.end).map_err(|e| {
                    *addr = Arc::from(SEEDS);
                    Error::from_redis(e, key)
                })?;
                node_pool = cluster.pool(&node)?;
                &*node_pool
            }
        };
        let got = pool.get(self.pool_wait(bound));
        *addr = pool.addr();
        got
    }
}

/// A Redis Cluster's router and one pool per primary, made on first use.
struct ClusterPools {
    router: Arc<Router>,
    pools: Mutex<HashMap<Arc<str>, Arc<NodePool>>>,
    pool_size: u32,
    connect_timeout: Duration,
    socket_timeout: Duration,
}

impl ClusterPools {
    fn pool(&self, node: &Arc<str>) -> Result<Arc<NodePool>> {
        let mut pools = self.pools.lock();
        if let Some(pool) = pools.get(node) {
            return Ok(Arc::clone(pool));
        }
        let info = self.router.info_for(node)?;
        let client = redis::Client::open(info)?;
        let pool = Arc::new(NodePool::new(
            Arc::new(Target::Fixed(client)),
            self.pool_size,
            self.connect_timeout,
            self.socket_timeout,
            self.router.tls().clone(),
        ));
        pools.insert(Arc::clone(node), Arc::clone(&pool));
        Ok(pool)
    }
}
