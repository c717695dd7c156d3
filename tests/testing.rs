//! The `testing` feature's `TestServer`, as a user's test meets it: it
//! starts a real server that a client locks on, restarts it empty, is gone
//! after drop (process and files), and without a server binary fails with
//! what to install.

use std::time::Duration;

use leasehold::testing::TestServer;
use leasehold::LockClient;

#[test]
fn a_test_server_serves_locks_restarts_empty_and_is_gone_after_drop() {
    let mut redis = TestServer::start().expect("start a redis-server");
    let client = LockClient::new(&redis.url()).unwrap();
    let guard = client
        .lock_with(
            "held",
            leasehold::LockOptions::new().lease(Duration::from_secs(60)),
        )
        .unwrap();
    assert!(client.inspect("held").unwrap().holders.len() == 1);
    redis.restart().expect("restart");
    assert!(
        client.inspect("held").unwrap().holders.is_empty(),
        "a restart without persistence empties it"
    );
    drop(guard);
    let (port, dir) = (redis.port(), redis.dir().to_owned());
    assert!(dir.join("redis.log").exists());
    drop(redis);
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", port)).is_err(),
        "still listening"
    );
    assert!(!dir.exists(), "its files were left behind");
}

#[test]
fn a_password_is_required_and_carried_in_the_url() {
    let odd = TestServer::builder()
        .password("p@ss/w:rd%")
        .start()
        .unwrap();
    let guard = LockClient::new(&odd.url()).unwrap().lock("odd").unwrap();
    assert!(guard.is_held(), "the URL carries the password encoded");
    let redis = TestServer::builder().password("s3cret").start().unwrap();
    assert!(redis.url().contains(":s3cret@"));
    let bare = format!("redis://127.0.0.1:{}/", redis.port());
    let mut con = redis::Client::open(bare).unwrap().get_connection().unwrap();
    let refused = redis::cmd("PING").query::<String>(&mut con).unwrap_err();
    assert!(refused.to_string().contains("NOAUTH"), "{refused}");
    let guard = LockClient::new(&redis.url()).unwrap().lock("x").unwrap();
    assert!(guard.is_held());
}

#[test]
fn without_a_server_binary_it_says_what_to_install() {
    let e = TestServer::builder()
        .binary("/nonexistent/redis-server")
        .start()
        .unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::NotFound);
    assert!(
        e.to_string().contains("apt-get install -y redis-server"),
        "{e}"
    );
}
