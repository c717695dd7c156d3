//! `LockClientBuilder`: every setting with its default, the URL and TLS
//! checks, and the assembly of a client (connections, notifier, renewal
//! thread) — one builder for both faces, its type parameter the client it
//! builds; plus `LockClient`'s and `AsyncLockClient`'s constructors.

use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use redis::ConnectionAddr;

use crate::client::LockClient;
use crate::conn::sentinel::{self, PrimarySettings};
use crate::conn::{parse, Batches, Connections, Connector, Router, Target};
use crate::conn::{TlsConfig, Wire};
use crate::error::{redact, Error, Result};
use crate::names::short_id;
use crate::notify::Notifier;

/// The socket timeout of a client whose watchdog lease is at least 9 s.
const DEFAULT_SOCKET_TIMEOUT: Duration = Duration::from_secs(3);

/// The longest connect or socket timeout taken: a day (a call waiting
/// longer on one server is waiting on one that is gone).
pub(crate) const LONGEST_TIMEOUT: Duration = Duration::from_secs(24 * 3600);
use crate::options::{check_lease, check_renewable, ShardedPubSub};
use crate::raw::{Parts, Raw};
use crate::renewal::registration::Registration;
use crate::renewal::Renewer;
use crate::shared::Shared;
use crate::task::AsyncLockClient;

/// Builds a client; every setting has a written-down default. One builder
/// for both faces: `C` is the client it builds — [`LockClient`]
/// ([`LockClient::builder`], `build()`, `connect()`) or [`AsyncLockClient`]
/// ([`AsyncLockClient::builder`], `build()`, `connect().await`) — with the
/// same settings.
///
/// ```no_run
/// # fn main() -> Result<(), leasehold::Error> {
/// use std::time::Duration;
/// let client = leasehold::LockClient::builder("redis://127.0.0.1/")
///     .pool_size(16)
///     .key_prefix("billing:")
///     .socket_timeout(Duration::from_secs(2))
///     .build()?;
/// # Ok(()) }
/// ```
///
/// For tasks, the same settings, and the start-up check awaited:
///
/// ```no_run
/// # async fn start() -> Result<(), leasehold::Error> {
/// let client = leasehold::AsyncLockClient::builder("redis://127.0.0.1/")
///     .key_prefix("billing:")
///     .connect()
///     .await?; // Redis answered
/// let _g = client.lock("order:pay").await?;
/// # Ok(()) }
/// ```
#[must_use = "a builder does nothing until build() is called"]
pub struct LockClientBuilder<C = LockClient> {
    url: String,
    pool_size: u32,
    key_prefix: String,
    watchdog_lease: Duration,
    connect_timeout: Duration,
    /// `None`: [`DEFAULT_SOCKET_TIMEOUT`], or a third of the watchdog lease
    /// if that is shorter.
    socket_timeout: Option<Duration>,
    replicas: Option<(u32, Duration)>,
    /// Sentinel URLs and the master name, for a Sentinel-managed primary.
    sentinel: Option<(Vec<String>, String)>,
    /// How to reach the primary Sentinel names (auth, database, TLS).
    primary: PrimarySettings,
    /// Seed node URLs of a Redis Cluster.
    cluster: Option<Vec<String>>,
    sharded_pubsub: ShardedPubSub,
    /// Who this client is, for operators (`inspect`).
    client_name: Option<String>,
    #[cfg(feature = "tls")]
    tls_root_cert: Option<Vec<u8>>,
    /// How much earlier than its socket timeouts require a lease whose
    /// renewal fails is reported lost (a Redlock node's: the drift
    /// allowance, so the hold's loss is told by its validity).
    loss_margin: Duration,
    /// The client it builds.
    face: PhantomData<fn() -> C>,
}

impl<C> Clone for LockClientBuilder<C> {
    fn clone(&self) -> Self {
        LockClientBuilder {
            url: self.url.clone(),
            pool_size: self.pool_size,
            key_prefix: self.key_prefix.clone(),
            watchdog_lease: self.watchdog_lease,
            connect_timeout: self.connect_timeout,
            socket_timeout: self.socket_timeout,
            replicas: self.replicas,
            sentinel: self.sentinel.clone(),
            primary: self.primary.clone(),
            cluster: self.cluster.clone(),
            sharded_pubsub: self.sharded_pubsub,
            client_name: self.client_name.clone(),
            #[cfg(feature = "tls")]
            tls_root_cert: self.tls_root_cert.clone(),
            loss_margin: self.loss_margin,
            face: PhantomData,
        }
    }
}

/// Every setting, with passwords in URLs shown as `***`.
impl<C> std::fmt::Debug for LockClientBuilder<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let urls = |urls: &[String]| urls.iter().map(|u| redact(u)).collect::<Vec<_>>();
        let mut d = f.debug_struct("LockClientBuilder");
        d.field("url", &redact(&self.url))
            .field("pool_size", &self.pool_size)
            .field("key_prefix", &self.key_prefix)
            .field("watchdog_lease", &self.watchdog_lease)
            .field("connect_timeout", &self.connect_timeout)
            .field("socket_timeout", &self.socket_timeout)
            .field("replicas", &self.replicas)
            .field(
                "sentinel",
                &self.sentinel.as_ref().map(|(u, m)| (urls(u), m)),
            )
            .field("primary", &self.primary)
            .field("cluster", &self.cluster.as_deref().map(urls))
            .field("sharded_pubsub", &self.sharded_pubsub)
            .field("client_name", &self.client_name);
        #[cfg(feature = "tls")]
        d.field("tls_root_cert", &self.tls_root_cert.as_ref().map(|_| "…"));
        d.finish()
    }
}

impl<C> LockClientBuilder<C> {
    /// Every default, for `url`.
    fn with_url(url: &str) -> Self {
        LockClientBuilder {
            url: url.to_owned(),
            pool_size: 16,
            key_prefix: String::new(),
            watchdog_lease: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(5),
            socket_timeout: None,
            replicas: None,
            sentinel: None,
            primary: PrimarySettings::default(),
            cluster: None,
            sharded_pubsub: ShardedPubSub::Auto,
            client_name: None,
            #[cfg(feature = "tls")]
            tls_root_cert: None,
            loss_margin: Duration::ZERO,
            face: PhantomData,
        }
    }

    /// Reports a lease whose renewal fails lost `margin` earlier than the
    /// socket timeouts require (a Redlock node's client: the drift
    /// allowance).
    pub(crate) fn loss_margin(mut self, margin: Duration) -> Self {
        self.loss_margin = margin;
        self
    }

    /// Every default, for a Redis Cluster of `seeds`.
    fn with_cluster<S: AsRef<str>>(seeds: &[S]) -> Self {
        let urls: Vec<String> = seeds.iter().map(|s| s.as_ref().to_owned()).collect();
        let mut builder = Self::with_url(urls.first().map_or("", String::as_str));
        builder.cluster = Some(urls);
        builder
    }

    /// Every default, for the primary `master` of `sentinels`.
    fn with_sentinels<S: AsRef<str>>(sentinels: &[S], master: &str) -> Self {
        let urls: Vec<String> = sentinels.iter().map(|s| s.as_ref().to_owned()).collect();
        let mut builder = Self::with_url(urls.first().map_or("", String::as_str));
        builder.sentinel = Some((urls, master.to_owned()));
        builder
    }

    setters! {
        /// Most pooled connections open at once; each lock or unlock holds one
        /// only for its round trip. Defaults to 16.
        pool_size(size: u32) => pool_size = size;

        /// A prefix put before every lock name to form the Redis key (e.g.
        /// `"billing:"`). Defaults to none: the key is the name, as in Redisson.
        key_prefix(prefix: impl Into<String>) => key_prefix = prefix.into();

        /// A name for this client that operators see: `inspect` shows it beside
        /// the host and pid of every hold and wait of this client (e.g.
        /// `"billing-worker-3"`). Unset by default (host and pid still show).
        client_name(name: impl Into<String>) => client_name = Some(name.into());

        /// The lease of locks taken without an explicit one, renewed every third
        /// of it while the guard lives. Defaults to 30 s (Redisson's
        /// `lockWatchdogTimeout`).
        ///
        /// A renewal that fails with less than two socket timeouts of the lease
        /// left makes the lease lost at once (the client could not learn in time
        /// whether another try went through), so the lease must be longer than
        /// twice the [socket timeout](Self::socket_timeout) — `build` refuses it
        /// otherwise — and is best well above: with the defaults, a renewal may
        /// fail twice before anything is lost. Without a socket timeout of its
        /// own, a lease under 9 s gets one of a third of the lease.
        watchdog_lease(lease: Duration) => watchdog_lease = lease;

        /// How long to wait for a new connection to Redis, and for a pooled one
        /// when all are busy. Defaults to 5 s; from 1 ms to a day.
        connect_timeout(timeout: Duration) => connect_timeout = timeout;

        /// How long one Redis reply may take before the call fails with a timeout
        /// error; it also bounds how long a guard's `Drop` can block when Redis is
        /// unreachable. Defaults to 3 s, or a third of the
        /// [watchdog lease](Self::watchdog_lease) if that is shorter; must be at
        /// least 1 ms, at most a day, and below half the watchdog lease.
        socket_timeout(timeout: Duration) => socket_timeout = Some(timeout);

        /// Require `replicas` replicas of the primary to acknowledge every
        /// acquire within `timeout` (Redisson's `checkLockSyncedSlaves`): right
        /// after the acquire script, `WAIT replicas timeout` runs on the same
        /// connection. Fewer acknowledgements → the hold is undone
        /// (owner-checked) and the call fails with [`Error::NotReplicated`]; it
        /// is not retried, since a replica that is down stays down for a while.
        /// Each batch of lease renewals ends with the same `WAIT`: a renewal
        /// too few replicas acknowledged does not lengthen the lease a guard
        /// counts on (it is retried; the lease is reported lost when it
        /// cannot be confirmed in time).
        ///
        /// This narrows, not closes, the window in which a failover loses a lock
        /// (replication stays asynchronous: an acknowledged write can still be
        /// lost if the primary and that replica fail together). Costs one round
        /// trip per acquire, and threads of the client no longer hand the lock
        /// to each other inside the release script (every acquire must be
        /// acknowledged). `timeout` must be below the
        /// [socket timeout](Self::socket_timeout). Off by default.
        replicas(replicas: u32, timeout: Duration) => replicas = Some((replicas, timeout));

        /// Cluster only: sharded or classic pub/sub for unlock messages (see
        /// [`ShardedPubSub`]). Defaults to [`ShardedPubSub::Auto`], as
        /// Redisson ≥ 3.22.0: sharded on Redis ≥ 7. Redisson clients on the same
        /// names must use the same: [`ShardedPubSub::Off`] beside Redisson
        /// < 3.22.0 or `ShardedSubscriptionMode.OFF`. Ignored elsewhere (a
        /// single server and Sentinel use classic pub/sub).
        sharded_pubsub(mode: ShardedPubSub) => sharded_pubsub = mode;
    }

    /// Sentinel only: the password (and ACL username, if not `default`) of
    /// the primary and replicas the Sentinels watch — Redisson's
    /// `SentinelServersConfig.setPassword`/`setUsername`. The Sentinels' own
    /// password goes in their URLs (`redis://:secret@10.0.0.1:26379/`).
    pub fn sentinel_primary_auth(mut self, username: Option<&str>, password: &str) -> Self {
        self.primary.username = username.map(str::to_owned);
        self.primary.password = Some(password.to_owned());
        self
    }

    setters! {
        /// Sentinel only: the database number on the primary (default 0).
        sentinel_primary_db(db: i64) => primary.db = Some(db);

        /// Sentinel only (feature `tls`): reach the primary over TLS, verified
        /// against [`tls_root_certificate`](Self::tls_root_certificate) or the
        /// platform's trust store. Sentinels themselves speak TLS when their
        /// URLs are `rediss://`.
        #[cfg(feature = "tls")]
        sentinel_primary_tls() => primary.tls = true;

        /// For `rediss://` URLs (feature `tls`): trust this root certificate
        /// (PEM) instead of the platform's trust store — for a server whose
        /// certificate your own CA signed. Unset by default.
        #[cfg(feature = "tls")]
        tls_root_certificate(pem: impl Into<Vec<u8>>) => tls_root_cert = Some(pem.into());
    }

    /// The subscriber's TLS configuration for a `rediss://` URL; refuses TLS
    /// without the `tls` feature and `#insecure` (unverified) TLS.
    fn tls(&self, info: &redis::ConnectionInfo) -> Result<TlsConfig> {
        let insecure = match info.addr() {
            ConnectionAddr::TcpTls { insecure, .. } => *insecure,
            _ if self.primary.tls => false,
            _ => return Ok(None),
        };
        if insecure {
            return Err(Error::InvalidUrl {
                reason: "rediss://…#insecure (TLS without verifying the server) is refused; \
                         trust your CA with tls_root_certificate instead"
                    .into(),
                source: None,
            });
        }
        #[cfg(feature = "tls")]
        return crate::tls::client_config(self.tls_root_cert.as_deref()).map(Some);
        #[cfg(not(feature = "tls"))]
        Err(Error::InvalidUrl {
            reason: "TLS (rediss://) needs leasehold's `tls` cargo feature".into(),
            source: None,
        })
    }

    /// Refuses settings that cannot work, and fills in the socket timeout.
    fn check(&mut self) -> Result<()> {
        if self.pool_size == 0 {
            return Err(Error::invalid("pool size must be at least 1"));
        }
        check_lease("watchdog lease", self.watchdog_lease)?;
        let lease = self.watchdog_lease;
        let socket_timeout = *self
            .socket_timeout
            .get_or_insert_with(|| DEFAULT_SOCKET_TIMEOUT.min(lease / 3));
        for (what, d) in [
            ("connect timeout", self.connect_timeout),
            ("socket timeout", socket_timeout),
        ] {
            if d < Duration::from_millis(1) {
                return Err(Error::invalid(format_args!(
                    "the {what} ({d:?}) must be at least 1 ms: no Redis reply comes faster"
                )));
            }
            if d > LONGEST_TIMEOUT {
                return Err(Error::invalid(format_args!(
                    "the {what} ({d:?}) must be at most {LONGEST_TIMEOUT:?}: a longer one would keep a call \
                     waiting on a server that is gone for good (and overflow the clock's deadlines)"
                )));
            }
        }
        check_renewable("watchdog lease", self.watchdog_lease, socket_timeout)?;
        if self.sentinel.is_none() && self.primary.is_set() {
            return Err(Error::invalid(
                "sentinel_primary_* settings are for sentinel_builder only; \
                 put a server's password and database in its URL (redis://user:password@host:port/db)",
            ));
        }
        if self
            .sentinel
            .as_ref()
            .is_some_and(|(_, master)| master.is_empty())
        {
            return Err(Error::invalid(
                "Sentinel needs the master name of the primary it watches (its `sentinel monitor` name)",
            ));
        }
        if let Some((n, timeout)) = self.replicas {
            if n == 0 || timeout.is_zero() {
                return Err(Error::invalid(
                    "replica acknowledgement needs at least 1 replica and a timeout above zero",
                ));
            }
            if timeout >= socket_timeout {
                return Err(Error::invalid(format_args!(
                    "the replica acknowledgement timeout ({timeout:?}) must be below the socket timeout ({socket_timeout:?}), or the WAIT reply times out first"
                )));
            }
        }
        Ok(())
    }

    /// Builds the client from checked settings. Nothing connects yet.
    fn assemble(mut self) -> Result<Arc<Shared>> {
        self.check()?;
        let socket_timeout = self.socket_timeout.unwrap_or(DEFAULT_SOCKET_TIMEOUT);
        #[cfg(not(feature = "tls"))]
        if self.url.starts_with("rediss://") {
            return Err(Error::InvalidUrl {
                reason: "TLS (rediss://) needs leasehold's `tls` cargo feature".into(),
                source: None,
            });
        }
        let info = parse(&self.url, "")?;
        let tls = self.tls(&info)?;
        let tcp = redis::io::tcp::TcpSettings::default().set_nodelay(true);
        let info = info.set_tcp_settings(tcp.clone());
        let id = crate::names::new_client_id();
        let target =
            Arc::new(match (&self.sentinel, &self.cluster) {
                (_, Some(urls)) => {
                    crate::conn::one_scheme(urls, "a cluster (its seeds)")?;
                    let seeds = urls
                        .iter()
                        .map(|u| parse(u, "the seed ").map(|i| i.set_tcp_settings(tcp.clone())))
                        .collect::<Result<Vec<_>>>()?;
                    Target::Cluster(Arc::new(Router::new(
                        seeds,
                        self.connect_timeout,
                        socket_timeout,
                        self.sharded_pubsub,
                        tls.clone(),
                    )))
                }
                (None, None) => Target::Fixed(redis::Client::open(info.clone()).map_err(|e| {
                    Error::InvalidUrl {
                        reason: format!("cannot use {:?}", redact(&self.url)),
                        source: Some(e.into()),
                    }
                })?),
                (Some((urls, master)), None) => {
                    #[cfg(feature = "tls")]
                    let root_cert = self.tls_root_cert.as_deref();
                    #[cfg(not(feature = "tls"))]
                    let root_cert = None;
                    let timeouts = (self.connect_timeout, socket_timeout);
                    let client =
                        sentinel::client(urls, master, &self.primary, root_cert, &tcp, timeouts)?;
                    Target::Sentinel(client)
                }
            });
        let notifier = Notifier::new(
            &info,
            format!("leasehold-notify-{}", short_id(&id)),
            self.connect_timeout,
            socket_timeout,
            tls.clone(),
            matches!(*target, Target::Sentinel(_) | Target::Cluster(_))
                .then(|| Arc::clone(&target)),
        );
        let renewer = {
            // Renewal is on the clock: a reconnect may take no longer than a
            // reply may, so a dead network cannot hold the thread past a
            // lease it must report lost.
            let router = match &*target {
                Target::Cluster(router) => Some(Arc::clone(router)),
                _ => None,
            };
            let (target, socket, tls) = (Arc::clone(&target), socket_timeout, tls.clone());
            let connect = self.connect_timeout.min(socket);
            let connector: Connector = Box::new(move || {
                let client = target.client()?;
                Wire::connect(client.get_connection_info(), &tls, connect, socket)
            });
            // Renew up to a thirtieth of the lease early to batch more.
            let registration =
                Registration::new(&self.key_prefix, &id, self.client_name.as_deref());
            Renewer::start(
                Batches::new(connector, router, socket).acknowledged(self.replicas),
                self.watchdog_lease / 30,
                (socket, self.loss_margin),
                registration,
            )
            .map_err(|source| Error::Thread { source })?
        };
        let conns = Connections::new(
            target,
            self.pool_size,
            self.connect_timeout,
            socket_timeout,
            tls,
            crate::names::acl_rules(
                &self.key_prefix,
                self.replicas.is_some(),
                self.cluster.is_some(),
            ),
        );
        let raw = Raw::new(Parts {
            id,
            conns,
            key_prefix: self.key_prefix,
            watchdog_lease: self.watchdog_lease,
            socket_timeout,
            renewer,
            replicas: self.replicas,
        });
        Ok(Arc::new(Shared::new(raw, notifier)))
    }
}

impl LockClientBuilder {
    /// Checks the settings and builds the client. Nothing connects yet: the
    /// first lock opens the first connection (see [`connect`](Self::connect)
    /// to find a wrong address or password at start-up instead).
    ///
    /// # Errors
    /// [`Error::InvalidUrl`] for a URL the `redis` crate cannot parse, a
    /// `rediss://` (TLS) URL without the `tls` feature, or unverified TLS
    /// (`#insecure`);
    /// [`Error::InvalidArgument`] for settings that cannot work, each saying
    /// why: a zero pool size or lease, a timeout under 1 ms, a watchdog lease
    /// above [`MAX_LEASE`](crate::MAX_LEASE) or not longer than twice the
    /// socket timeout, a replica acknowledgement timeout not below the
    /// socket timeout, a Sentinel setup without a master name.
    pub fn build(self) -> Result<LockClient> {
        self.assemble().map(|shared| LockClient::of(&shared))
    }

    /// Builds the client and checks that Redis answers as configured
    /// ([`LockClient::ping`]): a misconfigured service fails at start-up,
    /// not at its first lock.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), leasehold::Error> {
    /// let client = leasehold::LockClient::builder("redis://127.0.0.1/")
    ///     .key_prefix("billing:")
    ///     .connect()?; // Redis answered
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`build`](Self::build), then as [`LockClient::ping`].
    pub fn connect(self) -> Result<LockClient> {
        let client = self.build()?;
        client.ping()?;
        Ok(client)
    }
}

impl LockClientBuilder<AsyncLockClient> {
    /// Checks the settings and builds the async client; nothing connects
    /// yet (as [`LockClientBuilder::build`], whose errors it has).
    ///
    /// # Errors
    /// As [`LockClientBuilder::build`].
    pub fn build(self) -> Result<AsyncLockClient> {
        self.assemble()
            .map(|shared| LockClient::of(&shared).to_async())
    }

    /// Builds the async client and checks that Redis answers as configured
    /// ([`AsyncLockClient::ping`], awaited: no thread blocks) — a wrong
    /// address or password fails at start-up, not at the first lock.
    ///
    /// # Errors
    /// As [`build`](Self::build), then as [`AsyncLockClient::ping`].
    pub async fn connect(self) -> Result<AsyncLockClient> {
        let client = self.build()?;
        client.ping().await?;
        Ok(client)
    }
}

impl LockClient {
    /// A client with every default (see [`LockClientBuilder`]).
    ///
    /// # Errors
    /// As [`LockClientBuilder::build`].
    pub fn new(url: &str) -> Result<LockClient> {
        Self::builder(url).build()
    }

    /// A builder to change the defaults.
    pub fn builder(url: &str) -> LockClientBuilder {
        LockClientBuilder::with_url(url)
    }

    /// A builder for a Redis Cluster: `seeds` are URLs of some of its nodes
    /// (any of them; the rest are found with `CLUSTER SLOTS`). Every lock
    /// command goes to the primary serving the lock key's slot — all keys
    /// and channels of one lock share it — following `MOVED` and `ASK`
    /// during resharding; the renewal thread sends one batch per node. Unlock
    /// messages use sharded pub/sub on Redis ≥ 7 (a subscriber per node that
    /// serves a waited-on name, following the slot when it moves), classic
    /// otherwise (one subscriber on any node); see
    /// [`sharded_pubsub`](LockClientBuilder::sharded_pubsub). After a
    /// primary fails over, commands go to the promoted replica, and holds it
    /// did not have are reported lost by the next renewal.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), leasehold::Error> {
    /// let client = leasehold::LockClient::cluster_builder(&[
    ///     "redis://10.0.0.1:7000/",
    ///     "redis://10.0.0.2:7000/",
    /// ])
    /// .build()?;
    /// let _g = client.lock("order:pay")?;
    /// # Ok(()) }
    /// ```
    ///
    /// Every node is reached with the first seed's settings: its password,
    /// and TLS when the seeds are `rediss://` (feature `tls`; the nodes run
    /// `tls-cluster yes`, and `LockClientBuilder::tls_root_certificate`
    /// applies to every node).
    pub fn cluster_builder<S: AsRef<str>>(seeds: &[S]) -> LockClientBuilder {
        LockClientBuilder::with_cluster(seeds)
    }

    /// A builder for a primary managed by Redis Sentinel: `sentinels` are
    /// the Sentinels' URLs (`redis://host:26379/`), `master` the name they
    /// monitor it under. Every new connection — pooled, renewal, subscriber
    /// — asks a Sentinel for the current primary (and checks its `ROLE`),
    /// so after a failover the client follows the new primary: connections
    /// to the old one break (Sentinel kills them; a `READONLY` reply drops
    /// a connection too), waiters ride out the switch like any outage shorter
    /// than the connect timeout, and holds that the new primary does not have
    /// (replication is asynchronous) are reported lost by the next renewal.
    ///
    /// The Sentinels' own password (`requirepass` in their configuration) goes
    /// in their URLs; the primary's password, database and TLS in
    /// [`sentinel_primary_auth`](LockClientBuilder::sentinel_primary_auth),
    /// [`sentinel_primary_db`](LockClientBuilder::sentinel_primary_db) and (feature `tls`)
    /// `sentinel_primary_tls`:
    ///
    /// ```no_run
    /// # fn main() -> Result<(), leasehold::Error> {
    /// let client = leasehold::LockClient::sentinel_builder(
    ///     &["redis://:sentinel-secret@10.0.0.1:26379/", "redis://:sentinel-secret@10.0.0.2:26379/"],
    ///     "mymaster",
    /// )
    /// .sentinel_primary_auth(Some("billing"), "primary-secret")
    /// .sentinel_primary_db(2)
    /// .replicas(1, std::time::Duration::from_millis(500)) // survive a failover
    /// .build()?;
    /// let _g = client.lock("order:pay")?;
    /// # Ok(()) }
    /// ```
    pub fn sentinel_builder<S: AsRef<str>>(sentinels: &[S], master: &str) -> LockClientBuilder {
        LockClientBuilder::with_sentinels(sentinels, master)
    }

    /// A client with every default that has checked Redis answers (see
    /// [`LockClientBuilder::connect`]).
    ///
    /// # Errors
    /// As [`new`](Self::new), then as [`ping`](Self::ping).
    pub fn connect(url: &str) -> Result<LockClient> {
        Self::builder(url).connect()
    }
}

impl AsyncLockClient {
    /// A builder to change the defaults: the same settings as
    /// [`LockClient::builder`]'s, building an [`AsyncLockClient`].
    pub fn builder(url: &str) -> LockClientBuilder<AsyncLockClient> {
        LockClientBuilder::with_url(url)
    }

    /// A builder for a Redis Cluster, as [`LockClient::cluster_builder`].
    pub fn cluster_builder<S: AsRef<str>>(seeds: &[S]) -> LockClientBuilder<AsyncLockClient> {
        LockClientBuilder::with_cluster(seeds)
    }

    /// A builder for a primary managed by Redis Sentinel, as
    /// [`LockClient::sentinel_builder`].
    pub fn sentinel_builder<S: AsRef<str>>(
        sentinels: &[S],
        master: &str,
    ) -> LockClientBuilder<AsyncLockClient> {
        LockClientBuilder::with_sentinels(sentinels, master)
    }

    /// A client with every default that has checked Redis answers, awaited
    /// (the async builder's `connect`, see [`LockClientBuilder`]).
    ///
    /// ```no_run
    /// # async fn start() -> Result<(), leasehold::Error> {
    /// let client = leasehold::AsyncLockClient::connect("redis://127.0.0.1/").await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`LockClient::new`], then as [`ping`](Self::ping).
    pub async fn connect(url: &str) -> Result<AsyncLockClient> {
        Self::builder(url).connect().await
    }
}

#[cfg(test)]
mod tests;
