//! The one error type of the crate: its variants and their messages, and
//! [`LeaseLost`]. The questions callers ask of it are in `questions`; how
//! an error of the `redis` crate becomes one, and the one classification of
//! Redis errors ([`Retry`]), are in `classify`.

mod classify;
mod questions;

pub(crate) use classify::{
    closed_while_idle, closes_connection, is_auth_failure, not_redis, refused_as_no_primary,
    unasked_bytes, Retry,
};

use std::fmt;

/// A `Result` whose error is [`enum@Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong when taking or releasing a lock.
///
/// Each message says what went wrong and what to do about it; the underlying
/// `redis` or I/O error, where there is one, is kept as [`source()`] and not
/// repeated in the message, so a printed chain shows every cause once. A
/// `redis` error is kept as a [`RedisCause`], leasehold's own type: no
/// variant has a field of the `redis` crate's. The
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
        source: Option<RedisCause>,
    },

    /// The lock was not held by this guard when it tried to release it.
    ///
    /// Its lease ran out (and perhaps someone else took the name since), or the
    /// key was deleted behind its back. Nothing was changed in Redis. Work done
    /// under this guard may have overlapped with another holder.
    #[error("lock {name:?} was no longer held by this owner ({}); nothing was released", not_held_why(.lost))]
    NotHeld {
        /// The lock name as the caller gave it.
        name: String,
        /// Why, when the watchdog found out first (what [`lost`] said):
        /// renewal found the owner gone, or could not reach Redis before the
        /// lease ran out. `None`: the release itself found it gone.
        ///
        /// [`lost`]: crate::LockGuard::lost
        lost: Option<LeaseLost>,
    },

    /// A release (of a lock, permits or a job's lock) did not get through
    /// for now: Redis could not be reached, refused it for the moment
    /// (`LOADING`, `BUSY`, …), or did not answer it (it may have run, or
    /// not yet). Leasehold sends it again in the background (owner-checked,
    /// so it can never release a later holder's lock) until Redis answers
    /// or the lease would have ended — and before this owner's next acquire
    /// of the same lock. The lock is free by then at the latest.
    #[error("the release of lock {name:?} did not get through (redis could not be reached, refused it for now, or did not answer: see the source); it is sent again in the background until redis answers, and the lock is free within {lease_left:?} at the latest (its lease)")]
    ReleasePending {
        /// The lock name as the caller gave it.
        name: String,
        /// What was left of the lease when the release failed: the longest
        /// the lock can stay held by this owner.
        lease_left: std::time::Duration,
        /// Why Redis did not answer.
        #[source]
        source: Box<Error>,
    },

    /// A wait ended without the lock because Redis could not be reached, or
    /// did not answer within the socket timeout, for the last part of it:
    /// until the wait's deadline, or (a wait without one) for longer than a
    /// wait rides out an outage — the connect timeout. Nothing is held and
    /// no waiting place is left (one Redis may still keep is left once it
    /// answers). A last try the deadline cut short, after Redis had
    /// answered the wait, is not an outage: such a wait ends as at its
    /// deadline (`Ok(None)`).
    #[error("lock {name:?}: redis could not be reached or did not answer for the last {outage:?} of the wait, which ended without the lock; nothing is held")]
    Unavailable {
        /// The lock name as the caller gave it.
        name: String,
        /// How long Redis had been failing when the wait ended.
        outage: std::time::Duration,
        /// The last failure.
        #[source]
        source: Box<Error>,
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

    /// A blocking call was made on a thread that runs an async runtime's
    /// tasks where it must not be: one that may wait (`lock`,
    /// `try_lock_for`, a semaphore's `acquire`, …) would stall every task on
    /// that thread for as long as it waits — and for ever when one of those
    /// tasks holds the lock, as it could never run its release; and a guard
    /// owned by the thread (`try_lock`'s, reentrant) would be one hold for
    /// every task on that thread, which would then not exclude each other.
    /// Refused before anything was sent, as tokio's `block_on` and
    /// `reqwest::blocking` refuse. Seen on tokio's runtimes with the `tokio`
    /// feature; `spawn_blocking` and `block_in_place` are not refused, nor a
    /// single attempt for an owned guard (`try_lock_owned_with`).
    #[error("{} {name:?} was asked on a thread that runs an async runtime's tasks: {}; use {instead}, or make the blocking call inside tokio::task::spawn_blocking", blocking(*.thread_owned)[0], blocking(*.thread_owned)[1])]
    BlockingInAsync {
        /// The lock (or semaphore) name as the caller gave it.
        name: String,
        /// Refused because its guard would be owned by the thread (a single
        /// attempt); false: because the call may wait.
        thread_owned: bool,
        /// The async face to use instead.
        instead: &'static str,
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

    /// A key of the lock or semaphore holds a value of another type than
    /// the one leasehold keeps there (`WRONGTYPE`): the key itself, or a key
    /// kept beside it and named after it — its line of waiters
    /// (`leasehold_line:{<key>}`), fair queue, waiting writers, lease
    /// table, token counter. Redis does not say which; `TYPE` on each
    /// tells.
    #[error("key {key:?}, or a key kept beside it and named after it (its line of waiters, fair queue, waiting writers, lease table, token counter), holds a value of another type than leasehold keeps there (WRONGTYPE); delete what another program wrote there, or choose another name or a key prefix")]
    WrongType {
        /// The full Redis key (after the client's key prefix).
        key: String,
        /// The server's error.
        #[source]
        source: RedisCause,
    },

    /// An operator's call (`inspect`, `is_locked`, `force_unlock`) found
    /// something at the key that is not a lock of any kind — an application
    /// hash, a counter, a string — and refused to treat it as one: nothing
    /// was changed.
    #[error("key {key:?} is not a lock: it is {what}; nothing was changed (a lock is a hash whose fields are owners \"<client-uuid>:<n>\" with hold counts)")]
    NotALock {
        /// The full Redis key (after the client's key prefix).
        key: String,
        /// What it is instead (its type, or the field that is no owner).
        what: String,
    },

    /// A semaphore's key holds something that is not a semaphore's count of
    /// permits (an application's hash, list, or a string that is no whole
    /// number): nothing was changed.
    #[error("key {key:?} is not a semaphore: it is {what}; nothing was changed (a semaphore's key holds its count of free permits, a whole number); choose another semaphore name or a key prefix")]
    NotASemaphore {
        /// The Redis key (prefix + name).
        key: String,
        /// What it is instead.
        what: String,
    },

    /// An acquire of a semaphore whose permits were never set (or whose
    /// key was deleted): nothing would ever give it permits, so it does not
    /// wait — whatever its bound. Nothing was changed.
    #[error("semaphore {name:?} has no permits: they were never set (or its key was deleted); set them once with Semaphore::try_set_permits or set_permits before acquiring")]
    NoPermits {
        /// The semaphore name as the caller gave it.
        name: String,
    },

    /// Redis refused our credentials, or needs some and got none (`NOAUTH`;
    /// a long command on a connection that has not authenticated, which
    /// Redis 6.2.6+ and Valkey refuse as `Protocol error: unauthenticated
    /// multibulk length` before reading it).
    #[error("redis{} {}: check the user name and password in the redis url, redis://[user]:password@host[:port]/ (with Sentinel: the Sentinels' in their URLs, the primary's in sentinel_primary_auth)", at(.addr), auth_what(.source))]
    Auth {
        /// The server (`host:port`); empty when not known.
        addr: String,
        /// The server's error.
        #[source]
        source: RedisCause,
    },

    /// The Redis user may not run the commands a lock needs (`NOPERM`).
    #[error("the redis user may not run the lock commands or use their keys and channels (NOPERM); grant it (ACL SETUSER <user> …): {rules}")]
    NoPermission {
        /// The ACL rules leasehold needs, space-separated, for this client's
        /// key prefix (the same as [`LockClient::acl_rules`](crate::LockClient::acl_rules)).
        rules: String,
        /// The server's error.
        #[source]
        source: RedisCause,
    },

    /// The server is a read-only replica (`READONLY`).
    #[error("the redis server is a read-only replica: point leasehold at the primary")]
    ReadOnlyReplica {
        /// The server's error.
        #[source]
        source: RedisCause,
    },

    /// Redis is at `maxmemory` and refuses writes (`OOM`).
    #[error("redis is out of memory (maxmemory reached, no eviction) and refuses to write the lock; free memory or raise maxmemory")]
    OutOfMemory {
        /// The server's error.
        #[source]
        source: RedisCause,
    },

    /// No connection could be had from the pool in time.
    #[error("could not get a connection to redis{} within {timeout:?}: {message}; check that redis is running and reachable there, or raise the connect timeout", at(.addr))]
    Pool {
        /// The server it was for (`host:port`; with Sentinel, how it was
        /// found); empty when not known.
        addr: String,
        /// The last error r2d2 saw while connecting (r2d2 keeps only its text).
        message: String,
        /// How long we waited.
        timeout: std::time::Duration,
    },

    /// Redis did not answer in time: within the socket timeout, or within
    /// what was left before the call's deadline.
    #[error("redis{} did not answer within {timeout:?}{}", at(.addr), timeout_advice(*.by_deadline))]
    TimedOut {
        /// The server (`host:port`); empty when not known.
        addr: String,
        /// How long we waited for the reply.
        timeout: std::time::Duration,
        /// It was the call's deadline (a bounded wait) that ended the wait
        /// for the reply, not the socket timeout.
        by_deadline: bool,
        /// The I/O error from the `redis` crate.
        #[source]
        source: RedisCause,
    },

    /// Connecting to Redis, or talking to it, failed.
    #[error("the connection to redis{} failed; check that redis is running and reachable there", at(.addr))]
    Connection {
        /// The server (`host:port`; with Sentinel, how it was found); empty
        /// when not known.
        addr: String,
        /// The I/O error from the `redis` crate.
        #[source]
        source: RedisCause,
    },

    /// The server answered with something that is not Redis's protocol:
    /// another service listens at the address (an HTTP server, a database),
    /// or a TLS port was reached without TLS.
    #[error("the server{} does not speak the redis protocol (its reply could not be read as redis's); check the url's host and port", at(.addr))]
    NotRedis {
        /// The server (`host:port`); empty when not known.
        addr: String,
        /// The parse error from the `redis` crate.
        #[source]
        source: RedisCause,
    },

    /// A background thread (renewal) could not be started.
    #[error("could not start a leasehold background thread; the process may be out of threads or memory")]
    Thread {
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },

    /// Redis answered with an error leasehold does not classify further.
    #[error("redis answered a leasehold command with an error")]
    Redis {
        /// The error from the `redis` crate.
        #[source]
        source: RedisCause,
    },
}

/// The cause under an [`enum@Error`] that came from the `redis` crate: its
/// message, and its own causes (`source()`: an I/O error, …) — kept behind
/// a type of leasehold's, so a major release of `redis` is not a major
/// release of leasehold. Decide with [`Error`]'s predicates
/// ([`is_timeout`](Error::is_timeout), [`is_auth`](Error::is_auth), …); print
/// it, or walk the chain, for what the server or the socket said.
pub struct RedisCause(pub(crate) redis::RedisError);

impl fmt::Display for RedisCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl fmt::Debug for RedisCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl std::error::Error for RedisCause {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}

impl From<redis::RedisError> for RedisCause {
    fn from(e: redis::RedisError) -> Self {
        RedisCause(e)
    }
}

/// What Redis said of our credentials ([`Error::Auth`]).
fn auth_what(source: &RedisCause) -> &'static str {
    if classify::is_missing_password(&source.0) {
        "requires a password and none was given"
    } else {
        "rejected the credentials"
    }
}

/// What a refused blocking call was, and why it was refused
/// ([`Error::BlockingInAsync`]).
fn blocking(thread_owned: bool) -> [&'static str; 2] {
    if thread_owned {
        [
            "a lock owned by the calling thread on",
            "every task on that thread would share its hold and re-enter it, so they would not exclude each other",
        ]
    } else {
        [
            "a blocking wait for",
            "it would stall every task there, and deadlock if one of them holds the lock",
        ]
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

/// ` at <addr>`, or nothing when the address is not known.
fn at(addr: &str) -> String {
    if addr.is_empty() {
        String::new()
    } else {
        format!(" at {addr}")
    }
}

/// What a timeout's message adds: the advice that helps, by what ended it.
fn timeout_advice(by_deadline: bool) -> &'static str {
    if by_deadline {
        " (all that was left before the call's deadline): it is paused, overloaded or unreachable"
    } else {
        ", the socket timeout: it is overloaded, paused or unreachable; check it, or raise LockClientBuilder::socket_timeout"
    }
}

/// Why a hold was no longer ours, as far as the client knows.
fn not_held_why(lost: &Option<LeaseLost>) -> &'static str {
    match lost {
        Some(LeaseLost::Unreachable) => {
            "its lease was lost: redis could not be reached to renew it before it ran out"
        }
        Some(LeaseLost::NotOurs) => {
            "its lease was lost: renewal found the lock no longer held by this owner"
        }
        None => "its lease expired or the key was removed",
    }
}

/// Why a lease was lost, as told to the guard's holder
/// ([`LockGuard::lost`](crate::LockGuard::lost), [`Error::NotHeld`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LeaseLost {
    /// Redis no longer had our owner in the lock (expired, deleted, taken).
    NotOurs,
    /// Redis could not be reached until the lease had run out.
    Unreachable,
}

impl fmt::Display for LeaseLost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LeaseLost::NotOurs => "redis no longer had this owner in the lock",
            LeaseLost::Unreachable => "redis could not be reached before the lease ran out",
        })
    }
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
mod tests;
