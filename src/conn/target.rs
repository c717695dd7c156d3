//! Where the primary is: one fixed address, wherever Redis Sentinel says it
//! is right now, or any node of a Redis Cluster (for the subscriber).

use std::sync::Arc;

use super::cluster::Router;
use super::sentinel::Sentinels;

/// Where the primary is (see the module docs).
pub(crate) enum Target {
    Fixed(redis::Client),
    Sentinel(Sentinels),
    /// A Redis Cluster: pooled connections go through per-node pools; this
    /// target answers the subscriber with any reachable node.
    Cluster(Arc<Router>),
}

impl Target {
    /// The server as errors name it before a connection was made: its
    /// address, or how Sentinel or the cluster finds it.
    pub(crate) fn describe(&self) -> String {
        match self {
            Target::Fixed(client) => client.get_connection_info().addr().to_string(),
            Target::Sentinel(_) => "the primary Sentinel names".to_owned(),
            Target::Cluster(_) => "a node of the cluster".to_owned(),
        }
    }

    /// The server as errors name it once a connection goes to `addr`.
    pub(crate) fn describe_at(&self, addr: &redis::ConnectionAddr) -> String {
        match self {
            Target::Sentinel(_) => format!("{addr} (the primary Sentinel named)"),
            _ => addr.to_string(),
        }
    }

    /// A client for the primary as of now (asking a Sentinel each time:
    /// only new connections call this).
    pub(crate) fn client(&self) -> redis::RedisResult<redis::Client> {
        match self {
            Target::Fixed(client) => Ok(client.clone()),
            Target::Cluster(router) => router.any_node(),
            Target::Sentinel(sentinel) => sentinel.get_client().map_err(|e| {
                // Refused credentials stay what they are: no waiting fixes them.
                if crate::error::is_auth_failure(&e) {
                    return e;
                }
                // No primary to be had right now (Sentinels unreachable, a
                // failover under way): a connection error, so that waiters
                // ride it out and callers see `is_connection()`.
                super::cluster::no_node(format!("no primary from Sentinel: {e}"))
            }),
        }
    }
}
