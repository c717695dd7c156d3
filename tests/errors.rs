//! What a user reads when something goes wrong: for each kind of failure,
//! the message (`Display`), the `Debug` form (what `main` prints when it
//! returns the error) and the `source()` chain — every cause printed once,
//! timeouts naming their length, the predicates answering as documented.

mod support;

use std::error::Error as _;
use std::net::TcpListener;
use std::time::Duration;

use leasehold::{Error, LockClient, LockOptions};
use redis::Commands;
use support::RedisServer;

/// The causes under `e`, outermost first.
fn causes(e: &Error) -> Vec<String> {
    let mut out = Vec::new();
    let mut cause = e.source();
    while let Some(c) = cause {
        out.push(c.to_string());
        cause = c.source();
    }
    out
}

/// Every cause once: not repeated in the message, and `Debug` is the
/// message followed by the causes (one the `redis` crate repeats as its own
/// source is said once).
fn check(what: &str, e: &Error) -> String {
    let message = e.to_string();
    let chain = causes(e);
    for c in &chain {
        assert!(
            !message.contains(c.as_str()),
            "{what}: the cause {c:?} is repeated in the message {message:?}"
        );
    }
    let mut expected = message.clone();
    for c in &chain {
        if !expected.contains(c.as_str()) {
            expected.push_str(": ");
            expected.push_str(c);
        }
    }
    assert_eq!(
        format!("{e:?}"),
        expected,
        "{what}: Debug is the message and its causes"
    );
    assert!(
        !format!("{e:?}").contains(" { "),
        "{what}: Debug is not the variant dump"
    );
    message
}

#[test]
fn each_failure_reads_once_with_its_causes_and_timeouts_name_their_length() {
    let server = RedisServer::start();
    let mut con = server.connection();

    // A socket timeout: Redis paused.
    let client = LockClient::builder(&server.url())
        .socket_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    drop(client.lock("errors:warm").unwrap());
    server.signal("STOP");
    let e = client.try_lock("errors:paused").unwrap_err();
    server.signal("CONT");
    let text = check("socket timeout", &e);
    assert!(matches!(e, Error::TimedOut { .. }), "{e:?}");
    assert!(
        text.contains("300ms") && text.contains("socket timeout"),
        "{text}"
    );
    // The cause is leasehold's own type (a `redis` major release is not
    // one of leasehold's), with what the socket said below it.
    let Error::TimedOut { source, .. } = &e else {
        unreachable!()
    };
    let cause: &leasehold::RedisCause = source;
    let below = std::error::Error::source(&e).unwrap();
    assert!(below.downcast_ref::<leasehold::RedisCause>().is_some());
    assert_eq!(below.to_string(), cause.to_string());
    assert!(e.is_timeout() && e.is_connection(), "{e:?}");

    // A refused connection: nothing listens on the port.
    let port = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let nowhere = LockClient::builder(&format!("redis://127.0.0.1:{port}/"))
        .connect_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let e = nowhere.try_lock("errors:nowhere").unwrap_err();
    let text = check("refused connection", &e);
    assert!(e.is_connection(), "{e:?}");
    assert!(
        text.contains(&format!("127.0.0.1:{port}")),
        "names the server: {text}"
    );
    assert_eq!(
        format!("{e:?}").matches("refused").count(),
        1,
        "the refusal is said once: {e:?}"
    );

    // NOPERM: a user without the lock commands.
    let reader = LockClient::new(&support::user_without_lock_commands(&server)).unwrap();
    let e = reader.try_lock("errors:acl").unwrap_err();
    check("NOPERM", &e);
    assert!(e.is_refused(), "{e:?}");
    assert_eq!(format!("{e:?}").matches("NOPERM").count(), 1, "{e:?}");

    // WRONGTYPE: the key is not a lock.
    let _: () = con.set("errors:string", "x").unwrap();
    let e = client.try_lock("errors:string").unwrap_err();
    check("WRONGTYPE", &e);
    assert!(e.is_wrong_type(), "{e:?}");

    // A bounded wait that timed out.
    let held = client.lock("errors:held").unwrap();
    let other = LockClient::new(&server.url()).unwrap();
    let e = other
        .lock_with(
            "errors:held",
            LockOptions::new().wait(Duration::from_millis(100)),
        )
        .unwrap_err();
    let text = check("wait timeout", &e);
    assert!(e.is_wait_timeout() && e.is_timeout(), "{e:?}");
    assert!(text.contains("ms"), "names how long it waited: {text}");
    drop(held);

    // An upgrade refused.
    let read = client.read_lock("errors:rw").unwrap();
    let e = client.write_lock("errors:rw").unwrap_err();
    check("upgrade", &e);
    assert!(matches!(e, Error::UpgradeWouldDeadlock { .. }), "{e:?}");
    drop(read);
}

/// A loopback port nothing listens on.
fn closed_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// A loopback server that answers every connection like an HTTP server
/// does to a request it cannot read, then closes it.
fn http_server() -> u16 {
    use std::io::{Read, Write};
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            std::thread::spawn(move || {
                let mut buf = [0u8; 1024];
                let _ = stream.read(&mut buf);
                let _ = stream.write_all(
                    b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                );
            });
        }
    });
    port
}

/// A loopback port that accepts connections and never answers.
fn silent_server() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming() {
            held.push(stream);
        }
    });
    port
}

#[test]
fn connection_errors_name_the_server_and_what_answered() {
    // Nothing listening: the address is named, in the lock path and in the
    // start-up check.
    let port = closed_port();
    let url = format!("redis://127.0.0.1:{port}/");
    let addr = format!("127.0.0.1:{port}");
    let client = LockClient::builder(&url)
        .connect_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let e = client.try_lock("errors:refused").unwrap_err();
    let text = check("refused", &e);
    assert!(e.is_connection() && text.contains(&addr), "{text}");
    let e = LockClient::connect(&url).unwrap_err();
    let text = check("refused at start-up", &e);
    assert!(e.is_connection() && text.contains(&addr), "{text}");

    // An HTTP server on the port: not Redis, and said so (with the address).
    let http = http_server();
    let url = format!("redis://127.0.0.1:{http}/");
    let e = LockClient::connect(&url).unwrap_err();
    let text = check("http at start-up", &e);
    assert!(matches!(e, Error::NotRedis { .. }), "{e:?}");
    assert!(
        text.contains(&format!("127.0.0.1:{http}")) && text.contains("redis protocol"),
        "{text}"
    );
    let e = LockClient::new(&url)
        .unwrap()
        .try_lock("errors:http")
        .unwrap_err();
    let text = check("http in the lock path", &e);
    assert!(matches!(e, Error::NotRedis { .. }), "{e:?}");
    assert!(
        !text.contains("answered a leasehold command")
            && text.contains(&format!("127.0.0.1:{http}")),
        "{text}"
    );

    // A wrong password: Auth at start-up.
    let server = RedisServer::start_with_password("right");
    let e =
        LockClient::connect(&format!("redis://:wrong@127.0.0.1:{}/", server.port())).unwrap_err();
    check("wrong password", &e);
    assert!(e.is_auth(), "{e:?}");
    // No password at all: Auth too (the server says NOAUTH).
    let e = LockClient::connect(&server.bare_url()).unwrap_err();
    assert!(e.is_auth(), "{e:?}");
    let ok = LockClient::connect(&server.url()).unwrap();
    assert!(ok.ping().unwrap() < Duration::from_secs(1));

    // A port that never answers: a timeout naming the server and its length.
    let silent = silent_server();
    let e = LockClient::builder(&format!("redis://127.0.0.1:{silent}/"))
        .socket_timeout(Duration::from_millis(300))
        .connect()
        .unwrap_err();
    let text = check("silent", &e);
    assert!(e.is_timeout(), "{e:?}");
    assert!(
        text.contains(&format!("127.0.0.1:{silent}")) && text.contains("300ms"),
        "{text}"
    );
}

#[test]
fn an_unlock_after_a_lease_lost_to_an_outage_says_why() {
    use support::proxy::{Fault, FaultProxy};
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port());
    let client = LockClient::builder(&proxy.url())
        .watchdog_lease(Duration::from_millis(1_500))
        .socket_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let guard = client.lock("errors:lost").unwrap();
    let lost = guard.lost().receiver();
    proxy.set(Fault::Blackhole);
    let why = lost.recv_timeout(Duration::from_secs(5)).unwrap();
    assert_eq!(why, leasehold::LeaseLost::Unreachable);
    proxy.set(Fault::Forward);
    let e = guard.unlock().unwrap_err();
    let text = check("lost to an outage", &e);
    assert!(e.is_not_held(), "{e:?}");
    assert!(
        matches!(
            e,
            Error::NotHeld {
                lost: Some(leasehold::LeaseLost::Unreachable),
                ..
            }
        ),
        "{e:?}"
    );
    assert!(text.contains("could not be reached"), "{text}");
    assert!(!text.contains("expired or the key was removed"), "{text}");
}

/// The async builder has the blocking one's settings and checks:
/// `connect().await` fails at start-up on a wrong password or a silent
/// port, as `LockClientBuilder::connect` does, and the settings it was
/// given are the ones the client uses.
#[test]
fn the_async_builder_checks_at_start_up_as_the_blocking_one() {
    use leasehold::AsyncLockClient;

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let server = RedisServer::start_with_password("right");
    let port = server.port();
    let silent = silent_server();
    rt.block_on(async {
        let e = AsyncLockClient::connect(&format!("redis://:wrong@127.0.0.1:{port}/"))
            .await
            .unwrap_err();
        assert!(e.is_auth(), "{e:?}");
        let e = AsyncLockClient::builder(&format!("redis://127.0.0.1:{silent}/"))
            .socket_timeout(Duration::from_millis(300))
            .connect()
            .await
            .unwrap_err();
        assert!(e.is_timeout(), "{e:?}");
        let e = AsyncLockClient::builder(&server.url())
            .pool_size(0)
            .build()
            .unwrap_err();
        assert!(e.is_invalid_argument(), "{e:?}");
        let client = AsyncLockClient::builder(&server.url())
            .key_prefix("billing:")
            .client_name("async-built")
            .connect()
            .await
            .unwrap();
        let guard = client.lock("pay").await.unwrap();
        assert_eq!(guard.key(), "billing:pay");
        // The client's registration (its name) is written by its renewal
        // thread a moment after the lock, never on the lock path: waited
        // for, at most 5 s, as `tests/inspect.rs` does.
        let mut shown = String::new();
        for _ in 0..100 {
            shown = format!("{:?}", client.inspect("pay").await.unwrap());
            if shown.contains("async-built") {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(shown.contains("async-built"), "{shown}");
        guard.unlock().await.unwrap();
    });
    let mut con = server.connection();
    let keys: Vec<String> = con.keys("*pay*").unwrap();
    assert!(keys.is_empty(), "released: {keys:?}");
}
