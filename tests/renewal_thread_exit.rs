//! The background threads hold nothing that keeps the client alive: when the
//! last clone and every guard are gone, they exit. (Its own test binary, so no
//! other test's client shares the process.)

mod support;

use std::time::Duration;

use leasehold::LockClient;
use support::{eventually, RedisServer};

/// Names of this process's threads that belong to leasehold.
fn leasehold_threads() -> Vec<String> {
    let mut names = Vec::new();
    for task in std::fs::read_dir("/proc/self/task").unwrap() {
        let comm = task.unwrap().path().join("comm");
        if let Ok(name) = std::fs::read_to_string(comm) {
            if name.starts_with("leasehold-") {
                names.push(name.trim().to_owned());
            }
        }
    }
    names.sort();
    names
}

#[test]
fn threads_exit_when_the_client_and_all_guards_are_gone() {
    let server = RedisServer::start();
    let holder = LockClient::new(&server.url()).unwrap();
    let client = LockClient::builder(&server.url())
        .watchdog_lease(Duration::from_millis(1_500))
        .build()
        .unwrap();
    let held = holder.lock("busy").unwrap();
    // Make the waiting client start its subscriber thread too.
    assert!(client
        .try_lock_for("busy", Duration::from_millis(50))
        .unwrap()
        .is_none());
    drop(held);
    let guard = client.lock("exit").unwrap();
    let clone = client.clone();
    drop(holder);
    drop(client);
    assert!(leasehold_threads().contains(&"leasehold-sub".to_owned()));
    assert!(leasehold_threads().contains(&"leasehold-renew".to_owned()));
    // Renewal keeps going meanwhile: half a second past the first lease
    // (renewed every 500 ms, a second to spare).
    std::thread::sleep(Duration::from_millis(2_000));
    assert!(guard.is_held());
    drop(clone);
    assert!(
        leasehold_threads().contains(&"leasehold-renew".to_owned()),
        "a live guard keeps the client's threads"
    );
    drop(guard);
    assert!(
        eventually(Duration::from_secs(5), || leasehold_threads().is_empty()),
        "threads left: {:?}",
        leasehold_threads()
    );
}
