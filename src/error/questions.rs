//! The questions callers ask of an [`Error`] — the public predicates
//! (`is_timeout()`, `is_auth()`, …) — and the crate's own: whether a failed
//! command is worth sending again, whether it may have run, and the error
//! of a redis error met on a key.

use std::fmt;

use super::classify::is_wrongtype;
use super::{Error, Retry};

impl Error {
    /// This error as the end of a wait whose deadline passed: a reply that
    /// did not come was the wait running out of time (the advice to raise
    /// the socket timeout would not help).
    pub(crate) fn at_deadline(mut self) -> Self {
        if let Error::TimedOut { by_deadline, .. } = &mut self {
            *by_deadline = true;
        }
        self
    }

    /// True when a guard tried to release or extend a lock it no longer held.
    pub fn is_not_held(&self) -> bool {
        matches!(self, Error::NotHeld { .. })
    }

    /// True when the wait was cancelled through its [`Cancel`](crate::Cancel)
    /// handle.
    pub fn is_cancelled(&self) -> bool {
        matches!(self, Error::Cancelled { .. })
    }

    /// True when a blocking call that may wait was refused because it was
    /// made on an async runtime's thread ([`Error::BlockingInAsync`]).
    pub fn is_blocking_in_async(&self) -> bool {
        matches!(self, Error::BlockingInAsync { .. })
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
            Error::Connection { source, .. } | Error::Redis { source } => source.0.is_timeout(),
            Error::Unavailable { source, .. } | Error::ReleasePending { source, .. } => {
                source.is_timeout()
            }
            _ => false,
        }
    }

    /// True when Redis could not be reached, did not answer in time, or the
    /// connection broke ([`Error::Unavailable`] after a wait, and
    /// [`Error::ReleasePending`] included); retrying later may succeed.
    pub fn is_connection(&self) -> bool {
        matches!(
            self,
            Error::Pool { .. }
                | Error::Connection { .. }
                | Error::TimedOut { .. }
                | Error::Unavailable { .. }
                | Error::ReleasePending { .. }
        )
    }

    /// True when a release was sent but not answered, and goes on in the
    /// background ([`Error::ReleasePending`]).
    pub fn is_release_pending(&self) -> bool {
        matches!(self, Error::ReleasePending { .. })
    }

    /// True when the caller passed something leasehold refuses (empty name,
    /// zero lease, bad URL).
    pub fn is_invalid_argument(&self) -> bool {
        matches!(
            self,
            Error::InvalidArgument { .. } | Error::InvalidUrl { .. }
        )
    }

    /// True when the key holds something that is not a lock (or
    /// semaphore): anything not shaped like one met by any call
    /// ([`Error::NotALock`], [`Error::NotASemaphore`]), or a value of the
    /// wrong type (`WRONGTYPE`).
    pub fn is_wrong_type(&self) -> bool {
        matches!(
            self,
            Error::WrongType { .. } | Error::NotALock { .. } | Error::NotASemaphore { .. }
        )
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
            Error::Connection { source, .. }
            | Error::TimedOut { source, .. }
            | Error::Redis { source }
            | Error::ReadOnlyReplica { source } => Retry::of(&source.0),
            _ => Retry::No,
        }
    }

    /// No answer came: the connection broke or the reply timed out — a
    /// command that went out may or may not have run in Redis (whether it
    /// went out, `conn::Connections::run_sent` says).
    pub(crate) fn is_unanswered(&self) -> bool {
        match self {
            Error::TimedOut { .. } => true,
            Error::Connection { source, .. } => !source.0.is_connection_refusal(),
            _ => false,
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

    /// The error as met talking to the server at `addr` (no password in
    /// it): the address named where it is missing, and — when the call's
    /// request went out, `waited` is how long its reply was waited for and
    /// whether the call's deadline (not the socket timeout) decided that —
    /// a connection error that was that wait running out told as
    /// [`Error::TimedOut`] with its length. (A timeout while connecting
    /// stays a connection error.)
    pub(crate) fn at(self, addr: &str, waited: Option<(std::time::Duration, bool)>) -> Self {
        let mut e = match (self, waited) {
            (Error::Connection { addr, source }, Some((timeout, by_deadline)))
                if source.0.is_timeout() =>
            {
                Error::TimedOut {
                    addr,
                    timeout,
                    by_deadline,
                    source,
                }
            }
            (e, _) => e,
        };
        if let Error::Connection { addr: a, .. }
        | Error::Pool { addr: a, .. }
        | Error::NotRedis { addr: a, .. }
        | Error::Auth { addr: a, .. }
        | Error::TimedOut { addr: a, .. } = &mut e
        {
            if a.is_empty() {
                *a = addr.to_owned();
            }
        }
        e
    }

    /// A `NOPERM` names the ACL rules this client needs.
    pub(crate) fn with_acl_rules(mut self, rules: &[String]) -> Self {
        if let Error::NoPermission { rules: r, .. } = &mut self {
            *r = rules.join(" ");
        }
        self
    }

    /// Classifies an error of the `redis` crate met while working on `key`.
    pub(crate) fn from_redis(err: redis::RedisError, key: &str) -> Self {
        if err.code() == Some("NOTASEMAPHORE") {
            return Error::NotASemaphore {
                key: key.to_owned(),
                what: err.detail().unwrap_or("something else").to_owned(),
            };
        }
        if is_wrongtype(&err) {
            return Error::WrongType {
                key: key.to_owned(),
                source: err.into(),
            };
        }
        Error::from(err)
    }
}
