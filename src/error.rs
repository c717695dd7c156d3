//! The one error type of the crate, and the one classification of Redis
//! errors ([`Retry`]): whether a failed command is worth sending again, and
//! how. The wait loop, the renewal thread and the connection pool all decide
//! with it, so they cannot disagree about what is transient.

use std::fmt;

/// A `Result` whose error is [`enum@Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong when taking or releasing a lock.
///
/// Each message says what went wrong and what to do about it; the underlying
/// `redis` or I/O error, where there is one, is kept as [`source()`] and not
/// repeated in the message, so a printed chain shows every cause once. The
/// `Debug` form is the message followed by its causes
/// (`fn main() -> Result<(), Box<dyn std::error::Error>>` prints that).
/// Callers usually decide with the predicates ([`is_not_held`],
/// [`is_timeout`], [`is_connection`], …) rather than by matching variants.
///
/// [`source()`]: std::error::Error::source
/// [`is_not_held`]: Error::is_not_held
/// [`is_timeout`]: Error::is_timeout
/// [`is_connection`]: Error::is_connection
#[derive(thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An argument was rejected before anything was sent to Redis.
    #[error("invalid argument: {reason}")]
    InvalidArgument {
        /// What was wrong with the argument.
        reason: String,
    },

    /// The Redis URL could not be parsed or uses a scheme leasehold cannot serve.
    #[error("invalid redis url: {reason}; use redis://[user:password@]host[:port][/db] or redis+unix:///path")]
    InvalidUrl {
        /// What was wrong with the URL.
        reason: String,
        /// The parse error from the `redis` crate, if it found one.
        #[source]
        source: Option<redis::RedisError>,
    },

    /// The lock was not held by this guard when it tried to release it.
    ///
    /// Its lease ran out (and perhaps someone else took the name since), or the
    /// key was deleted behind its back. Nothing was changed in Redis. Work done
    /// under this guard may have overlapped with another holder.
    #[error("lock {name:?} was no longer held by this owner (its lease expired or the key was removed); nothing was released")]
    NotHeld {
        /// The lock name as the caller gave it.
        name: String,
    },

    /// The wait was cancelled through the [`Cancel`](crate::Cancel) handle
    /// given in its [`LockOptions`](crate::LockOptions): nothing is held, and
    /// the waiter's places in Redis (the line, the fair queue, the waiting
    /// writers) were left.
    #[error("the wait for lock {name:?} was cancelled; nothing is held")]
    Cancelled {
        /// The lock name as the caller gave it.
        name: String,
    },

    /// The calling thread asked for the write side of a read/write lock
    /// while it holds the read side: the write lock waits for all readers,
    /// this thread included, so it would wait forever (Redisson hangs here).
    /// Nothing was changed in Redis.
    #[error("this thread holds the read lock {name:?} and asked for its write lock, which would wait for itself forever; drop the read guard first (a writer may take the read lock, not the reverse)")]
    UpgradeWouldDeadlock {
        /// The lock name as the caller gave it.
        name: String,
    },

    /// The lock was taken, but fewer replicas than required acknowledged it
    /// in time ([`LockClientBuilder::replicas`](crate::LockClientBuilder::replicas));
    /// the hold was undone. A failover now could lose the lock.
    #[error("lock {name:?} was taken but only {acked} of {wanted} replicas acknowledged it within {timeout:?}, so it was released again; check the replicas (INFO replication) or require fewer")]
    NotReplicated {
        /// The lock name as the caller gave it.
        name: String,
        /// Replicas that acknowledged.
        acked: u32,
        /// Replicas required.
        wanted: u32,
        /// How long we waited for them.
        timeout: std::time::Duration,
    },

    /// A Redlock could not reach enough nodes to decide: fewer than a
    /// majority answered at all (neither "yours" nor "held by another").
    #[error("lock {name:?} (Redlock): only {acquired} of {nodes} nodes granted it and too few answered to decide ({needed} needed); check that a majority of the nodes is up and reachable")]
    NoQuorum {
        /// The lock name as the caller gave it.
        name: String,
        /// Nodes that granted it in the last attempt (released again).
        acquired: usize,
        /// The majority needed.
        needed: usize,
        /// All nodes.
        nodes: usize,
        /// The first node error of the last attempt.
        #[source]
        first_error: Option<Box<Error>>,
    },

    /// The lock stayed held by someone else for the whole wait
    /// ([`LockOptions::wait`](crate::LockOptions::wait) with `lock_with`).
    #[error("lock {name:?} stayed held by another owner for the whole wait of {waited:?}; retry later or wait longer")]
    WaitTimedOut {
        /// The lock name as the caller gave it.
        name: String,
        /// How long we waited.
        waited: std::time::Duration,
    },

    /// Each reply to the acquire came back only after the lease it set had
    /// run out (a slow network, a paused process), so no guard was handed
    /// out: it would have been a lock no longer held. Whatever the acquire
    /// left in Redis was released, owner-checked.
    #[error("lock {name:?}: the reply to the acquire came {round_trip:?} after it was sent, past the lease of {lease:?}, {tries} times; use a longer lease")]
    LeaseExpiredOnArrival {
        /// The lock name as the caller gave it.
        name: String,
        /// The lease asked for.
        lease: std::time::Duration,
        /// The last round trip.
        round_trip: std::time::Duration,
        /// How many replies arrived too late.
        tries: u32,
    },

    /// The lock key exists in Redis but is not a hash, so it is not a lock.
    #[error("key {key:?} holds a value that is not a lock hash (WRONGTYPE); choose another lock name or a key prefix")]
    WrongType {
        /// The full Redis key (after the client's key prefix).
        key: String,
        /// The server's error.
        #[source]
        source: redis::RedisError,
    },

    /// Redis refused our credentials.
    #[error("redis rejected the credentials: check the user name and password in the redis url (with Sentinel: the Sentinels' in their URLs, the primary's in sentinel_primary_auth)")]
    Auth {
        /// The server's error.
        #[source]
        source: redis::RedisError,
    },

    /// The Redis user may not run the commands a lock needs (`NOPERM`).
    #[error("the redis user may not run the lock commands or use their keys and channels (NOPERM); grant it (ACL SETUSER <user> …): {rules}")]
    NoPermission {
        /// The ACL rules leasehold needs, space-separated, for this client's
        /// key prefix (the same as [`LockClient::acl_rules`](crate::LockClient::acl_rules)).
        rules: String,
        /// The server's error.
        #[source]
        source: redis::RedisError,
    },

    /// The server is a read-only replica (`READONLY`).
    #[error("the redis server is a read-only replica: point leasehold at the primary")]
    ReadOnlyReplica {
        /// The server's error.
        #[source]
        source: redis::RedisError,
    },

    /// Redis is at `maxmemory` and refuses writes (`OOM`).
    #[error("redis is out of memory (maxmemory reached, no eviction) and refuses to write the lock; free memory or raise maxmemory")]
    OutOfMemory {
        /// The server's error.
        #[source]
        source: redis::RedisError,
    },

    /// No connection could be had from the pool within the connect timeout.
    #[error("could not get a redis connection within {timeout:?}: {message}; check that redis is running and reachable, or raise the connect timeout")]
    Pool {
        /// The last error r2d2 saw while connecting (r2d2 keeps only its text).
        message: String,
        /// How long we waited.
        timeout: std::time::Duration,
    },

    /// Redis did not answer within the socket timeout.
    #[error("redis did not answer within the socket timeout of {timeout:?}: it is overloaded, paused or unreachable; check it, or raise LockClientBuilder::socket_timeout")]
    TimedOut {
        /// The socket timeout that ran out.
        timeout: std::time::Duration,
        /// The I/O error from the `redis` crate.
        #[source]
        source: redis::RedisError,
    },

    /// Connecting to Redis, or talking to it, failed.
    #[error("redis connection failed; check that redis is running and reachable")]
    Connection {
        /// The I/O error from the `redis` crate.
        #[source]
        source: redis::RedisError,
    },

    /// A background thread (renewal) could not be started.
    #[error("could not start a leasehold background thread; the process may be out of threads or memory")]
    Thread {
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },

    /// Redis answered with an error leasehold does not classify further.
    #[error("redis answered the lock command with an error")]
    Redis {
        /// The error from the `redis` crate.
        #[source]
        source: redis::RedisError,
    },
}

impl Error {
    /// True when a guard tried to release or extend a lock it no longer held.
    pub fn is_not_held(&self) -> bool {
        matches!(self, Error::NotHeld { .. })
    }

    /// True when the wait was cancelled through its [`Cancel`](crate::Cancel)
    /// handle.
    pub fn is_cancelled(&self) -> bool {
        matches!(self, Error::Cancelled { .. })
    }

    /// True when `lock_with` gave up because the lock stayed held for the
    /// whole wait.
    pub fn is_wait_timeout(&self) -> bool {
        matches!(self, Error::WaitTimedOut { .. })
    }

    /// True for every kind of running out of time: Redis did not answer
    /// within the socket timeout ([`Error::TimedOut`]), no pooled connection
    /// could be had in time, the acquire replies kept arriving after the
    /// lease had run out, or the lock stayed held for a whole bounded wait
    /// ([`Error::WaitTimedOut`]; [`is_wait_timeout`](Self::is_wait_timeout)
    /// tells that one apart).
    pub fn is_timeout(&self) -> bool {
        match self {
            Error::TimedOut { .. }
            | Error::Pool { .. }
            | Error::LeaseExpiredOnArrival { .. }
            | Error::WaitTimedOut { .. } => true,
            Error::Connection { source } | Error::Redis { source } => source.is_timeout(),
            _ => false,
        }
    }

    /// True when Redis could not be reached, did not answer in time, or the
    /// connection broke; retrying later may succeed.
    pub fn is_connection(&self) -> bool {
        matches!(
            self,
            Error::Pool { .. } | Error::Connection { .. } | Error::TimedOut { .. }
        )
    }

    /// True when the caller passed something leasehold refuses (empty name,
    /// zero lease, bad URL).
    pub fn is_invalid_argument(&self) -> bool {
        matches!(
            self,
            Error::InvalidArgument { .. } | Error::InvalidUrl { .. }
        )
    }

    /// True when the lock key holds a non-hash value (`WRONGTYPE`).
    pub fn is_wrong_type(&self) -> bool {
        matches!(self, Error::WrongType { .. })
    }

    /// True when Redis rejected the credentials.
    pub fn is_auth(&self) -> bool {
        matches!(self, Error::Auth { .. })
    }

    /// True when the server refused the lock's commands as such: the user
    /// lacks permission, the server is a read-only replica, or it is out of
    /// memory. Retrying the same call will not help until that is fixed.
    pub fn is_refused(&self) -> bool {
        matches!(
            self,
            Error::NoPermission { .. } | Error::ReadOnlyReplica { .. } | Error::OutOfMemory { .. }
        )
    }

    /// Whether the command that failed is worth sending again (see
    /// [`Retry`]); what a waiter rides out.
    pub(crate) fn retry(&self) -> Retry {
        match self {
            Error::Pool { .. } => Retry::Reconnect,
            Error::Connection { source }
            | Error::TimedOut { source, .. }
            | Error::Redis { source }
            | Error::ReadOnlyReplica { source } => Retry::of(source),
            _ => Retry::No,
        }
    }

    /// Worth retrying while waiting for a lock (anything but [`Retry::No`]).
    pub(crate) fn is_transient(&self) -> bool {
        self.retry() != Retry::No
    }

    pub(crate) fn invalid(reason: impl fmt::Display) -> Self {
        Error::InvalidArgument {
            reason: reason.to_string(),
        }
    }

    /// A connection error that was the socket timeout running out, told as
    /// such with its length.
    pub(crate) fn with_socket_timeout(self, timeout: std::time::Duration) -> Self {
        match self {
            Error::Connection { source } if source.is_timeout() => {
                Error::TimedOut { timeout, source }
            }
            other => other,
        }
    }

    /// A `NOPERM` names the ACL rules this client needs.
    pub(crate) fn with_acl_rules(self, rules: &[String]) -> Self {
        match self {
            Error::NoPermission { source, .. } => Error::NoPermission {
                rules: rules.join(" "),
                source,
            },
            other => other,
        }
    }

    /// Classifies an error of the `redis` crate met while working on `key`.
    pub(crate) fn from_redis(err: redis::RedisError, key: &str) -> Self {
        if is_wrongtype(&err) {
            return Error::WrongType {
                key: key.to_owned(),
                source: err,
            };
        }
        Error::from(err)
    }
}

/// The message, then each cause in the chain once: what
/// `fn main() -> Result<(), Box<dyn std::error::Error>>` prints. (The
/// `redis` crate's I/O errors name their cause and return it again as their
/// source; a cause already said is not said twice.)
impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut said = self.to_string();
        let mut cause = std::error::Error::source(self);
        while let Some(c) = cause {
            let text = c.to_string();
            if !said.contains(&text) {
                said.push_str(": ");
                said.push_str(&text);
            }
            cause = c.source();
        }
        f.write_str(&said)
    }
}

impl From<redis::RedisError> for Error {
    fn from(err: redis::RedisError) -> Self {
        if is_auth_failure(&err) {
            Error::Auth { source: err }
        } else if has_code(&err, "NOPERM") || is_script_acl_refusal(&err) {
            Error::NoPermission {
                rules: "the rules LockClient::acl_rules() lists".into(),
                source: err,
            }
        } else if has_code(&err, "READONLY") {
            Error::ReadOnlyReplica { source: err }
        } else if has_code(&err, "OOM") {
            Error::OutOfMemory { source: err }
        } else if err.is_io_error()
            || err.is_timeout()
            || err.is_connection_dropped()
            || err.is_connection_refusal()
        {
            Error::Connection { source: err }
        } else {
            Error::Redis { source: err }
        }
    }
}

/// What to do about a Redis error: the one classification the wait loop, the
/// renewal thread and the connection pool share (in the spirit of redis-rs's
/// `RetryMethod`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Retry {
    /// The connection is unusable or points at the wrong server (I/O error,
    /// timeout, dropped, `READONLY` after a failover, `MASTERDOWN`): drop it,
    /// reconnect (through Sentinel, a new cluster table) and send again.
    Reconnect,
    /// A Redis Cluster redirect (`MOVED`, `ASK`): follow it at once.
    Redirect,
    /// The server cannot serve it right now but the connection is fine
    /// (`LOADING`, `BUSY`, `TRYAGAIN`, `CLUSTERDOWN`): send again a little
    /// later.
    Later,
    /// An answer: sending it again will not change it.
    No,
}

impl Retry {
    /// Classifies an error of the `redis` crate.
    pub(crate) fn of(err: &redis::RedisError) -> Retry {
        if err.is_io_error() || err.is_timeout() || err.is_connection_dropped() {
            return Retry::Reconnect;
        }
        if err.is_connection_refusal() {
            return Retry::Reconnect;
        }
        const CODES: [(&str, Retry); 8] = [
            ("READONLY", Retry::Reconnect),
            ("MASTERDOWN", Retry::Reconnect),
            ("MOVED", Retry::Redirect),
            ("ASK", Retry::Redirect),
            ("LOADING", Retry::Later),
            ("BUSY", Retry::Later),
            ("TRYAGAIN", Retry::Later),
            ("CLUSTERDOWN", Retry::Later),
        ];
        CODES
            .iter()
            .find(|(code, _)| has_code(err, code))
            .map_or(Retry::No, |(_, retry)| *retry)
    }
}

fn is_wrongtype(err: &redis::RedisError) -> bool {
    // Inside a script Redis 7 keeps the original code ("WRONGTYPE … script: …");
    // older servers wrap it in an ERR whose text still names it.
    err.code() == Some("WRONGTYPE") || err.detail().is_some_and(|d| d.contains("WRONGTYPE"))
}

/// An ACL refusal of a command a script ran (Redis 7 words it without the
/// NOPERM code: "The user executing the script can't publish to the channel
/// …", "… can't access at least one of the keys …", "… can't run this
/// command …").
fn is_script_acl_refusal(err: &redis::RedisError) -> bool {
    let said = |s: &str| s.contains("user executing the script can't");
    err.detail().is_some_and(said) || said(&err.to_string())
}

/// The error's code, also when a script wrapped it (`ERR … NOPERM …` on
/// older servers).
fn has_code(err: &redis::RedisError, code: &str) -> bool {
    err.code() == Some(code)
        || err
            .detail()
            .is_some_and(|d| d.starts_with(code) || d.contains(&format!(" {code} ")))
}

/// Whether Redis refused our credentials (`WRONGPASS`, `NOAUTH`).
pub(crate) fn is_auth_failure(err: &redis::RedisError) -> bool {
    if err.kind() == redis::ErrorKind::AuthenticationFailed {
        return true;
    }
    matches!(err.code(), Some("WRONGPASS") | Some("NOAUTH"))
        || err
            .detail()
            .is_some_and(|d| d.contains("WRONGPASS") || d.contains("NOAUTH"))
}

/// The URL without its password, for error messages.
pub(crate) fn redact(url: &str) -> String {
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

    fn assert_send_sync_static<T: Send + Sync + 'static>() {}

    #[test]
    fn error_is_send_sync_static() {
        assert_send_sync_static::<Error>();
    }

    #[test]
    fn messages_are_lowercase_without_trailing_period() {
        let errors = [
            Error::invalid("lock name must not be empty"),
            Error::NotHeld { name: "a".into() },
            Error::Cancelled { name: "a".into() },
            Error::UpgradeWouldDeadlock { name: "a".into() },
            Error::NoQuorum {
                name: "a".into(),
                acquired: 1,
                needed: 3,
                nodes: 5,
                first_error: None,
            },
            Error::NotReplicated {
                name: "a".into(),
                acked: 0,
                wanted: 1,
                timeout: std::time::Duration::from_millis(100),
            },
            Error::Pool {
                message: "connection refused".into(),
                timeout: std::time::Duration::from_secs(1),
            },
        ];
        for e in errors {
            let msg = e.to_string();
            assert!(
                msg.chars().next().is_some_and(|c| c.is_lowercase()),
                "{msg}"
            );
            assert!(!msg.ends_with('.'), "{msg}");
        }
    }

    /// An error reply as the `redis` crate parses it off the wire.
    fn server_error(text: &str) -> redis::RedisError {
        redis::parse_redis_value(format!("-{text}\r\n").as_bytes())
            .and_then(redis::Value::extract_error)
            .unwrap_err()
    }

    #[test]
    fn one_classification_of_redis_errors() {
        let io: redis::RedisError =
            std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset").into();
        assert_eq!(Retry::of(&io), Retry::Reconnect);
        for (text, want) in [
            (
                "READONLY You can't write against a read only replica.",
                Retry::Reconnect,
            ),
            ("MASTERDOWN Link with MASTER is down", Retry::Reconnect),
            (
                "LOADING Redis is loading the dataset in memory",
                Retry::Later,
            ),
            ("BUSY Redis is busy running a script", Retry::Later),
            (
                "TRYAGAIN Multiple keys request during rehashing of slot",
                Retry::Later,
            ),
            ("CLUSTERDOWN The cluster is down", Retry::Later),
            ("MOVED 3999 127.0.0.1:6381", Retry::Redirect),
            ("ASK 3999 127.0.0.1:6381", Retry::Redirect),
            ("NOPERM this user has no permissions", Retry::No),
            (
                "WRONGTYPE Operation against a key holding the wrong kind of value",
                Retry::No,
            ),
            ("ERR unknown command", Retry::No),
        ] {
            let e = server_error(text);
            assert_eq!(Retry::of(&e), want, "{text}: {e:?}");
            let typed = Error::from_redis(e, "k");
            assert_eq!(typed.is_transient(), want != Retry::No, "{text}: {typed:?}");
        }
        assert!(!Error::NotHeld { name: "x".into() }.is_transient());
    }

    #[test]
    fn predicates_classify() {
        assert!(Error::NotHeld { name: "x".into() }.is_not_held());
        assert!(Error::invalid("x").is_invalid_argument());
        let io: redis::RedisError =
            std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused").into();
        let e = Error::from(io);
        assert!(e.is_connection(), "{e:?}");
        assert!(!e.is_not_held());
    }
}
