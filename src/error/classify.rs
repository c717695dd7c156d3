//! How an error of the `redis` crate becomes an [`Error`], and the one
//! classification of Redis errors ([`Retry`]): whether a failed command is
//! worth sending again, and how. The wait loop, the renewal thread and the
//! connection pool all decide with it, so they cannot disagree about what
//! is transient. Errors raised inside scripts keep their codes somewhere in
//! the text (older servers wrap them), and a failed pipeline is classified
//! by its first failing command.

use super::Error;

impl From<redis::RedisError> for Error {
    fn from(err: redis::RedisError) -> Self {
        // A pipeline that failed (an operator's reads) is classified by its
        // first failing command, as a single command's error would be.
        let (err, addr) = (first_of_pipeline(err), String::new());
        if is_auth_failure(&err) {
            Error::Auth {
                addr,
                source: err.into(),
            }
        } else if has_code(&err, "NOPERM") || is_script_acl_refusal(&err) {
            Error::NoPermission {
                rules: "the rules LockClient::acl_rules() lists".into(),
                source: err.into(),
            }
        } else if has_code(&err, "READONLY") {
            Error::ReadOnlyReplica { source: err.into() }
        } else if has_code(&err, "OOM") {
            Error::OutOfMemory { source: err.into() }
        } else if is_not_redis(&err) {
            Error::NotRedis {
                addr,
                source: err.into(),
            }
        } else if err.is_io_error()
            || err.is_timeout()
            || err.is_connection_dropped()
            || err.is_connection_refusal()
        {
            Error::Connection {
                addr,
                source: err.into(),
            }
        } else {
            Error::Redis { source: err.into() }
        }
    }
}

/// What our connections make of a reply that is no Redis protocol (see
/// [`not_redis`]): an I/O error (the connection is unusable) saying so. A
/// reply of an unexpected type (a conversion error) is not that.
const NOT_REDIS_REPLY: &str = "the reply is not in the redis protocol";

/// A reply that could not be read as Redis protocol at all, as our
/// connections report it (`Parse` errors of the `redis` crate's parser on
/// the socket; conversion errors of a reply are `Parse` errors too, and are
/// not this).
pub(crate) fn not_redis(e: &redis::RedisError) -> redis::RedisError {
    std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        format!("{NOT_REDIS_REPLY}: {e}"),
    )
    .into()
}

/// Whether a server's error reply (its details, after the code) says it
/// closes the connection after it: Redis does after every `Protocol
/// error` (a request too long for a connection that has not authenticated,
/// bytes that are no command). The connection is not used again.
pub(crate) fn closes_connection(details: Option<&str>) -> bool {
    details.is_some_and(|d| d.starts_with("Protocol error"))
}

/// The error of a connection the server closed while it sat idle (see
/// `Stream::check_quiet`).
pub(crate) fn closed_while_idle() -> std::io::Error {
    let message = "the server closed the connection while it sat idle";
    std::io::Error::new(std::io::ErrorKind::ConnectionAborted, message)
}

/// The error of a connection on which bytes no request asked for waited.
pub(crate) fn unasked_bytes() -> std::io::Error {
    let message = "bytes no request asked for waited on the connection";
    std::io::Error::new(std::io::ErrorKind::InvalidData, message)
}

fn is_not_redis(err: &redis::RedisError) -> bool {
    err.is_io_error() && err.to_string().contains(NOT_REDIS_REPLY)
}

/// A pipeline's error (`Pipeline failure: [(Index 0, error: "NOAUTH" …)]`)
/// as the error of its first failing command; any other error as it is.
fn first_of_pipeline(err: redis::RedisError) -> redis::RedisError {
    if !err.to_string().starts_with("Pipeline failure") {
        return err;
    }
    let first = err.clone().into_server_errors().and_then(|errors| {
        let (_, first) = errors.first()?;
        Some(redis::RedisError::from(first.clone()))
    });
    first.unwrap_or(err)
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
        if err.is_io_error()
            || err.is_timeout()
            || err.is_connection_dropped()
            || err.is_connection_refusal()
        {
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

pub(super) fn is_wrongtype(err: &redis::RedisError) -> bool {
    // Inside a script Redis 7 keeps the original code ("WRONGTYPE … script: …");
    // older servers wrap it in an ERR whose text still names it.
    err.code() == Some("WRONGTYPE") || err.detail().is_some_and(|d| d.contains("WRONGTYPE"))
}

/// An ACL refusal of a command a script ran, which servers word without
/// the NOPERM code: Redis 6.2 and 7 "The user executing the script can't
/// publish to the channel …" ("… can't access at least one of the keys …",
/// "… can't run this command …"), Valkey 8 "ACL failure in script: No
/// permissions to access a channel …".
fn is_script_acl_refusal(err: &redis::RedisError) -> bool {
    let said = |s: &str| {
        s.contains("user executing the script can't") || s.contains("ACL failure in script")
    };
    let valkey = err.code() == Some("ACL")
        && err
            .detail()
            .is_some_and(|d| d.starts_with("failure in script"));
    valkey || err.detail().is_some_and(said) || said(&err.to_string())
}

/// The error's code, also when a script wrapped it: Redis 7 keeps the code
/// (`READONLY … script: …`), Redis 6.2 wraps it in an `ERR Error running
/// script (call to f_…): @user_script:67: -READONLY …`.
/// Whether the server refused a command as no primary (`READONLY`,
/// `MASTERDOWN`, also inside a script's error): it ran nothing.
pub(crate) fn refused_as_no_primary(err: &redis::RedisError) -> bool {
    has_code(err, "READONLY") || has_code(err, "MASTERDOWN")
}

fn has_code(err: &redis::RedisError, code: &str) -> bool {
    err.code() == Some(code)
        || err.detail().is_some_and(|d| {
            d.starts_with(code)
                || d.contains(&format!(" {code} "))
                || d.contains(&format!(": -{code} "))
        })
}

/// Whether Redis refused our credentials (`WRONGPASS`), or needs some and
/// got none ([`is_missing_password`]).
pub(crate) fn is_auth_failure(err: &redis::RedisError) -> bool {
    if err.kind() == redis::ErrorKind::AuthenticationFailed || is_missing_password(err) {
        return true;
    }
    err.code() == Some("WRONGPASS") || err.detail().is_some_and(|d| d.contains("WRONGPASS"))
}

/// Whether Redis needs a password and the connection gave none: `NOAUTH`
/// for a command, or — before it reads a command of more than 10 elements
/// (or a bulk string over 16 KiB) from a connection that has not
/// authenticated — `ERR Protocol error: unauthenticated multibulk length`
/// (`… bulk length`), after which it closes the connection (Redis 6.2.6+,
/// 7.x, Valkey 8). The lock scripts declare every key, so their calls are
/// that long: on a server with a password, a client without one meets
/// this first, not `NOAUTH`.
pub(crate) fn is_missing_password(err: &redis::RedisError) -> bool {
    let said = |s: &str| s.contains("NOAUTH") || s.contains("Protocol error: unauthenticated");
    err.code() == Some("NOAUTH") || err.detail().is_some_and(said) || said(&err.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert!(!Error::NotHeld {
            name: "x".into(),
            lost: None
        }
        .is_transient());
    }

    /// What each server we support says when a command inside a script
    /// fails (texts as Redis 7.0, Valkey 8.1 and Redis 6.2 send them): the
    /// same typed error whichever words it.
    #[test]
    fn errors_raised_inside_scripts_are_typed_on_every_server() {
        let sha = "f_9a4d4e2a0c5e1f3e2b0c8a7d6e5f4a3b2c1d0e9f";
        let read_only: fn(&Error) -> bool = |e| matches!(e, Error::ReadOnlyReplica { .. });
        let oom: fn(&Error) -> bool = |e| matches!(e, Error::OutOfMemory { .. });
        let acl: fn(&Error) -> bool = |e| matches!(e, Error::NoPermission { .. });
        let refused = [
            ("redis 7.0", "READONLY You can't write against a read only replica. script: 9a4d, on @user_script:67.".to_string(), read_only, Retry::Reconnect),
            ("redis 6.2", format!("ERR Error running script (call to {sha}): @user_script:67: -READONLY You can't write against a read only replica."), read_only, Retry::Reconnect),
            ("redis 7.0", "OOM command not allowed when used memory > 'maxmemory'. script: 9a4d, on @user_script:12.".to_string(), oom, Retry::No),
            ("redis 6.2", format!("ERR Error running script (call to {sha}): @user_script:12: -OOM command not allowed when used memory > 'maxmemory'."), oom, Retry::No),
            ("redis 7.0", "ERR The user executing the script can't publish to the channel mentioned in the command script: 9a4d, on @user_script:92.".to_string(), acl, Retry::No),
            ("valkey 8.1", "ACL failure in script: No permissions to access a channel script: db3dcfcabd286023b54807a498289ec29107c466, on @user_script:92.".to_string(), acl, Retry::No),
            ("redis 6.2", format!("ERR Error running script (call to {sha}): @user_script:92: @user_script: 92: The user executing the script can't publish to the channel mentioned in the command"), acl, Retry::No),
            ("redis 6.2 (keys)", format!("ERR Error running script (call to {sha}): @user_script:5: -NOPERM this user has no permissions to access one of the keys used as arguments"), acl, Retry::No),
        ];
        for (server, text, typed, retry) in refused {
            let e = Error::from(server_error(&text));
            assert!(typed(&e), "{server}: {e:?}");
            assert_eq!(Retry::of(&server_error(&text)), retry, "{server}");
        }
        // A word inside a message is not a code.
        let e = Error::from(server_error("ERR value is not READONLYish"));
        assert!(matches!(e, Error::Redis { .. }), "{e:?}");
    }

    /// What servers say to a client without the password (Redis 7.0,
    /// Valkey 8.1 and Redis 6.2 word it alike): an auth error that says a
    /// password is needed, whatever command met it.
    #[test]
    fn a_missing_password_is_an_auth_error_whatever_the_command() {
        for text in [
            "NOAUTH Authentication required.",
            "ERR Protocol error: unauthenticated multibulk length",
            "ERR Protocol error: unauthenticated bulk length",
        ] {
            let e = Error::from(server_error(text));
            assert!(e.is_auth(), "{text}: {e:?}");
            assert!(
                e.to_string()
                    .contains("requires a password and none was given"),
                "{text}: {e}"
            );
            assert_eq!(Retry::of(&server_error(text)), Retry::No, "{text}");
        }
        let wrong = Error::from(server_error(
            "WRONGPASS invalid username-password pair or user is disabled.",
        ));
        assert!(wrong.is_auth(), "{wrong:?}");
        assert!(
            wrong.to_string().contains("rejected the credentials"),
            "{wrong}"
        );
        // Other protocol errors are not about credentials.
        let other = Error::from(server_error("ERR Protocol error: invalid multibulk length"));
        assert!(!other.is_auth(), "{other:?}");
    }

    #[test]
    fn a_reply_that_is_not_redis_protocol_is_said_to_be_so() {
        let e = redis::parse_redis_value(b"HTTP/1.1 400 Bad Request\r\n\r\n").unwrap_err();
        // As the parser says it: a conversion error looks the same, so only
        // what our connection makes of it is `NotRedis`.
        assert!(matches!(Error::from(e.clone()), Error::Redis { .. }));
        let typed = Error::from(not_redis(&e));
        assert!(matches!(typed, Error::NotRedis { .. }), "{typed:?}");
        assert!(!typed.is_transient(), "{typed:?}");
        let named = typed.at("127.0.0.1:8080", None);
        assert!(
            named.to_string().contains("127.0.0.1:8080")
                && named.to_string().contains("redis protocol"),
            "{named}"
        );
    }

    #[test]
    fn predicates_classify() {
        assert!(Error::NotHeld {
            name: "x".into(),
            lost: None
        }
        .is_not_held());
        assert!(Error::invalid("x").is_invalid_argument());
        let io: redis::RedisError =
            std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused").into();
        let e = Error::from(io);
        assert!(e.is_connection(), "{e:?}");
        assert!(!e.is_not_held());
    }
}
