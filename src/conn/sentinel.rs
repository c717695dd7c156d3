//! Redis Sentinel's side of connecting: how to reach the primary the
//! Sentinels name (the builder's `sentinel_primary_*` settings), and the
//! `redis` crate's Sentinel client built from the Sentinels' URLs and those
//! settings. Where the primary is at any moment is [`Target::Sentinel`]'s.
//!
//! [`Target::Sentinel`]: super::Target::Sentinel

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

/// The `redis` crate's Sentinel client: the Sentinels as their URLs say
/// (auth from the first URL, all `redis://` or all `rediss://`), the
/// primary as `primary` says; both verify TLS against `root_cert` when
/// one is given.
pub(crate) fn client(
    urls: &[String],
    master: &str,
    primary: &PrimarySettings,
    root_cert: Option<&[u8]>,
    tcp: &redis::io::tcp::TcpSettings,
) -> Result<redis::sentinel::SentinelClient> {
    use redis::sentinel::{SentinelClientBuilder, SentinelServerType};
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
    let mut b = SentinelClientBuilder::new(
        infos.iter().map(|i| i.addr().clone()),
        master,
        SentinelServerType::Master,
    )
    .map_err(bad)?
    .set_client_to_redis_tcp_settings(tcp.clone())
    .set_client_to_sentinel_tcp_settings(tcp.clone());
    let sentinel_auth = infos[0].redis_settings();
    if let Some(user) = sentinel_auth.username() {
        b = b.set_client_to_sentinel_username(user);
    }
    if let Some(password) = sentinel_auth.password() {
        b = b.set_client_to_sentinel_password(password);
    }
    if let Some(user) = &primary.username {
        b = b.set_client_to_redis_username(user);
    }
    if let Some(password) = &primary.password {
        b = b.set_client_to_redis_password(password);
    }
    if let Some(db) = primary.db {
        b = b.set_client_to_redis_db(db);
    }
    #[cfg(feature = "tls")]
    {
        let certs = || redis::TlsCertificates {
            client_tls: None,
            root_cert: root_cert.map(<[u8]>::to_vec),
        };
        if primary.tls {
            b = b.set_client_to_redis_tls_mode(redis::TlsMode::Secure);
            if root_cert.is_some() {
                b = b.set_client_to_redis_certificates(certs());
            }
        }
        if tls && root_cert.is_some() {
            b = b.set_client_to_sentinel_certificates(certs());
        }
    }
    b.build().map_err(bad)
}
