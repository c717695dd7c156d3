//! Fencing tokens: minted in the acquire script, strictly increasing across
//! clients, reentrant holds and handoffs, still increasing after Redis lost
//! its data; and the fenced store that refuses a stale holder's write.

mod support;

use std::thread;
use std::time::Duration;

use leasehold::{FencedStore, LockClient, LockOptions};
use redis::Commands;
use support::{eventually, RedisServer};

fn fenced() -> LockOptions {
    LockOptions::new().fenced()
}

fn token_of(client: &LockClient, name: &str) -> u64 {
    let g = client.lock_with(name, fenced()).unwrap();
    let t = g.fence().expect("a fenced lock has a token");
    g.unlock().unwrap();
    t
}

#[test]
fn tokens_increase_across_clients_and_live_in_redissons_counter() {
    let server = RedisServer::start();
    let a = LockClient::new(&server.url()).unwrap();
    let b = LockClient::new(&server.url()).unwrap();
    let mut last = 0;
    for i in 0..20 {
        let client = if i % 2 == 0 { &a } else { &b };
        let t = token_of(client, "fence:x");
        assert!(t > last, "token {t} after {last}");
        last = t;
    }
    // A client built later (a restart of our side) continues above.
    let c = LockClient::new(&server.url()).unwrap();
    assert!(token_of(&c, "fence:x") > last);
    let counter: u64 = server
        .connection()
        .get("redisson_lock_token:{fence:x}")
        .unwrap();
    assert!(counter > last);
    // Plain locks have no token and create no counter.
    let g = a.lock("plain:x").unwrap();
    assert_eq!(g.fence(), None);
    drop(g);
    let exists: bool = server
        .connection()
        .exists("redisson_lock_token:{plain:x}")
        .unwrap();
    assert!(!exists, "a plain lock creates no extra key");
}

#[test]
fn a_reentrant_fenced_hold_returns_the_outer_token() {
    let server = RedisServer::start();
    let client = LockClient::new(&server.url()).unwrap();
    let outer = client.lock_with("fence:r", fenced()).unwrap();
    let inner = client.lock_with("fence:r", fenced()).unwrap();
    assert_eq!(inner.fence(), outer.fence());
    let plain_inner = client.lock("fence:r").unwrap();
    assert_eq!(plain_inner.fence(), None, "a plain hold asks for no token");
    drop(plain_inner);
    drop(inner);
    let first = outer.fence().unwrap();
    drop(outer);
    assert!(
        token_of(&client, "fence:r") > first,
        "a new hold, a new token"
    );
}

#[test]
fn a_handoff_to_a_fenced_thread_mints_a_newer_token() {
    let server = RedisServer::start();
    let client = LockClient::new(&server.url()).unwrap();
    let holder = client.lock_with("fence:h", fenced()).unwrap();
    let first = holder.fence().unwrap();
    let c = client.clone();
    let waiter = thread::spawn(move || {
        let g = c.lock_with("fence:h", fenced()).unwrap();
        g.fence()
    });
    assert!(eventually(Duration::from_secs(10), || client
        .stats()
        .waiters_queued
        == 1));
    holder.unlock().unwrap();
    let handed = waiter.join().unwrap().expect("the successor has a token");
    assert!(handed > first, "{handed} after {first}");
    assert_eq!(client.stats().handoffs, 1, "it was an in-process handoff");
}

#[test]
fn tokens_keep_increasing_when_redis_loses_its_data() {
    let server = RedisServer::start();
    let client = LockClient::new(&server.url()).unwrap();
    let mut con = server.connection();
    // A plain INCR counter would restart at 1 after the loss; ours does not.
    let before = token_of(&client, "fence:lost");
    let _: () = redis::cmd("FLUSHALL").query(&mut con).unwrap();
    let after_flush = token_of(&client, "fence:lost");
    assert!(after_flush > before, "{after_flush} after {before} (flush)");
    let _: () = con.del("redisson_lock_token:{fence:lost}").unwrap();
    let after_del = token_of(&client, "fence:lost");
    assert!(after_del > after_flush, "{after_del} after {after_flush}");
    // The floor is the server clock in microseconds.
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query(&mut con).unwrap();
    assert!(after_del <= secs * 1_000_000 + micros);
    assert!(after_del > (secs - 60) * 1_000_000);
}

#[test]
fn the_fenced_store_refuses_an_older_token() {
    let server = RedisServer::start();
    let client = LockClient::new(&server.url()).unwrap();
    let mut con = server.connection();
    let store = FencedStore::new("resource");
    let old = client.lock_with("fence:s", fenced()).unwrap();
    let old_token = old.fence().unwrap();
    assert!(store.write(&mut con, old_token, "first").unwrap());
    assert!(
        store.write(&mut con, old_token, "again").unwrap(),
        "the same holder writes again"
    );
    drop(old);
    let new = client.lock_with("fence:s", fenced()).unwrap();
    let new_token = new.fence().unwrap();
    assert!(store.write(&mut con, new_token, "second").unwrap());
    assert!(
        !store.write(&mut con, old_token, "stale").unwrap(),
        "the old holder is refused"
    );
    assert_eq!(
        store.read(&mut con).unwrap(),
        Some((new_token, "second".to_owned()))
    );
}

#[test]
fn every_key_and_channel_of_a_lock_shares_its_cluster_slot() {
    // CLUSTER KEYSLOT is the server's own CRC16; it needs cluster support on.
    // A one-node cluster serving every slot: scripts whose keys span slots
    // would fail here with CROSSSLOT, so the locks themselves are checked too.
    let server = RedisServer::start_cluster_node();
    let mut con = server.connection();
    let holder = LockClient::new(&server.url()).unwrap();
    let waiter = LockClient::new(&server.url()).unwrap();
    for name in ["order:pay", "{user:7}:cart", "a{t}b"] {
        let g = holder.lock_with(name, fenced()).unwrap();
        let w = waiter.clone();
        let n = name.to_owned();
        let t = thread::spawn(move || w.lock(&n).map(|g| g.unlock()));
        assert!(eventually(Duration::from_secs(5), || waiter
            .stats()
            .waiters_parked
            == 1));
        // The waiter of a leasehold holder listens to its client's grant
        // channel only.
        let tagged = if name.contains('{') {
            name.to_owned()
        } else {
            format!("{{{name}}}")
        };
        let channel = format!("redisson_lock__channel:{tagged}");
        let grants: Vec<String> = redis::cmd("PUBSUB")
            .arg("CHANNELS")
            .arg("leasehold_grant:*")
            .query(&mut con)
            .unwrap();
        let tokens: Vec<String> = con.keys("redisson_lock_token:*").unwrap();
        let lines: Vec<String> = con.keys(format!("leasehold_line:{tagged}*")).unwrap();
        let token = tokens
            .iter()
            .find(|k| k.ends_with(&tagged))
            .unwrap_or_else(|| panic!("{name}: token key among {tokens:?}"));
        let grant = grants
            .iter()
            .find(|c| c.contains(&tagged))
            .unwrap_or_else(|| panic!("{name}: grant channel among {grants:?}"));
        assert_eq!(lines.len(), 1, "{name}: the line: {lines:?}");
        let key_slot = server.keyslot(name);
        for other in [&channel, token, grant].into_iter().chain(&lines) {
            assert_eq!(server.keyslot(other), key_slot, "{name}: {other}");
        }
        g.unlock().unwrap();
        assert!(matches!(t.join().unwrap(), Ok(Ok(()))));
    }
}
