//! `LockClient`, its builder, and the acquire path.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use redis::{ConnectionAddr, ConnectionLike, IntoConnectionInfo};

use crate::cluster::Router;
use crate::error::{Error, Result};
use crate::fair::{self, FairAcquire, FairScripts};
use crate::guard::Kind;
use crate::guard::LockGuard;
use crate::local::{self, Enter, LocalLocks, Successor};
use crate::notify::{Notifier, SubscriberTls};
use crate::options::LockOptions;
use crate::raw::{self, Acquire, Fence, Scripts};
use crate::renewal::{LeaseState, Renewer, Stats};
use crate::rwlock::{self, RwAcquire, RwScripts};

/// A handle to a Redis server for taking distributed locks.
///
/// Cheap to clone (an `Arc` inside), `Send + Sync`: build one per process and
/// share it. Each client has a random id; together with a small per-thread
/// number it forms the owner of every lock the client takes, so the same thread
/// can re-enter a lock it holds and no one else can release it.
///
/// ```no_run
/// # fn main() -> Result<(), leasehold::Error> {
/// let client = leasehold::LockClient::new("redis://127.0.0.1/")?;
/// let guard = client.lock("order:pay")?; // blocks until held
/// // … the critical section …
/// guard.unlock()?; // or just drop it
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct LockClient {
    pub(crate) inner: Arc<Inner>,
}

/// What every clone of a client and every guard share.
pub(crate) struct Inner {
    id: uuid::Uuid,
    /// `"<id>:"`, the start of every owner of this client.
    owner_prefix: String,
    pool: NodePool,
    /// Redis Cluster: the slot router and a pool per primary.
    cluster: Option<ClusterPools>,
    scripts: Scripts,
    key_prefix: String,
    watchdog_lease: Duration,
    socket_timeout: Duration,
    notifier: Notifier,
    pub(crate) renewer: Renewer,
    /// Threads of this client queued per lock name (see `local.rs`).
    pub(crate) local: LocalLocks,
    fair: FairScripts,
    rw: RwScripts,
    /// Replicas that must acknowledge every acquire (`WAIT n timeout`).
    pub(crate) replicas: Option<(u32, Duration)>,
    /// Tokens of fenced fair holds by `key\n owner`, with their hold count, so
    /// a reentrant fenced fair hold returns the outer token.
    fair_fences: Mutex<std::collections::HashMap<String, (u64, u32)>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.notifier.close();
    }
}

/// Builds a [`LockClient`]; every setting has a written-down default.
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
#[derive(Clone, Debug)]
#[must_use = "a builder does nothing until build() is called"]
pub struct LockClientBuilder {
    url: String,
    pool_size: u32,
    key_prefix: String,
    watchdog_lease: Duration,
    connect_timeout: Duration,
    socket_timeout: Duration,
    replicas: Option<(u32, Duration)>,
    /// Sentinel URLs and the master name, for a Sentinel-managed primary.
    sentinel: Option<(Vec<String>, String)>,
    /// Seed node URLs of a Redis Cluster.
    cluster: Option<Vec<String>>,
    #[cfg(feature = "tls")]
    tls_root_cert: Option<Vec<u8>>,
}

impl LockClientBuilder {
    /// For `rediss://` URLs (feature `tls`): trust this root certificate
    /// (PEM) instead of the platform's trust store — for a server whose
    /// certificate your own CA signed. Unset by default.
    #[cfg(feature = "tls")]
    pub fn tls_root_certificate(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.tls_root_cert = Some(pem.into());
        self
    }

    /// Most pooled connections open at once; each lock or unlock holds one
    /// only for its round trip. Defaults to 16.
    pub fn pool_size(mut self, size: u32) -> Self {
        self.pool_size = size;
        self
    }

    /// A prefix put before every lock name to form the Redis key (e.g.
    /// `"billing:"`). Defaults to none: the key is the name, as in Redisson.
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.key_prefix = prefix.into();
        self
    }

    /// The lease of locks taken without an explicit one, renewed every third
    /// of it while the guard lives. Defaults to 30 s (Redisson's
    /// `lockWatchdogTimeout`).
    ///
    /// A renewal that fails with less than two socket timeouts of the lease
    /// left makes the lease lost at once (the client could not learn in time
    /// whether another try went through), so keep the lease well above twice
    /// the [socket timeout](Self::socket_timeout): with the defaults, a
    /// renewal may fail twice before anything is lost.
    pub fn watchdog_lease(mut self, lease: Duration) -> Self {
        self.watchdog_lease = lease;
        self
    }

    /// How long to wait for a new connection to Redis, and for a pooled one
    /// when all are busy. Defaults to 5 s.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Require `replicas` replicas of the primary to acknowledge every
    /// acquire within `timeout` (Redisson's `checkLockSyncedSlaves`): right
    /// after the acquire script, `WAIT replicas timeout` runs on the same
    /// connection. Fewer acknowledgements → the hold is undone
    /// (owner-checked) and the call fails with [`Error::NotReplicated`]; it
    /// is not retried, since a replica that is down stays down for a while.
    ///
    /// This narrows, not closes, the window in which a failover loses a lock
    /// (replication stays asynchronous: an acknowledged write can still be
    /// lost if the primary and that replica fail together). Costs one round
    /// trip per acquire, and threads of the client no longer hand the lock
    /// to each other inside the release script (every acquire must be
    /// acknowledged). `timeout` must be below the
    /// [socket timeout](Self::socket_timeout). Off by default.
    pub fn replicas(mut self, replicas: u32, timeout: Duration) -> Self {
        self.replicas = Some((replicas, timeout));
        self
    }

    /// How long one Redis reply may take before the call fails with a timeout
    /// error; it also bounds how long a guard's `Drop` can block when Redis is
    /// unreachable. Defaults to 3 s.
    pub fn socket_timeout(mut self, timeout: Duration) -> Self {
        self.socket_timeout = timeout;
        self
    }

    /// The subscriber's TLS configuration for a `rediss://` URL; refuses TLS
    /// without the `tls` feature and `#insecure` (unverified) TLS.
    fn tls(&self, info: &redis::ConnectionInfo) -> Result<SubscriberTls> {
        let ConnectionAddr::TcpTls { insecure, .. } = info.addr() else {
            return Ok(None);
        };
        if *insecure {
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

    /// The `redis` crate client for pooled and renewal connections.
    fn redis_client(&self, info: redis::ConnectionInfo) -> Result<redis::Client> {
        let invalid = |e| Error::InvalidUrl {
            reason: format!("cannot use {:?}", redact(&self.url)),
            source: Some(e),
        };
        #[cfg(feature = "tls")]
        if let Some(pem) = &self.tls_root_cert {
            if matches!(info.addr(), ConnectionAddr::TcpTls { .. }) {
                let certs = redis::TlsCertificates {
                    client_tls: None,
                    root_cert: Some(pem.clone()),
                };
                return redis::Client::build_with_tls(info, certs).map_err(invalid);
            }
        }
        redis::Client::open(info).map_err(invalid)
    }

    /// Checks the settings and builds the client. Nothing connects yet: the
    /// first lock opens the first connection.
    ///
    /// # Errors
    /// [`Error::InvalidUrl`] for a URL the `redis` crate cannot parse, a
    /// `rediss://` (TLS) URL without the `tls` feature, or unverified TLS
    /// (`#insecure`);
    /// [`Error::InvalidArgument`] for a zero pool size, lease or timeout, or
    /// a watchdog lease above [`MAX_LEASE`].
    pub fn build(self) -> Result<LockClient> {
        if self.pool_size == 0 {
            return Err(Error::invalid("pool size must be at least 1"));
        }
        for (what, d) in [
            ("watchdog lease", self.watchdog_lease),
            ("connect timeout", self.connect_timeout),
            ("socket timeout", self.socket_timeout),
        ] {
            if d.is_zero() {
                return Err(Error::invalid(format!("{what} must be greater than zero")));
            }
        }
        if let Some((n, timeout)) = self.replicas {
            if n == 0 || timeout.is_zero() {
                return Err(Error::invalid(
                    "replica acknowledgement needs at least 1 replica and a timeout above zero",
                ));
            }
            if timeout >= self.socket_timeout {
                return Err(Error::invalid(format_args!(
                    "the replica acknowledgement timeout ({timeout:?}) must be below the socket timeout ({:?}), or the WAIT reply times out first",
                    self.socket_timeout
                )));
            }
        }
        if self.watchdog_lease > MAX_LEASE {
            return Err(Error::invalid(format_args!(
                "watchdog lease must be at most {MAX_LEASE:?}"
            )));
        }
        #[cfg(not(feature = "tls"))]
        if self.url.starts_with("rediss://") {
            return Err(Error::InvalidUrl {
                reason: "TLS (rediss://) needs leasehold's `tls` cargo feature".into(),
                source: None,
            });
        }
        let info = self
            .url
            .as_str()
            .into_connection_info()
            .map_err(|e| Error::InvalidUrl {
                reason: format!("cannot parse {:?}", redact(&self.url)),
                source: Some(e),
            })?;
        let tls = self.tls(&info)?;
        let tcp = redis::io::tcp::TcpSettings::default().set_nodelay(true);
        let info = info.set_tcp_settings(tcp.clone());
        let id = uuid::Uuid::new_v4();
        let target = Arc::new(match (&self.sentinel, &self.cluster) {
            (_, Some(urls)) => {
                if urls.is_empty() || urls.iter().any(|u| u.starts_with("rediss://")) {
                    return Err(Error::InvalidUrl {
                        reason: "a cluster needs at least one redis:// seed URL (no TLS yet)"
                            .into(),
                        source: None,
                    });
                }
                let seeds = urls
                    .iter()
                    .map(|u| {
                        u.as_str()
                            .into_connection_info()
                            .map(|i| i.set_tcp_settings(tcp.clone()))
                            .map_err(|e| Error::InvalidUrl {
                                reason: format!("cannot parse the seed {:?}", redact(u)),
                                source: Some(e),
                            })
                    })
                    .collect::<Result<Vec<_>>>()?;
                Target::Cluster(Arc::new(Router::new(
                    seeds,
                    self.connect_timeout,
                    self.socket_timeout,
                )))
            }
            (None, None) => Target::Fixed(self.redis_client(info.clone())?),
            (Some((urls, master)), None) => {
                if urls.is_empty() || urls.iter().any(|u| u.starts_with("rediss://")) {
                    return Err(Error::InvalidUrl {
                        reason: "Sentinel needs at least one redis:// Sentinel URL (no TLS yet)"
                            .into(),
                        source: None,
                    });
                }
                let client = redis::sentinel::SentinelClient::build(
                    urls.clone(),
                    master.clone(),
                    None,
                    redis::sentinel::SentinelServerType::Master,
                )
                .map_err(|e| Error::InvalidUrl {
                    reason: format!("cannot use the Sentinel URLs {:?}", redact(&urls.join(" "))),
                    source: Some(e),
                })?;
                Target::Sentinel(Mutex::new(client))
            }
        });
        let notifier = Notifier::new(
            &info,
            format!("leasehold-notify-{}", short_id(&id)),
            self.connect_timeout,
            self.socket_timeout,
            tls,
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
            let (target, socket) = (Arc::clone(&target), self.socket_timeout);
            let connect = self.connect_timeout.min(socket);
            let connector = Box::new(move || {
                let con = target.client()?.get_connection_with_timeout(connect)?;
                con.set_read_timeout(Some(socket))?;
                con.set_write_timeout(Some(socket))?;
                Ok(con)
            });
            // Renew up to a thirtieth of the lease early to batch more.
            Renewer::start(connector, self.watchdog_lease / 30, socket, router)
                .map_err(|source| Error::Thread { source })?
        };
        let cluster = match &*target {
            Target::Cluster(router) => Some(ClusterPools {
                router: Arc::clone(router),
                pools: Mutex::new(HashMap::new()),
                pool_size: self.pool_size,
                connect_timeout: self.connect_timeout,
                socket_timeout: self.socket_timeout,
            }),
            _ => None,
        };
        let pool = NodePool::new(
            target,
            self.pool_size,
            self.connect_timeout,
            self.socket_timeout,
        );
        Ok(LockClient {
            inner: Arc::new(Inner {
                id,
                owner_prefix: format!("{id}:"),
                pool,
                cluster,
                scripts: Scripts::new(),
                key_prefix: self.key_prefix,
                watchdog_lease: self.watchdog_lease,
                socket_timeout: self.socket_timeout,
                notifier,
                renewer,
                local: LocalLocks::default(),
                fair: FairScripts::new(),
                rw: RwScripts::new(),
                replicas: self.replicas,
                fair_fences: Mutex::new(std::collections::HashMap::new()),
            }),
        })
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
        LockClientBuilder {
            url: url.to_owned(),
            pool_size: 16,
            key_prefix: String::new(),
            watchdog_lease: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(5),
            socket_timeout: Duration::from_secs(3),
            replicas: None,
            sentinel: None,
            cluster: None,
            #[cfg(feature = "tls")]
            tls_root_cert: None,
        }
    }

    /// A builder for a Redis Cluster: `seeds` are URLs of some of its nodes
    /// (any of them; the rest are found with `CLUSTER SLOTS`). Every lock
    /// command goes to the primary serving the lock key's slot — all keys
    /// and channels of one lock share it — following `MOVED` and `ASK`
    /// during resharding; the renewal thread sends one batch per node; the
    /// subscriber listens on any node (classic pub/sub reaches all). After a
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
    /// Every node is reached with the first seed's settings (password, TLS
    /// off); no TLS in cluster mode yet.
    pub fn cluster_builder<S: AsRef<str>>(seeds: &[S]) -> LockClientBuilder {
        let urls: Vec<String> = seeds.iter().map(|s| s.as_ref().to_owned()).collect();
        let mut builder = Self::builder(urls.first().map_or("", String::as_str));
        builder.cluster = Some(urls);
        builder
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
    /// ```no_run
    /// # fn main() -> Result<(), leasehold::Error> {
    /// let client = leasehold::LockClient::sentinel_builder(
    ///     &["redis://10.0.0.1:26379/", "redis://10.0.0.2:26379/", "redis://10.0.0.3:26379/"],
    ///     "mymaster",
    /// )
    /// .replicas(1, std::time::Duration::from_millis(500)) // survive a failover
    /// .build()?;
    /// let _g = client.lock("order:pay")?;
    /// # Ok(()) }
    /// ```
    ///
    /// The primary must not need a password (Sentinel-side authentication is
    /// taken from the Sentinel URLs only), and no TLS yet.
    pub fn sentinel_builder<S: AsRef<str>>(sentinels: &[S], master: &str) -> LockClientBuilder {
        let urls: Vec<String> = sentinels.iter().map(|s| s.as_ref().to_owned()).collect();
        let mut builder = Self::builder(urls.first().map_or("", String::as_str));
        builder.sentinel = Some((urls, master.to_owned()));
        builder
    }

    /// Takes the lock `name`, waiting as long as it takes.
    ///
    /// The lease is the client's watchdog lease, renewed by the client's
    /// renewal thread while the guard lives. If the calling thread already
    /// holds `name`, this re-enters at once and returns a second guard; the lock
    /// is free only when every guard is gone.
    ///
    /// While the lock is held by someone else the thread parks: it wakes on the
    /// holder's unlock message, or when the holder's lease would have run out,
    /// whichever comes first — it never polls. If Redis goes away while the
    /// thread waits (a restart, a failover), it keeps trying with backoff for
    /// up to the connect timeout before it gives up with the connection
    /// error; pooled connections that died meanwhile are skipped.
    ///
    /// # Errors
    /// Invalid name, Redis unreachable or failing, a non-lock value at the key.
    pub fn lock(&self, name: &str) -> Result<LockGuard> {
        self.lock_with(name, LockOptions::new())
    }

    /// Takes the fair lock `name`: waits in line behind everyone — in this
    /// process or any other — who asked before (see [`LockOptions::fair`]).
    ///
    /// # Errors
    /// As [`lock`](Self::lock).
    pub fn fair_lock(&self, name: &str) -> Result<LockGuard> {
        self.lock_with(name, LockOptions::new().fair())
    }

    /// Like [`fair_lock`](Self::fair_lock), giving up after `wait` (and
    /// leaving the line at once): `None` when the wait ran out.
    ///
    /// # Errors
    /// As [`lock`](Self::lock).
    pub fn try_fair_lock_for(&self, name: &str, wait: Duration) -> Result<Option<LockGuard>> {
        self.try_lock_with(name, LockOptions::new().fair().wait(wait))
    }

    /// Takes the read side of the read/write lock `name`: any number of
    /// threads and processes may read at once; it waits while someone writes
    /// — and while a writer waits, so that readers cannot starve writers
    /// (a thread that already reads, or writes, re-enters at once). The
    /// guard is renewed by the watchdog and reports a lost lease like any
    /// other; dropping it releases this read hold.
    ///
    /// The layout is Redisson's `RReadWriteLock` (see
    /// [`write_lock`](Self::write_lock)), so Java services using Redisson
    /// share the lock.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), leasehold::Error> {
    /// let client = leasehold::LockClient::new("redis://127.0.0.1/")?;
    /// {
    ///     let _r1 = client.read_lock("catalog")?;
    ///     let _r2 = client.read_lock("catalog")?; // readers share
    /// }
    /// let w = client.write_lock("catalog")?;       // alone
    /// let r = client.read_lock("catalog")?;        // a writer may also read
    /// drop(w);                                     // … and keeps reading
    /// # drop(r);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`lock`](Self::lock).
    pub fn read_lock(&self, name: &str) -> Result<LockGuard> {
        self.lock_with(name, LockOptions::new().read())
    }

    /// Takes the write side of the read/write lock `name`: waits until no
    /// one else reads or writes, alone then. While it waits, new readers
    /// wait behind it (readers holding already finish first). Reentrant;
    /// the writer may also take the read lock (a downgrade: release the
    /// write guard and keep reading). The reverse — taking the write lock
    /// while this thread holds the read lock — would wait for itself, and
    /// is refused with [`Error::UpgradeWouldDeadlock`].
    ///
    /// # Errors
    /// As [`lock`](Self::lock), plus [`Error::UpgradeWouldDeadlock`].
    pub fn write_lock(&self, name: &str) -> Result<LockGuard> {
        self.lock_with(name, LockOptions::new().write())
    }

    /// One attempt at the read side of `name`: `None` when someone writes
    /// or a writer waits.
    ///
    /// # Errors
    /// As [`lock`](Self::lock).
    pub fn try_read_lock(&self, name: &str) -> Result<Option<LockGuard>> {
        self.try_lock_with(name, LockOptions::new().read())
    }

    /// One attempt at the write side of `name`: `None` when anyone else
    /// reads or writes.
    ///
    /// # Errors
    /// As [`write_lock`](Self::write_lock).
    pub fn try_write_lock(&self, name: &str) -> Result<Option<LockGuard>> {
        self.try_lock_with(name, LockOptions::new().write())
    }

    /// Like [`read_lock`](Self::read_lock), giving up after `wait`: `None`
    /// when the wait ran out.
    ///
    /// # Errors
    /// As [`lock`](Self::lock).
    pub fn try_read_lock_for(&self, name: &str, wait: Duration) -> Result<Option<LockGuard>> {
        self.try_lock_with(name, LockOptions::new().read().wait(wait))
    }

    /// Like [`write_lock`](Self::write_lock), giving up after `wait` (and
    /// leaving the waiting writers at once): `None` when the wait ran out.
    ///
    /// # Errors
    /// As [`write_lock`](Self::write_lock).
    pub fn try_write_lock_for(&self, name: &str, wait: Duration) -> Result<Option<LockGuard>> {
        self.try_lock_with(name, LockOptions::new().write().wait(wait))
    }

    /// One attempt: the guard if the lock was free (or already ours), `None`
    /// if someone else holds it. When another thread of this client holds the
    /// lock or is already trying for it, the answer is `None` at once, with no
    /// round trip.
    ///
    /// # Errors
    /// As [`lock`](Self::lock).
    pub fn try_lock(&self, name: &str) -> Result<Option<LockGuard>> {
        self.acquire(name, None, false, Some(Instant::now()))
    }

    /// Waits up to `wait` for the lock; `None` if it stayed held.
    ///
    /// # Errors
    /// As [`lock`](Self::lock).
    pub fn try_lock_for(&self, name: &str, wait: Duration) -> Result<Option<LockGuard>> {
        self.acquire(name, None, false, Some(deadline_after(wait)))
    }

    /// Waits until `deadline` for the lock; `None` if it stayed held. A
    /// deadline in the past makes one attempt.
    ///
    /// # Errors
    /// As [`lock`](Self::lock).
    pub fn try_lock_until(&self, name: &str, deadline: Instant) -> Result<Option<LockGuard>> {
        self.acquire(name, None, false, Some(deadline))
    }

    /// Takes the lock with options: an explicit lease, a bounded wait.
    ///
    /// With [`LockOptions::wait`] set, gives up when the wait runs out and
    /// returns [`Error::WaitTimedOut`]; without it, waits as long as it takes.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), leasehold::Error> {
    /// use std::time::Duration;
    /// use leasehold::LockOptions;
    /// let client = leasehold::LockClient::new("redis://127.0.0.1/")?;
    /// let opts = LockOptions::new()
    ///     .lease(Duration::from_secs(10))
    ///     .wait(Duration::from_secs(2));
    /// match client.lock_with("report:nightly", opts) {
    ///     Ok(_guard) => { /* at most 10 s of work */ }
    ///     Err(e) if e.is_wait_timeout() => { /* someone else is on it */ }
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`lock`](Self::lock), plus [`Error::WaitTimedOut`] and a zero lease.
    pub fn lock_with(&self, name: &str, options: LockOptions) -> Result<LockGuard> {
        let deadline = options.wait_value().map(deadline_after);
        match self.acquire_as(
            name,
            options.lease_value(),
            options.is_fenced(),
            options.kind_value(),
            deadline,
        )? {
            Some(guard) => Ok(guard),
            None => Err(Error::WaitTimedOut {
                name: name.to_owned(),
                waited: options.wait_value().unwrap_or_default(),
            }),
        }
    }

    /// Like [`lock_with`](Self::lock_with) but returns `None` when the wait
    /// runs out; without [`LockOptions::wait`] it makes one attempt.
    ///
    /// # Errors
    /// As [`lock`](Self::lock), plus a zero lease.
    pub fn try_lock_with(&self, name: &str, options: LockOptions) -> Result<Option<LockGuard>> {
        let deadline = deadline_after(options.wait_value().unwrap_or_default());
        self.acquire_as(
            name,
            options.lease_value(),
            options.is_fenced(),
            options.kind_value(),
            Some(deadline),
        )
    }

    /// The acquire path: take a place in this client's queue for the name
    /// (threads of one client never race each other at Redis); when it is our
    /// turn attempt; if held elsewhere subscribe (confirmed), attempt again,
    /// then park until woken, the holder's lease or `deadline`.
    fn acquire(
        &self,
        name: &str,
        lease: Option<Duration>,
        fenced: bool,
        deadline: Option<Instant>,
    ) -> Result<Option<LockGuard>> {
        self.acquire_as(name, lease, fenced, Kind::Plain, deadline)
    }

    fn acquire_as(
        &self,
        name: &str,
        lease: Option<Duration>,
        fenced: bool,
        kind: Kind,
        deadline: Option<Instant>,
    ) -> Result<Option<LockGuard>> {
        if name.is_empty() {
            return Err(Error::invalid("lock name must not be empty"));
        }
        if name.len() > MAX_NAME_BYTES {
            return Err(Error::invalid(format_args!(
                "lock name is {} bytes; names longer than {MAX_NAME_BYTES} bytes are refused (hash a long name first)",
                name.len()
            )));
        }
        if lease.is_some_and(|l| l.is_zero()) {
            return Err(Error::invalid(
                "lease must be greater than zero (a zero PEXPIRE would delete the lock at once)",
            ));
        }
        if lease.is_some_and(|l| l > MAX_LEASE) {
            return Err(Error::invalid(format_args!(
                "lease must be at most {MAX_LEASE:?} (100 years); for a lock that never expires use the watchdog (no explicit lease)"
            )));
        }
        let inner = &self.inner;
        let mut key = String::with_capacity(inner.key_prefix.len() + name.len());
        key.push_str(&inner.key_prefix);
        key.push_str(name);
        let owner = inner.owner();
        let watchdog = lease.is_none();
        let lease = lease.unwrap_or(inner.watchdog_lease);
        match kind {
            Kind::Plain => {}
            Kind::Fair => {
                return self.acquire_fair(name, key, owner, lease, watchdog, fenced, deadline)
            }
            Kind::Read | Kind::Write if fenced => {
                return Err(Error::invalid(
                    "fencing tokens are for exclusive locks (plain or fair); a read/write lock has none",
                ))
            }
            Kind::Read | Kind::Write => {
                return self.acquire_rw(name, key, owner, lease, watchdog, kind, deadline)
            }
        }
        let entered = inner.local.enter(&key, &owner, lease, fenced, deadline);
        let mut turn = match entered {
            Enter::Turn(turn) => turn,
            Enter::Granted(sent_at, fence) => {
                let state = self.lease_state(&key, &owner, lease, watchdog, sent_at, None);
                inner.local.holding(&key, &owner, &state, fence);
                let guard = self.guard(name, key, owner, lease, watchdog, state);
                return Ok(Some(guard.with_fence(fence)));
            }
            Enter::TimedOut => return Ok(None),
        };
        if let Some(yield_to) = turn.yield_to.take() {
            // Our release woke other clients: let them take it first, and try
            // after the next unlock message (theirs) or a short bound. Without
            // a subscription yet, subscribe now: our own message came before
            // it, so any message from here on is someone else's release.
            let until = deadline_min(deadline, Instant::now() + local::YIELD_WAIT);
            let seen = match turn.subscription() {
                Some(_) => yield_to.messages,
                None => {
                    let channel = raw::channel_name(&key);
                    let sub = inner.notifier.subscribe(&channel, until);
                    let seen = sub.messages();
                    turn.set_subscription(sub);
                    seen
                }
            };
            if let Some(sub) = turn.subscription() {
                sub.wait_for_message_after(seen, until);
            }
        }
        // Set once an attempt found the lock held: from then on we wait, and a
        // Redis outage shorter than the connect timeout is ridden out.
        let mut waiting = false;
        let mut outage = Outage::default();
        let mut late_replies = 0;
        loop {
            if let Some(sub) = turn.subscription() {
                sub.clear_permits();
            }
            // The lease counts from when the request was sent, not answered.
            let sent_at = Instant::now();
            let fence = match (fenced, turn.fence()) {
                (false, _) => Fence::None,
                (true, Some(_)) => Fence::Keep,
                (true, None) => Fence::Mint,
            };
            let attempt = inner.attempt(&key, &owner, lease, turn.fresh(), fence);
            let (attempt, unacked) = match attempt {
                Ok((a, unacked)) => (Ok(a), unacked),
                Err(e) => (Err(e), None),
            };
            let ttl = match attempt {
                Err(e) if waiting && e.is_transient() => {
                    outage.ride(inner, name, e, deadline, turn.subscription())?;
                    continue;
                }
                Err(e) => return Err(e),
                Ok(Acquire::Acquired { .. }) if sent_at.elapsed() >= lease => {
                    // The reply came after the lease it set had run out: that
                    // is no lock. Undo whatever is left, owner-checked.
                    let round_trip = sent_at.elapsed();
                    late_replies += 1;
                    let _ = inner.release(
                        &key,
                        &owner,
                        lease,
                        Some(inner.socket_timeout),
                        turn.fresh(),
                        None,
                    );
                    if late_replies >= LATE_REPLIES_MAX
                        || deadline.is_some_and(|d| d <= Instant::now())
                    {
                        return Err(Error::LeaseExpiredOnArrival {
                            name: name.to_owned(),
                            lease,
                            round_trip,
                            tries: late_replies,
                        });
                    }
                    continue;
                }
                Ok(Acquire::Acquired { .. }) if unacked.is_some() => {
                    // Too few replicas acknowledged: undo, owner-checked.
                    let _ = inner.release(
                        &key,
                        &owner,
                        lease,
                        Some(inner.socket_timeout),
                        turn.fresh(),
                        None,
                    );
                    return Err(inner.not_replicated(name, unacked));
                }
                Ok(Acquire::Acquired { fence: minted }) => {
                    // A reentrant fenced hold returns the token it already has.
                    let token = minted.or(turn.fence()).filter(|_| fenced);
                    let state = self.lease_state(&key, &owner, lease, watchdog, sent_at, None);
                    turn.acquired(&state, minted);
                    let guard = self.guard(name, key, owner, lease, watchdog, state);
                    return Ok(Some(guard.with_fence(token)));
                }
                Ok(Acquire::HeldElsewhere { ttl }) => ttl,
            };
            waiting = true;
            outage.over();
            let now = Instant::now();
            if deadline.is_some_and(|d| d <= now) {
                return Ok(None);
            }
            // A holder that died without unlocking costs at most its lease:
            // wake when it would have expired (+1 ms for PTTL's rounding).
            let cap = ttl.unwrap_or(inner.watchdog_lease) + Duration::from_millis(1);
            let wake_at = match deadline {
                Some(d) => d.min(now + cap),
                None => now + cap,
            };
            match turn.subscription() {
                // Subscribe first, then retry: an unlock published between our
                // attempt and the confirmation is caught by the retry.
                None => {
                    let channel = raw::channel_name(&key);
                    turn.set_subscription(inner.notifier.subscribe(&channel, wake_at));
                }
                Some(sub) => inner.park(sub, wake_at),
            }
        }
    }

    /// The fair acquire path: every thread queues in Redis itself (no
    /// in-process queue, so the order is the order of asking across all
    /// clients); it waits on its own channel, confirming its place at least
    /// every third of the queue lease, and leaves the queue when it gives up.
    #[allow(clippy::too_many_arguments)]
    fn acquire_fair(
        &self,
        name: &str,
        key: String,
        owner: String,
        lease: Duration,
        watchdog: bool,
        fenced: bool,
        deadline: Option<Instant>,
    ) -> Result<Option<LockGuard>> {
        let inner = &self.inner;
        let mut queued = Leave {
            inner,
            key: &key,
            owner: &owner,
            place: Place::FairQueue,
            armed: false,
        };
        let mut sub: Option<crate::notify::Subscription> = None;
        let mut outage = Outage::default();
        loop {
            if let Some(s) = &sub {
                s.clear_permits();
            }
            let sent_at = Instant::now();
            let attempt = inner.run(&key, |con| {
                let acquired = inner.fair.acquire(con, &key, &owner, lease, fenced)?;
                let unacked = match acquired {
                    FairAcquire::Acquired(_) => inner.unreplicated(con)?,
                    FairAcquire::Queued(_) => None,
                };
                Ok((acquired, unacked))
            });
            // Waiting (queued, subscribed) when Redis went away: ride it out.
            let Some((attempt, unacked)) =
                outage.settle(attempt, sub.as_ref(), inner, name, deadline)?
            else {
                continue;
            };
            let wait = match attempt {
                FairAcquire::Acquired(_) if unacked.is_some() => {
                    queued.armed = false;
                    let _ = inner.release_fair(&key, &owner, lease, Some(inner.socket_timeout));
                    return Err(inner.not_replicated(name, unacked));
                }
                FairAcquire::Acquired(minted) => {
                    queued.armed = false;
                    drop(queued);
                    let fence = minted.map(|token| inner.fair_fence_hold(&key, &owner, token));
                    let state = self.lease_state(&key, &owner, lease, watchdog, sent_at, None);
                    let guard = self.guard(name, key, owner, lease, watchdog, state);
                    return Ok(Some(guard.kind(Kind::Fair).with_fence(fence.flatten())));
                }
                FairAcquire::Queued(wait) => wait,
            };
            queued.armed = true;
            let now = Instant::now();
            if deadline.is_some_and(|d| d <= now) {
                return Ok(None); // `queued` leaves the queue
            }
            // Confirm our place well before it expires; wake earlier on our
            // own unlock message or when the holder's lease would end.
            let cap = wait.unwrap_or(fair::QUEUE_LEASE).min(fair::QUEUE_LEASE / 3)
                + Duration::from_millis(1);
            let wake_at = deadline_min(deadline, now + cap);
            match &sub {
                None => {
                    let channel = fair::waiter_channel(&key, &owner);
                    sub = Some(inner.notifier.subscribe(&channel, wake_at));
                }
                Some(s) => inner.park(s, wake_at),
            }
        }
    }

    /// The read/write acquire path: every thread asks Redis itself (readers
    /// of one client must not queue behind each other); a refused attempt
    /// subscribes to the lock's channel, retries, then parks until an unlock
    /// message or the hint the script gave. A waiting writer confirms its
    /// place among the waiting writers at least every third of
    /// [`rwlock::WRITER_INTENT`] and leaves it when it gives up.
    #[allow(clippy::too_many_arguments)]
    fn acquire_rw(
        &self,
        name: &str,
        key: String,
        owner: String,
        lease: Duration,
        watchdog: bool,
        kind: Kind,
        deadline: Option<Instant>,
    ) -> Result<Option<LockGuard>> {
        let inner = &self.inner;
        let write = kind == Kind::Write;
        let mut waiting_writer = Leave {
            inner,
            key: &key,
            owner: &owner,
            place: Place::WaitingWriters,
            armed: false,
        };
        // Waiters of one client share the channel's wake-up permits, so none
        // of them clears them before its attempt (that would swallow a
        // wake-up meant for another); a stale one costs one attempt more.
        // Wake-all messages are counted, not shared: each waiter wakes on
        // every one that came after its attempt.
        let mut sub: Option<crate::notify::Subscription> = None;
        let mut outage = Outage::default();
        loop {
            // Wake-all messages from here on are news to this attempt.
            let seen = sub.as_ref().map_or(0, |s| s.broadcasts());
            let sent_at = Instant::now();
            let attempt = inner.run(&key, |con| {
                let acquired = if write {
                    inner.rw.write(con, &key, &owner, lease)?
                } else {
                    inner.rw.read(con, &key, &owner, lease)?
                };
                let unacked = match acquired {
                    RwAcquire::Acquired => inner.unreplicated(con)?,
                    _ => None,
                };
                Ok((acquired, unacked))
            });
            // Waiting (subscribed) when Redis went away: ride it out.
            let Some((attempt, unacked)) =
                outage.settle(attempt, sub.as_ref(), inner, name, deadline)?
            else {
                continue;
            };
            let hint = match attempt {
                RwAcquire::Acquired if unacked.is_some() => {
                    waiting_writer.armed = false;
                    let field = if write {
                        rwlock::write_field(&owner)
                    } else {
                        owner.clone()
                    };
                    let _ = inner.release_rw(&key, &field, kind, Some(inner.socket_timeout));
                    return Err(inner.not_replicated(name, unacked));
                }
                RwAcquire::Acquired => {
                    waiting_writer.armed = false;
                    drop(waiting_writer);
                    let (owner, timeouts) = if write {
                        (rwlock::write_field(&owner), None)
                    } else {
                        let prefix = rwlock::timeout_prefix(&key, &owner);
                        (owner, Some(prefix))
                    };
                    let state = self.lease_state(
                        &key,
                        &owner,
                        lease,
                        watchdog,
                        sent_at,
                        timeouts.as_deref(),
                    );
                    let guard = self.guard(name, key, owner, lease, watchdog, state);
                    return Ok(Some(guard.kind(kind)));
                }
                RwAcquire::Upgrade => {
                    return Err(Error::UpgradeWouldDeadlock {
                        name: name.to_owned(),
                    })
                }
                RwAcquire::Wait(hint) => hint,
            };
            waiting_writer.armed = write;
            let now = Instant::now();
            if deadline.is_some_and(|d| d <= now) {
                return Ok(None); // a writer leaves the waiting writers
            }
            let mut cap = hint.unwrap_or(inner.watchdog_lease);
            if write {
                cap = cap.min(rwlock::WRITER_INTENT / 3);
            }
            let wake_at = deadline_min(deadline, now + cap + Duration::from_millis(1));
            match &sub {
                // Subscribe first, then retry: an unlock published between
                // the attempt and the confirmation is caught by the retry.
                None => sub = Some(inner.notifier.subscribe(&rwlock::channel(&key), wake_at)),
                Some(s) => {
                    let parked = &inner.renewer.counters.waiters_parked;
                    parked.fetch_add(1, Ordering::Relaxed);
                    s.wait_until_or_broadcast(seen, wake_at);
                    parked.fetch_sub(1, Ordering::Relaxed);
                }
            }
        }
    }

    /// The lease state of a hold whose request was sent at `sent_at`:
    /// registered with the watchdog, or expiring with its explicit lease.
    fn lease_state(
        &self,
        key: &str,
        owner: &str,
        lease: Duration,
        watchdog: bool,
        sent_at: Instant,
        timeouts: Option<&str>,
    ) -> Arc<LeaseState> {
        if watchdog {
            self.inner
                .renewer
                .register(key, owner, lease, sent_at, timeouts)
        } else {
            LeaseState::new(sent_at + lease)
        }
    }

    fn guard(
        &self,
        name: &str,
        key: String,
        owner: String,
        lease: Duration,
        watchdog: bool,
        state: Arc<LeaseState>,
    ) -> LockGuard {
        LockGuard::new(
            Arc::clone(&self.inner),
            name.to_owned(),
            key,
            owner,
            lease,
            state,
            watchdog,
        )
    }

    /// The lease of locks taken without an explicit lease.
    pub fn watchdog_lease(&self) -> Duration {
        self.inner.watchdog_lease
    }

    /// Counters of this client (shared by its clones) for export to metrics:
    /// live watchdog leases, renewals sent and their round trips, leases lost,
    /// waiters parked and queued, in-process handoffs. Reads atomics only;
    /// never touches the network.
    pub fn stats(&self) -> Stats {
        let mut stats = self.inner.renewer.counters.snapshot();
        let local = &self.inner.local;
        stats.waiters_queued = local.queued.load(Ordering::Relaxed);
        stats.waiters_parked += stats.waiters_queued;
        stats.handoffs = local.handoffs.load(Ordering::Relaxed);
        stats
    }
}

impl fmt::Debug for LockClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockClient")
            .field("id", &format_args!("{}…", short_id(&self.inner.id)))
            .field("key_prefix", &self.inner.key_prefix)
            .field("watchdog_lease", &self.inner.watchdog_lease)
            .field("socket_timeout", &self.inner.socket_timeout)
            .finish_non_exhaustive()
    }
}

impl Inner {
    /// `"<client-uuid>:<thread-n>"`, the hash field Redisson uses.
    fn owner(&self) -> String {
        let mut owner = String::with_capacity(self.owner_prefix.len() + 20);
        owner.push_str(&self.owner_prefix);
        push_decimal(&mut owner, thread_number());
        owner
    }

    /// One acquire script (see [`run`](Self::run)). Sending it twice is
    /// harmless: a first hold is set (not incremented), a reentrant count is
    /// settled by the last local release, a second token is larger.
    /// With it, how many replicas acknowledged when that was too few.
    pub(crate) fn attempt(
        &self,
        key: &str,
        owner: &str,
        lease: Duration,
        fresh: bool,
        fence: Fence,
    ) -> Result<(Acquire, Option<u32>)> {
        self.run(key, |con| {
            let acquired = self.scripts.acquire(con, key, owner, lease, fresh, fence)?;
            let unacked = match acquired {
                Acquire::Acquired { .. } => self.unreplicated(con)?,
                Acquire::HeldElsewhere { .. } => None,
            };
            Ok((acquired, unacked))
        })
    }

    /// After an acquire that took a hold, with replica acknowledgement
    /// required: `WAIT` on the same connection (it waits for this
    /// connection's writes). `Some(acked)` when too few acknowledged.
    fn unreplicated(&self, con: &mut Pooled) -> redis::RedisResult<Option<u32>> {
        let Some((wanted, timeout)) = self.replicas else {
            return Ok(None);
        };
        let acked: i64 = redis::cmd("WAIT")
            .arg(wanted)
            .arg(raw::millis(timeout))
            .query(con)?;
        Ok((acked < i64::from(wanted)).then(|| u32::try_from(acked.max(0)).unwrap_or(0)))
    }

    fn not_replicated(&self, name: &str, acked: Option<u32>) -> Error {
        let (wanted, timeout) = self.replicas.unwrap_or_default();
        Error::NotReplicated {
            name: name.to_owned(),
            acked: acked.unwrap_or(0),
            wanted,
            timeout,
        }
    }

    /// Runs one acquire script on a pooled connection. A pooled connection
    /// that died idle (Redis was restarted, a proxy dropped it) fails on
    /// first use; the script is then sent again on another connection, a few
    /// times at most.
    fn run<T>(
        &self,
        key: &str,
        script: impl FnMut(&mut Pooled) -> redis::RedisResult<T>,
    ) -> Result<T> {
        self.run_waiting(key, None, script)
    }

    /// [`run`](Self::run), waiting at most `pool_wait` for a pooled
    /// connection.
    fn run_waiting<T>(
        &self,
        key: &str,
        pool_wait: Option<Duration>,
        mut script: impl FnMut(&mut Pooled) -> redis::RedisResult<T>,
    ) -> Result<T> {
        let mut tries = 0;
        let mut redirects = 0;
        loop {
            let node = self
                .cluster
                .as_ref()
                .and_then(|c| c.router.node_for(key).ok());
            let mut con = match (self.connection(key, pool_wait), &self.cluster) {
                (Ok(con), _) => con,
                (Err(e), Some(cluster)) if e.is_connection() && redirects < CLUSTER_REDIRECTS => {
                    // Its primary unreachable (failed over?): read the
                    // table again; retry if the slot has a new primary.
                    redirects += 1;
                    let _ = cluster.router.refresh();
                    if cluster.router.node_for(key).ok() == node {
                        return Err(e);
                    }
                    continue;
                }
                (Err(e), _) => return Err(e),
            };
            let e = match script(&mut con) {
                Ok(v) => return Ok(v),
                Err(e) => e,
            };
            if tries < STALE_RETRIES && e.is_io_error() && con.closed() {
                tries += 1;
                tracing::debug!(error = %e, "leasehold: pooled connection was dead; retrying");
                continue;
            }
            let Some(cluster) = &self.cluster else {
                return Err(Error::from_redis(e, key));
            };
            drop(con);
            if redirects >= CLUSTER_REDIRECTS {
                return Err(Error::from_redis(e, key));
            }
            redirects += 1;
            match (e.code(), e.redirect_node()) {
                (Some("MOVED"), Some((node, slot))) => {
                    tracing::debug!(%node, slot, "leasehold: slot moved; following");
                    cluster.router.moved(slot, node);
                }
                (Some("ASK"), Some((node, _))) => {
                    // The slot is being migrated and this key is already
                    // on the target: ASKING, then the command, there.
                    let node: Arc<str> = Arc::from(node);
                    let mut con = cluster.pool(&node)?.get(pool_wait)?;
                    let asked = redis::cmd("ASKING")
                        .query::<()>(&mut *con)
                        .and_then(|()| script(&mut con));
                    match asked {
                        Ok(v) => return Ok(v),
                        Err(e) if e.code() == Some("MOVED") || e.code() == Some("ASK") => {}
                        Err(e) => return Err(Error::from_redis(e, key)),
                    }
                }
                (Some("TRYAGAIN"), _) => {
                    // A multi-key script during a slot migration, its keys
                    // split between the nodes for a moment.
                    std::thread::sleep(Duration::from_millis(10 * redirects as u64));
                }
                (Some("CLUSTERDOWN"), _) => {
                    let _ = cluster.router.refresh();
                    return Err(Error::from_redis(e, key));
                }
                _ if e.is_io_error() || e.is_timeout() || e.is_connection_dropped() => {
                    // The node may be gone (a failover): read the table
                    // again, and try the new primary if there is one.
                    let _ = cluster.router.refresh();
                    if cluster.router.node_for(key).ok() == node {
                        return Err(Error::from_redis(e, key));
                    }
                }
                _ => return Err(Error::from_redis(e, key)),
            }
        }
    }

    /// Runs the release script for one hold of `owner` on `key`.
    pub(crate) fn release(
        &self,
        key: &str,
        owner: &str,
        lease: Duration,
        pool_wait: Option<Duration>,
        last: bool,
        successor: Option<Successor<'_>>,
    ) -> Result<raw::Release> {
        self.run_waiting(key, pool_wait, |con| {
            self.scripts
                .release(con, key, owner, lease, last, successor)
        })
    }

    /// Records one fenced fair hold: a new `token`, or (reentrant, `None`)
    /// one more hold of the token this owner has. Returns the hold's token.
    fn fair_fence_hold(&self, key: &str, owner: &str, token: Option<u64>) -> Option<u64> {
        let mut fences = self.fair_fences.lock();
        let id = format!("{key}\n{owner}");
        match token {
            Some(t) => {
                fences.insert(id, (t, 1));
                Some(t)
            }
            None => fences.get_mut(&id).map(|(t, holds)| {
                *holds += 1;
                *t
            }),
        }
    }

    /// One fenced fair hold of `owner` on `key` ended.
    pub(crate) fn fair_fence_release(&self, key: &str, owner: &str) {
        let mut fences = self.fair_fences.lock();
        let id = format!("{key}\n{owner}");
        if let Some((_, holds)) = fences.get_mut(&id) {
            *holds -= 1;
            if *holds == 0 {
                fences.remove(&id);
            }
        }
    }

    /// Parks a waiter on `sub` until woken or `until`, counted in
    /// `stats().waiters_parked` meanwhile.
    fn park(&self, sub: &crate::notify::Subscription, until: Instant) {
        let parked = &self.renewer.counters.waiters_parked;
        parked.fetch_add(1, Ordering::Relaxed);
        sub.wait_until(until);
        parked.fetch_sub(1, Ordering::Relaxed);
    }

    /// Runs the fair release script for one hold; `None` when not ours.
    pub(crate) fn release_fair(
        &self,
        key: &str,
        owner: &str,
        lease: Duration,
        pool_wait: Option<Duration>,
    ) -> Result<Option<bool>> {
        self.run_waiting(key, pool_wait, |con| {
            self.fair.release(con, key, owner, lease)
        })
    }

    /// Runs the read or write release script for one hold (`owner` is the
    /// hash field: the write field for a write hold); `None` when not ours.
    pub(crate) fn release_rw(
        &self,
        key: &str,
        owner: &str,
        kind: Kind,
        pool_wait: Option<Duration>,
    ) -> Result<Option<bool>> {
        self.run_waiting(key, pool_wait, |con| {
            if kind == Kind::Write {
                self.rw.write_release(con, key, owner)
            } else {
                self.rw.read_release(con, key, owner)
            }
        })
    }

    /// A pooled connection for `key` (in a cluster: to the primary serving
    /// its slot), waiting at most `wait` (default: the connect timeout).
    fn connection(
        &self,
        key: &str,
        wait: Option<Duration>,
    ) -> Result<r2d2::PooledConnection<Manager>> {
        match &self.cluster {
            None => self.pool.get(wait),
            Some(cluster) => {
                let node = cluster
                    .router
                    .node_for(key)
                    .map_err(|e| Error::from_redis(e, key))?;
                cluster.pool(&node)?.get(wait)
            }
        }
    }

    pub(crate) fn socket_timeout(&self) -> Duration {
        self.socket_timeout
    }
}

/// A pool of connections to one server, with the last connect error kept
/// typed (r2d2 itself keeps only its text).
struct NodePool {
    pool: r2d2::Pool<Manager>,
    last_error: Arc<Mutex<Option<(Instant, redis::RedisError)>>>,
}

/// How often a caller waiting for a pooled connection looks whether the
/// pool's attempt to connect failed meanwhile.
const POOL_POLL: Duration = Duration::from_millis(50);

impl NodePool {
    fn new(target: Arc<Target>, size: u32, connect: Duration, socket: Duration) -> Self {
        let last_error = Arc::new(Mutex::new(None));
        let manager = Manager {
            target,
            connect_timeout: connect,
            socket_timeout: socket,
            last_error: Arc::clone(&last_error),
        };
        // No PING on checkout: it would make lock + unlock three round trips.
        // A connection that broke is dropped by `has_broken` when it comes
        // back, and the next command on a stale one fails fast.
        let pool = r2d2::Pool::builder()
            .max_size(size)
            .min_idle(Some(0))
            .test_on_check_out(false)
            .connection_timeout(connect)
            .error_handler(Box::new(r2d2::NopErrorHandler))
            .build_unchecked(manager);
        NodePool { pool, last_error }
    }

    /// A pooled connection, waiting at most `wait` (default: the connect
    /// timeout) — but not longer once an attempt to connect failed after we
    /// started waiting (r2d2 would keep retrying until the timeout): then the
    /// connection error, typed.
    fn get(&self, wait: Option<Duration>) -> Result<r2d2::PooledConnection<Manager>> {
        let wait = wait.unwrap_or_else(|| self.pool.connection_timeout());
        let started = Instant::now();
        let deadline = started + wait;
        loop {
            let slice = deadline
                .saturating_duration_since(Instant::now())
                .min(POOL_POLL);
            let failed_since = || {
                self.last_error
                    .lock()
                    .as_ref()
                    .filter(|(at, _)| *at >= started)
                    .map(|(_, e)| e.clone())
            };
            match self.pool.get_timeout(slice) {
                Ok(con) => return Ok(con),
                Err(e) => {
                    if let Some(cause) = failed_since() {
                        return Err(Error::from(cause));
                    }
                    if Instant::now() >= deadline {
                        return Err(match self.last_error.lock().clone() {
                            Some((_, cause)) => Error::from(cause),
                            None => Error::Pool {
                                message: e.to_string(),
                                timeout: wait,
                            },
                        });
                    }
                }
            }
        }
    }

    fn timeout(&self) -> Duration {
        self.pool.connection_timeout()
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
        let info = self.router.info_for(node).ok_or_else(|| {
            Error::from(crate::cluster::no_node(format!(
                "bad cluster node address {node:?}"
            )))
        })?;
        let client = redis::Client::open(info).map_err(Error::from)?;
        let pool = Arc::new(NodePool::new(
            Arc::new(Target::Fixed(client)),
            self.pool_size,
            self.connect_timeout,
            self.socket_timeout,
        ));
        pools.insert(Arc::clone(node), Arc::clone(&pool));
        Ok(pool)
    }
}

/// `MOVED`/`ASK` redirects one command follows before it gives up.
const CLUSTER_REDIRECTS: u32 = 5;

/// r2d2's manager: connections with socket timeouts, and the last connect
/// error kept typed (r2d2 itself keeps only its text).
struct Manager {
    target: Arc<Target>,
    connect_timeout: Duration,
    socket_timeout: Duration,
    last_error: Arc<Mutex<Option<(Instant, redis::RedisError)>>>,
}

impl r2d2::ManageConnection for Manager {
    type Connection = Pooled;
    type Error = redis::RedisError;

    fn connect(&self) -> Result<Pooled, redis::RedisError> {
        let result = self
            .target
            .client()
            .and_then(|c| c.get_connection_with_timeout(self.connect_timeout))
            .and_then(|con| {
                con.set_read_timeout(Some(self.socket_timeout))?;
                con.set_write_timeout(Some(self.socket_timeout))?;
                Ok(Pooled { con, broken: false })
            });
        *self.last_error.lock() = result.as_ref().err().map(|e| (Instant::now(), e.clone()));
        result
    }

    fn is_valid(&self, con: &mut Pooled) -> Result<(), redis::RedisError> {
        redis::cmd("PING").query(con)
    }

    fn has_broken(&self, con: &mut Pooled) -> bool {
        !con.is_open()
    }
}

/// Where the primary is: one fixed address, or wherever Redis Sentinel says
/// it is right now.
pub(crate) enum Target {
    Fixed(redis::Client),
    Sentinel(Mutex<redis::sentinel::SentinelClient>),
    /// A Redis Cluster: pooled connections go through per-node pools; this
    /// target answers the subscriber with any reachable node.
    Cluster(Arc<Router>),
}

impl Target {
    /// A client for the primary as of now (asking a Sentinel each time:
    /// only new connections call this).
    pub(crate) fn client(&self) -> redis::RedisResult<redis::Client> {
        match self {
            Target::Fixed(client) => Ok(client.clone()),
            Target::Cluster(router) => router.any_node(),
            Target::Sentinel(sentinel) => sentinel.lock().get_client().map_err(|e| {
                // No primary to be had right now (Sentinels unreachable, a
                // failover under way): a connection error, so that waiters
                // ride it out and callers see `is_connection()`.
                redis::RedisError::from(std::io::Error::new(
                    std::io::ErrorKind::NotConnected,
                    format!("no primary from Sentinel: {e}"),
                ))
            }),
        }
    }
}

/// A pooled connection that leaves the pool after a timeout or an I/O
/// error. Its next reply could be a late one to the request it gave up on —
/// or, when the request itself was lost, a reply it would wrongly skip as
/// late — so it is never trusted again.
pub(crate) struct Pooled {
    con: redis::Connection,
    broken: bool,
}

impl Pooled {
    /// Whether the socket itself was found closed (a connection that died
    /// idle: nothing sent on it reached the server).
    fn closed(&self) -> bool {
        !self.con.is_open()
    }

    fn note<T>(&mut self, result: &redis::RedisResult<T>) {
        if let Err(e) = result {
            // READONLY: the server became a replica (a failover); a new
            // connection finds the new primary (through Sentinel).
            if e.is_io_error()
                || e.is_timeout()
                || e.is_connection_dropped()
                || e.code() == Some("READONLY")
            {
                self.broken = true;
            }
        }
    }
}

impl redis::ConnectionLike for Pooled {
    fn req_packed_command(&mut self, cmd: &[u8]) -> redis::RedisResult<redis::Value> {
        let result = self.con.req_packed_command(cmd);
        self.note(&result);
        result
    }

    fn req_packed_commands(
        &mut self,
        cmd: &[u8],
        offset: usize,
        count: usize,
    ) -> redis::RedisResult<Vec<redis::Value>> {
        let result = self.con.req_packed_commands(cmd, offset, count);
        self.note(&result);
        result
    }

    fn get_db(&self) -> i64 {
        self.con.get_db()
    }

    fn check_connection(&mut self) -> bool {
        self.con.check_connection()
    }

    fn is_open(&self) -> bool {
        !self.broken && self.con.is_open()
    }
}

static NEXT_THREAD: AtomicU64 = AtomicU64::new(1);

thread_local! {
    static THREAD_NUMBER: u64 = NEXT_THREAD.fetch_add(1, Ordering::Relaxed);
}

/// A small number, unique in this process, for the calling OS thread.
fn thread_number() -> u64 {
    THREAD_NUMBER.with(|n| *n)
}

/// Appends `n` in decimal without the formatting machinery (hot path).
fn push_decimal(out: &mut String, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    for &d in &digits[i..] {
        out.push(char::from(d));
    }
}

/// The longest lock name accepted, in bytes. Redis would take longer keys,
/// but every lock command carries the name (twice on release, as key and
/// channel); a name this long is a mistake or an attack.
pub const MAX_NAME_BYTES: usize = 64 * 1024;

/// The longest explicit lease accepted (Redis refuses expiry times that
/// overflow its millisecond clock; 100 years is far from that and from any
/// real use).
pub const MAX_LEASE: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// Acquire replies arriving after their lease ran out before we give up.
const LATE_REPLIES_MAX: u32 = 3;

/// A waiter's place in Redis — in a fair lock's queue, or among a
/// read/write lock's waiting writers — left (owner-checked, best effort)
/// when the wait ends without the lock: deadline, error or panic. The
/// waiters behind it (or the readers held back for a writer) go on at once
/// instead of waiting for the place to expire.
struct Leave<'a> {
    inner: &'a Inner,
    key: &'a str,
    owner: &'a str,
    place: Place,
    armed: bool,
}

#[derive(Clone, Copy)]
enum Place {
    FairQueue,
    WaitingWriters,
}

impl Drop for Leave<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let inner = self.inner;
        let left = inner.run_waiting(self.key, Some(inner.socket_timeout), |con| {
            match self.place {
                Place::FairQueue => inner.fair.cancel(con, self.key, self.owner),
                Place::WaitingWriters => inner.rw.cancel_writer(con, self.key, self.owner),
            }
        });
        if let Err(e) = left {
            tracing::debug!(key = %self.key, error = %e, "leasehold: leaving a waiters' place failed; it expires by itself");
        }
    }
}

/// Dead pooled connections an acquire attempt skips before it gives up.
const STALE_RETRIES: u32 = 3;

/// Backoff between attempts while Redis is unreachable during a wait.
const OUTAGE_BACKOFF_MIN: Duration = Duration::from_millis(10);
const OUTAGE_BACKOFF_MAX: Duration = Duration::from_millis(500);

/// A waiter riding out a Redis outage (a restart, a failover): it retries
/// with backoff until Redis is back, its deadline, or the connect timeout of
/// continuous failure — then it gives up with the connection error.
#[derive(Default)]
struct Outage {
    since: Option<Instant>,
}

impl Outage {
    /// After connection error `e` while waiting: waits for the next retry
    /// (on `sub`, so a resubscription wakes it early), or returns `e` when
    /// the outage lasted too long or the deadline comes first.
    fn ride(
        &mut self,
        inner: &Inner,
        name: &str,
        e: Error,
        deadline: Option<Instant>,
        sub: Option<&crate::notify::Subscription>,
    ) -> Result<()> {
        let now = Instant::now();
        let since = *self.since.get_or_insert(now);
        let backoff = (now - since).clamp(OUTAGE_BACKOFF_MIN, OUTAGE_BACKOFF_MAX);
        let retry_at = now + backoff;
        if now - since >= inner.pool.timeout() || deadline.is_some_and(|d| d <= retry_at) {
            return Err(e);
        }
        tracing::debug!(lock = %name, error = %e, "leasehold: redis unreachable while waiting; retrying");
        match sub {
            Some(sub) => {
                sub.wait_until(retry_at);
            }
            None => std::thread::sleep(backoff),
        }
        Ok(())
    }

    /// Redis answered: the outage (if any) is over.
    fn over(&mut self) {
        self.since = None;
    }

    /// An attempt of a waiter subscribed on `sub` (`None`: not waiting yet):
    /// its answer, or `None` after riding out a transient error (try
    /// again), or the error to give up with.
    fn settle<T>(
        &mut self,
        attempt: Result<T>,
        sub: Option<&crate::notify::Subscription>,
        inner: &Inner,
        name: &str,
        deadline: Option<Instant>,
    ) -> Result<Option<T>> {
        match attempt {
            Ok(answer) => {
                self.over();
                Ok(Some(answer))
            }
            Err(e) if sub.is_some() && e.is_transient() => {
                self.ride(inner, name, e, deadline, sub)?;
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }
}

/// The earlier of an optional deadline and `at`.
fn deadline_min(deadline: Option<Instant>, at: Instant) -> Instant {
    deadline.map_or(at, |d| d.min(at))
}

fn deadline_after(wait: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(wait)
        .unwrap_or_else(|| now + Duration::from_secs(100 * 365 * 24 * 3600))
}

/// The first 8 hex digits: enough to tell clients apart in logs, not enough to
/// forge an owner.
pub(crate) fn short_id(id: &uuid::Uuid) -> String {
    id.simple().to_string()[..8].to_owned()
}

/// The URL without its password, for error messages.
fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let creds = &url[scheme + 3..at];
            let user = creds.split(':').next().unwrap_or("");
            format!("{}{}:***{}", &url[..scheme + 3], user, &url[at..])
        }
        _ => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_send_sync<T: Send + Sync + Clone + fmt::Debug + 'static>() {}

    #[test]
    fn client_is_send_sync_clone_debug() {
        assert_send_sync::<LockClient>();
    }

    #[test]
    fn decimal_digits() {
        for n in [0u64, 7, 10, 12345, u64::MAX] {
            let mut s = String::from("x:");
            push_decimal(&mut s, n);
            assert_eq!(s, format!("x:{n}"));
        }
    }

    #[test]
    fn thread_numbers_differ_per_thread_and_stay_fixed() {
        let here = thread_number();
        assert_eq!(here, thread_number());
        let there = std::thread::spawn(thread_number).join().unwrap();
        assert_ne!(here, there);
    }

    #[test]
    fn bad_settings_are_errors_not_panics() {
        let e = LockClient::builder("redis://127.0.0.1/")
            .pool_size(0)
            .build()
            .unwrap_err();
        assert!(e.is_invalid_argument(), "{e}");
        let e = LockClient::builder("redis://127.0.0.1/")
            .watchdog_lease(Duration::ZERO)
            .build()
            .unwrap_err();
        assert!(e.is_invalid_argument(), "{e}");
        let e = LockClient::new("not a url").unwrap_err();
        assert!(matches!(e, Error::InvalidUrl { .. }), "{e:?}");
        // TLS without verifying the server is refused in every build …
        let e = LockClient::new("rediss://127.0.0.1/#insecure").unwrap_err();
        assert!(matches!(e, Error::InvalidUrl { .. }), "{e:?}");
        // … and TLS at all without the `tls` feature.
        #[cfg(not(feature = "tls"))]
        {
            let e = LockClient::new("rediss://127.0.0.1/").unwrap_err();
            assert!(e.to_string().contains("`tls` cargo feature"), "{e}");
        }
        #[cfg(feature = "tls")]
        {
            let e = LockClient::builder("rediss://127.0.0.1/")
                .tls_root_certificate("not a certificate")
                .build()
                .unwrap_err();
            assert!(e.is_invalid_argument(), "{e:?}");
        }
    }

    #[test]
    fn debug_and_errors_hide_secrets() {
        assert_eq!(
            redact("redis://user:hunter2@127.0.0.1:6379/0"),
            "redis://user:***@127.0.0.1:6379/0"
        );
        assert_eq!(redact("redis://127.0.0.1/"), "redis://127.0.0.1/");
        let client = LockClient::new("redis://127.0.0.1/").unwrap();
        let shown = format!("{client:?}");
        assert!(!shown.contains(&client.inner.id.to_string()), "{shown}");
    }

    #[test]
    fn empty_name_and_zero_lease_are_rejected_before_redis() {
        // Port 1 on loopback: nothing listens, but validation comes first.
        let client = LockClient::new("redis://127.0.0.1:1/").unwrap();
        assert!(client.try_lock("").unwrap_err().is_invalid_argument());
        let opts = LockOptions::new().lease(Duration::ZERO);
        assert!(client
            .try_lock_with("x", opts)
            .unwrap_err()
            .is_invalid_argument());
    }
}
