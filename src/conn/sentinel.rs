//! Redis Sentinel's side of connecting: how to reach the primary the
//! Sentinels name (the builder's `sentinel_primary_*` settings), and the
//! lookup of the primary ([`Sentinels`]) built from the Sentinels' URLs and
//! those settings, every question bounded by the client's timeouts. Where
//! the primary is at any moment is [`Target::Sentinel`]'s.
//!
//! [`Target::Sentinel`]: super::Target::Sentinel

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::error::{redact, Error, Result};

/// Sentinel only: how to reach the primary the Sentinels name (their URLs
/// say only how to reach the Sentinels).
#[derive(Clone, Default)]
pub(crate) struct PrimarySettings {
    pub(crate) username: Option<String>,
    pub(crate) password: Option<String>,
    pub(crate) db: Option<i64>,
    pub(crate) tls: bool,
}

impl std::fmt::Debug for PrimarySettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PrimarySettings")
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "***"))
            .field("db", &self.db)
            .field("tls", &self.tls)
            .finish()
    }
}

impl PrimarySettings {
    pub(crate) fn is_set(&self) -> bool {
        self.username.is_some() || self.password.is_some() || self.db.is_some() || self.tls
    }
}

/// The Sentinels as their URLs say (auth from the first URL, all
/// `redis://` or all `rediss://`), and how to reach the primary they name
/// (as `primary` says); both verify TLS against `root_cert` when one is
/// given. Every question is bounded by `connect` and `socket`.
pub(crate) fn client(
    urls: &[String],
    master: &str,
    primary: &PrimarySettings,
    root_cert: Option<&[u8]>,
    tcp: &redis::io::tcp::TcpSettings,
    (connect, socket): (Duration, Duration),
) -> Result<Sentinels> {
    let tls = super::one_scheme(urls, "Sentinel (its Sentinels)")?;
    let infos = urls
        .iter()
        .map(|u| super::parse(u, "the Sentinel URL "))
        .collect::<Result<Vec<_>>>()?;
    let bad = |e: redis::RedisError| Error::InvalidUrl {
        reason: format!("cannot use the Sentinel URLs {:?}", redact(&urls.join(" "))),
        source: Some(e.into()),
    };
    #[cfg(not(feature = "tls"))]
    let _ = (root_cert, tls); // no TLS without the feature (refused before)
                              // Every Sentinel with the first URL's credentials, and nothing else of
                              // it (a database number is the primary's, `sentinel_primary_db`).
    let first = infos[0].redis_settings();
    let mut auth = redis::RedisConnectionInfo::default();
    if let Some(user) = first.username() {
        auth = auth.set_username(user);
    }
    if let Some(password) = first.password() {
        auth = auth.set_password(password);
    }
    let sentinels = infos
        .iter()
        .map(|info| {
            let info = info
                .clone()
                .set_redis_settings(auth.clone())
                .set_tcp_settings(tcp.clone());
            #[cfg(feature = "tls")]
            if let (true, Some(root)) = (tls, root_cert) {
                return redis::Client::build_with_tls(info, certificates(root));
            }
            redis::Client::open(info)
        })
        .collect::<redis::RedisResult<Vec<_>>>()
        .map_err(bad)?;
    let mut redis = redis::RedisConnectionInfo::default();
    if let Some(user) = &primary.username {
        redis = redis.set_username(user);
    }
    if let Some(password) = &primary.password {
        redis = redis.set_password(password);
    }
    if let Some(db) = primary.db {
        redis = redis.set_db(db);
    }
    Ok(Sentinels {
        sentinels,
        master: master.to_owned(),
        redis,
        tcp: tcp.clone(),
        tls: primary.tls,
        root_cert: root_cert.map(<[u8]>::to_vec),
        connect,
        socket,
        first: AtomicUsize::new(0),
    })
}

#[cfg(feature = "tls")]
fn certificates(root: &[u8]) -> redis::TlsCertificates {
    redis::TlsCertificates {
        client_tls: None,
        root_cert: Some(root.to_vec()),
    }
}

/// Where the primary is, as the Sentinels say: each asked in turn
/// (`SENTINEL GET-MASTER-ADDR-BY-NAME`), from the one that answered last,
/// and the primary it names checked (`ROLE`) before it is used. Each
/// connection is bounded by the connect timeout and each reply by the
/// socket timeout, so a Sentinel that stopped answering costs a lookup
/// those at most, and the next one is asked. (The `redis` crate's Sentinel
/// client asks with no timeout: a paused Sentinel held every lookup, the
/// renewal thread's too, forever.)
pub(crate) struct Sentinels {
    sentinels: Vec<redis::Client>,
    master: String,
    /// The primary's credentials and database.
    redis: redis::RedisConnectionInfo,
    tcp: redis::io::tcp::TcpSettings,
    tls: bool,
    /// What TLS is verified against (read only with the `tls` feature).
    #[cfg_attr(not(feature = "tls"), allow(dead_code))]
    root_cert: Option<Vec<u8>>,
    connect: Duration,
    socket: Duration,
    /// The Sentinel that answered last: asked first.
    first: AtomicUsize,
}

impl Sentinels {
    /// A client for the primary as of now. The primary refusing its
    /// credentials ends the lookup at once (no other Sentinel changes it);
    /// a Sentinel refusing them is passed over, as one that does not
    /// answer (its password may be changing). Otherwise the last error
    /// when no Sentinel named a primary that says it is one.
    pub(crate) fn get_client(&self) -> redis::RedisResult<redis::Client> {
        let n = self.sentinels.len();
        let first = self.first.load(Ordering::Relaxed);
        let mut failed = None;
        for at in (0..n).map(|i| (first + i) % n) {
            match self.ask(&self.sentinels[at]) {
                Ok(client) => {
                    self.first.store(at, Ordering::Relaxed);
                    return Ok(client);
                }
                Err(Failed::Primary(e)) if crate::error::is_auth_failure(&e) => return Err(e),
                Err(Failed::Primary(e) | Failed::Sentinel(e)) => failed = Some(e),
            }
        }
        Err(failed.unwrap_or_else(|| no_primary("no Sentinel to ask")))
    }

    /// Asks one Sentinel, then checks the primary it names.
    fn ask(&self, sentinel: &redis::Client) -> Result<redis::Client, Failed> {
        let mut con = self.connection(sentinel).map_err(Failed::Sentinel)?;
        let named: Option<(String, u16)> = redis::cmd("SENTINEL")
            .arg("GET-MASTER-ADDR-BY-NAME")
            .arg(&self.master)
            .query(&mut con)
            .map_err(Failed::Sentinel)?;
        let Some((host, port)) = named else {
            let why = format!("the Sentinel knows no {:?}", self.master);
            return Err(Failed::Sentinel(no_primary(why)));
        };
        let primary = self.primary(host, port).map_err(Failed::Primary)?;
        let role: Vec<redis::Value> = self
            .connection(&primary)
            .and_then(|mut con| redis::cmd("ROLE").query(&mut con))
            .map_err(Failed::Primary)?;
        match role.first() {
            Some(redis::Value::BulkString(r)) if r == b"master" => Ok(primary),
            _ => Err(Failed::Primary(no_primary(
                "the server the Sentinel named is not a primary (a failover under way?)",
            ))),
        }
    }

    /// A connection to `client`, every wait of it bounded: connecting and
    /// its handshake (`CLIENT SETINFO`, `AUTH`) by the connect timeout, but
    /// no longer than a reply may take, as the renewal thread's own
    /// connections (a paused server accepts connections, and answers none).
    fn connection(&self, client: &redis::Client) -> redis::RedisResult<redis::Connection> {
        let con = client.get_connection_with_timeout(self.connect.min(self.socket))?;
        con.set_read_timeout(Some(self.socket))?;
        con.set_write_timeout(Some(self.socket))?;
        Ok(con)
    }

    /// A client for the primary at `host:port`.
    fn primary(&self, host: String, port: u16) -> redis::RedisResult<redis::Client> {
        use redis::IntoConnectionInfo;
        let addr = match self.tls {
            false => redis::ConnectionAddr::Tcp(host, port),
            true => redis::ConnectionAddr::TcpTls {
                host,
                port,
                insecure: false,
                tls_params: None,
            },
        };
        let info = addr
            .into_connection_info()?
            .set_redis_settings(self.redis.clone())
            .set_tcp_settings(self.tcp.clone());
        #[cfg(feature = "tls")]
        if let (true, Some(root)) = (self.tls, &self.root_cert) {
            return redis::Client::build_with_tls(info, certificates(root));
        }
        redis::Client::open(info)
    }
}

/// Where a lookup failed: at the Sentinel, or at the primary it named.
enum Failed {
    Sentinel(redis::RedisError),
    Primary(redis::RedisError),
}

/// No primary to be had from a Sentinel, and why.
fn no_primary(why: impl Into<String>) -> redis::RedisError {
    redis::RedisError::from((redis::ErrorKind::Io, "no primary from Sentinel", why.into()))
}
