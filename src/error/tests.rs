//! The error type's own checks: `Send + Sync + 'static`, its messages'
//! form, and what each message advises. Compiled only under #[cfg(test)]
//! (see `error/mod.rs`).

use super::*;

fn assert_send_sync_static<T: Send + Sync + 'static>() {}

#[test]
fn error_is_send_sync_static() {
    assert_send_sync_static::<Error>();
}

/// A Redlock wait that gave up at its deadline while a node stayed
/// silent once advised raising the socket timeout (its last round had
/// ended by the node timeout): at a deadline, a timeout is the wait's.
#[test]
fn a_timeout_at_the_deadline_does_not_advise_a_longer_socket_timeout() {
    let io = redis::RedisError::from(std::io::Error::new(
        std::io::ErrorKind::WouldBlock,
        "Resource temporarily unavailable",
    ));
    let by_socket = Error::TimedOut {
        addr: "127.0.0.1:1".into(),
        timeout: std::time::Duration::from_millis(300),
        by_deadline: false,
        source: io.into(),
    };
    assert!(by_socket
        .to_string()
        .contains("raise LockClientBuilder::socket_timeout"));
    let at_deadline = by_socket.at_deadline().to_string();
    assert!(!at_deadline.contains("raise"), "{at_deadline}");
    assert!(at_deadline.contains("deadline"), "{at_deadline}");
}

#[test]
fn messages_are_lowercase_without_trailing_period() {
    let errors = [
        Error::invalid("lock name must not be empty"),
        Error::NotHeld {
            name: "a".into(),
            lost: None,
        },
        Error::NotHeld {
            name: "a".into(),
            lost: Some(LeaseLost::Unreachable),
        },
        Error::NotALock {
            key: "k".into(),
            what: "a string".into(),
        },
        Error::Cancelled { name: "a".into() },
        Error::BlockingInAsync {
            name: "a".into(),
            thread_owned: false,
            instead: "leasehold::AsyncLockClient",
        },
        Error::BlockingInAsync {
            name: "a".into(),
            thread_owned: true,
            instead: "leasehold::AsyncLockClient",
        },
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
            addr: "127.0.0.1:6379".into(),
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
