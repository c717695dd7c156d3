//! A server that requires a password, and a client without one: every call
//! of every kind and face reads as an authentication error that says a
//! password is needed — whatever command it was. Redis 7 (and Valkey 8,
//! and Redis 6.2 since 6.2.6) refuse a request of more than 10 elements
//! from a connection that has not authenticated before reading the command
//! (`Protocol error: unauthenticated multibulk length`) and close it; the
//! lock scripts declare every key, so their calls are that long. The
//! server matrix of scripts/test.sh runs this file against Valkey 8.1 and
//! Redis 6.2 too (`LEASEHOLD_REDIS_SERVER`).

mod support;

use std::time::Duration;

use leasehold::{AsyncLockClient, Error, LockClient, LockOptions, Redlock};
use support::RedisServer;

/// `e` is the auth error, and it says that a password is needed.
fn needs_password(what: &str, e: &Error) {
    assert!(e.is_auth(), "{what}: not an auth error: {e} ({e:?})");
    let msg = e.to_string();
    assert!(
        msg.contains("password"),
        "{what}: the message says a password is needed: {msg}"
    );
}

fn err<T>(what: &str, r: leasehold::Result<T>) -> Error {
    match r {
        Err(e) => e,
        Ok(_) => panic!("{what}: succeeded without the password"),
    }
}

/// A client without the password, built without the start-up check (a
/// `LockClient::new`, which connects on first use).
fn client(server: &RedisServer) -> LockClient {
    LockClient::builder(&server.bare_url())
        .socket_timeout(Duration::from_secs(2))
        .build()
        .unwrap()
}

#[test]
fn every_blocking_call_without_the_password_is_an_auth_error() {
    let server = RedisServer::start_with_password("s3cret");
    let c = client(&server);
    let short = Duration::from_millis(300);
    let opts = LockOptions::new().wait(short);
    let cases: Vec<(&str, Error)> = vec![
        ("try_lock", err("try_lock", c.try_lock("a"))),
        ("lock (no bound)", err("lock", c.lock("a"))),
        (
            "semaphore acquire (no bound)",
            err("sem acquire", c.semaphore("s").acquire()),
        ),
        ("lock_with(wait)", err("lock_with", c.lock_with("a", opts))),
        (
            "try_lock_for",
            err("try_lock_for", c.try_lock_for("a", short)),
        ),
        (
            "fenced",
            err("fenced", c.try_lock_with("a", LockOptions::new().fenced())),
        ),
        (
            "owned",
            err("owned", c.try_lock_owned_with("a", LockOptions::new())),
        ),
        ("fair", err("fair", c.try_fair_lock_for("a", short))),
        ("read", err("read", c.try_read_lock_for("a", short))),
        ("write", err("write", c.try_write_lock_for("a", short))),
        (
            "lock_all",
            err("lock_all", c.try_lock_all_for(&["a", "b"], short)),
        ),
        (
            "semaphore try_set_permits",
            err("sem set", c.semaphore("s").try_set_permits(3)),
        ),
        (
            "semaphore available",
            err("sem available", c.semaphore("s").available_permits()),
        ),
        (
            "semaphore try_acquire",
            err("sem try_acquire", c.semaphore("s").try_acquire()),
        ),
        (
            "semaphore try_acquire_for",
            err("sem acquire", c.semaphore("s").try_acquire_for(short)),
        ),
        ("inspect", err("inspect", c.inspect("a"))),
        ("list", err("list", c.list("*", 10))),
        ("is_locked", err("is_locked", c.is_locked("a"))),
        ("force_unlock", err("force_unlock", c.force_unlock("a"))),
        ("ping", err("ping", c.ping())),
        (
            "connect",
            err("connect", LockClient::connect(&server.bare_url())),
        ),
    ];
    for (what, e) in &cases {
        needs_password(what, e);
    }
    // Redlock over three such servers.
    let servers: Vec<RedisServer> = (0..3)
        .map(|_| RedisServer::start_with_password("s3cret"))
        .collect();
    let urls: Vec<String> = servers.iter().map(|s| s.bare_url()).collect();
    let redlock = Redlock::new(&urls).unwrap();
    let e = err("redlock try_lock", redlock.try_lock("a"));
    let e = match e {
        Error::NoQuorum {
            first_error: Some(first),
            ..
        } => *first,
        other => other,
    };
    needs_password("redlock try_lock", &e);
    // With the password all is well (the check above is not a broken server).
    let ok = LockClient::new(&server.url()).unwrap();
    ok.try_lock("a").unwrap().unwrap().unlock().unwrap();
}

#[test]
fn every_async_call_without_the_password_is_an_auth_error() {
    let server = RedisServer::start_with_password("s3cret");
    let c = AsyncLockClient::new(&server.bare_url()).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let short = Duration::from_millis(300);
        let cases: Vec<(&str, Error)> = vec![
            ("try_lock", err("try_lock", c.try_lock("a").await)),
            (
                "try_lock_for",
                err("try_lock_for", c.try_lock_for("a", short).await),
            ),
            (
                "fair",
                err(
                    "fair",
                    c.try_lock_with("a", LockOptions::new().fair()).await,
                ),
            ),
            (
                "read",
                err(
                    "read",
                    c.try_lock_with("a", LockOptions::new().read()).await,
                ),
            ),
            (
                "write",
                err(
                    "write",
                    c.try_lock_with("a", LockOptions::new().write()).await,
                ),
            ),
            (
                "semaphore",
                err("semaphore", c.semaphore("s").try_acquire().await),
            ),
        ];
        for (what, e) in &cases {
            needs_password(what, e);
        }
    });
}
