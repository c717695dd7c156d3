//! The bad-input table: every case is a typed error or a documented
//! acceptance; none panics, none releases someone else's lock.
//! (Empty name, zero lease, a string at the key, a wrong password, an
//! unreachable host, a panic in the critical section and a guard dropped on
//! another thread are in `tests/lock.rs`.)

mod support;

use std::thread;
use std::time::{Duration, Instant};

use leasehold::{LockClient, LockOptions, MAX_LEASE, MAX_NAME_BYTES};
use redis::Commands;
use support::{eventually, RedisServer};

#[test]
fn a_name_above_the_limit_is_refused_and_one_at_the_limit_works() {
    let server = RedisServer::start();
    let client = LockClient::new(&server.url()).unwrap();
    let huge = "n".repeat(1024 * 1024);
    let e = client.lock(&huge).unwrap_err();
    assert!(e.is_invalid_argument(), "{e:?}");
    assert!(e.to_string().contains("65536"), "{e}");
    let at_limit = "m".repeat(MAX_NAME_BYTES);
    let g = client.lock(&at_limit).unwrap();
    let exists: bool = server.connection().exists(&at_limit).unwrap();
    assert!(exists);
    g.unlock().unwrap();
}

#[test]
fn names_with_braces_spaces_newlines_and_unicode_are_exact_keys() {
    let server = RedisServer::start();
    let holder = LockClient::new(&server.url()).unwrap();
    let waiter = LockClient::new(&server.url()).unwrap();
    let mut con = server.connection();
    let _: () = con.set("bystander", "still here").unwrap();
    for name in [
        "{tag}x",
        "a}b{c",
        "with space",
        "line\nbreak",
        "tab\there",
        "zählung:🔒",
        "\"quoted\"",
        // Names travel as KEYS/ARGV, never inside Lua source: this is data.
        "x') redis.call('flushall') --",
        "]] .. redis.call('flushall') .. [[",
    ] {
        let g = holder.lock(name).unwrap();
        let exists: bool = con.exists(name).unwrap();
        assert!(exists, "key {name:?} is the name itself");
        // A waiter on another client is woken through the channel.
        let (w, n) = (waiter.clone(), name.to_owned());
        let t = thread::spawn(move || w.lock(&n).map(|g| g.unlock()));
        assert!(eventually(Duration::from_secs(5), || waiter
            .stats()
            .waiters_parked
            == 1));
        g.unlock().unwrap();
        let started = Instant::now();
        assert!(matches!(t.join().unwrap(), Ok(Ok(()))));
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{name:?}: woken by the unlock message"
        );
    }
    let v: String = con.get("bystander").unwrap();
    assert_eq!(v, "still here", "no name was run as code");
}

#[test]
fn owner_ids_are_random_uuid_v4_per_client() {
    let server = RedisServer::start();
    let mut con = server.connection();
    let mut seen = std::collections::HashSet::new();
    for _ in 0..20 {
        let client = LockClient::new(&server.url()).unwrap();
        let g = client.lock("who").unwrap();
        let owners: Vec<String> = con.hkeys("who").unwrap();
        let (id, thread) = owners[0].rsplit_once(':').unwrap();
        let uuid = uuid_fields(id);
        assert_eq!(uuid.len(), 5, "{id}");
        assert!(uuid[2].starts_with('4'), "version 4: {id}");
        assert!("89ab".contains(&uuid[3][..1]), "RFC 4122 variant: {id}");
        assert!(thread.parse::<u64>().is_ok());
        assert!(seen.insert(id.to_owned()), "a fresh id per client");
        g.unlock().unwrap();
    }
}

fn uuid_fields(id: &str) -> Vec<String> {
    id.split('-').map(str::to_owned).collect()
}

#[test]
fn leases_beyond_the_limit_are_refused() {
    let server = RedisServer::start();
    let client = LockClient::new(&server.url()).unwrap();
    for lease in [
        Duration::MAX,
        Duration::from_millis(i64::MAX as u64),
        MAX_LEASE + Duration::from_secs(1),
    ] {
        let e = client
            .lock_with("long", LockOptions::new().lease(lease))
            .unwrap_err();
        assert!(e.is_invalid_argument(), "{lease:?}: {e:?}");
    }
    let e = LockClient::builder(&server.url())
        .watchdog_lease(Duration::MAX)
        .build()
        .unwrap_err();
    assert!(e.is_invalid_argument(), "{e:?}");
    // The longest accepted lease works.
    let g = client
        .lock_with("long", LockOptions::new().lease(MAX_LEASE))
        .unwrap();
    let pttl: i64 = server.connection().pttl("long").unwrap();
    assert!(pttl > 3_000_000_000_000, "{pttl}");
    g.unlock().unwrap();
}

#[test]
fn unbounded_and_past_deadlines_do_not_overflow() {
    let server = RedisServer::start();
    let client = LockClient::new(&server.url()).unwrap();
    // Free: acquired at once, whatever the bound.
    drop(client.try_lock_for("d", Duration::MAX).unwrap().unwrap());
    let past = Instant::now() - Duration::from_secs(1);
    drop(client.try_lock_until("d", past).unwrap().unwrap());
    // Held elsewhere: a past deadline is one attempt; Duration::MAX waits.
    let other = LockClient::new(&server.url()).unwrap();
    let g = other.lock("d").unwrap();
    let started = Instant::now();
    assert!(client.try_lock_until("d", past).unwrap().is_none());
    assert!(started.elapsed() < Duration::from_secs(1));
    let c = client.clone();
    let t = thread::spawn(move || c.try_lock_for("d", Duration::MAX).map(|g| g.is_some()));
    thread::sleep(Duration::from_millis(100));
    g.unlock().unwrap();
    assert!(t.join().unwrap().unwrap());
}

#[test]
fn keys_of_other_types_are_wrongtype_not_an_endless_wait() {
    let server = RedisServer::start();
    let client = LockClient::new(&server.url()).unwrap();
    let mut con = server.connection();
    let _: i64 = con.rpush("a-list", "x").unwrap();
    let _: i64 = con.sadd("a-set", "x").unwrap();
    let _: i64 = con.zadd("a-zset", "x", 1).unwrap();
    for key in ["a-list", "a-set", "a-zset"] {
        let started = Instant::now();
        let e = client.lock(key).unwrap_err();
        assert!(e.is_wrong_type(), "{key}: {e:?}");
        assert!(started.elapsed() < Duration::from_secs(2));
    }
    let len: i64 = con.llen("a-list").unwrap();
    assert_eq!(len, 1, "the list was left alone");
}

#[test]
fn an_acl_user_without_the_lock_commands_is_told_what_to_grant() {
    let server = RedisServer::start();
    let client = LockClient::new(&support::user_without_lock_commands(&server)).unwrap();
    let e = client.lock("acl").unwrap_err();
    assert!(e.is_refused(), "{e:?}");
    assert!(matches!(e, leasehold::Error::NoPermission { .. }), "{e:?}");
    assert!(e.to_string().contains("+evalsha"), "{e}");
}

#[test]
fn an_acl_user_limited_to_the_key_prefix_works() {
    let server = RedisServer::start();
    let mut admin = server.connection();
    // Keys: the locks, their token counters, and their channels (the
    // release script names the channel among its keys, as Redisson does).
    let mut acl = redis::cmd("ACL");
    acl.arg("SETUSER").arg("billing").arg("on").arg(">pw");
    acl.arg("~billing:*")
        .arg("~redisson_lock_token:{billing:*")
        .arg("~redisson_lock__channel:{billing:*")
        .arg("&redisson_lock__channel:{billing:*")
        // The line of waiting clients (three keys) and the grant channels.
        .arg("~leasehold_line*{billing:*")
        .arg("&leasehold_grant:{billing:*")
        // Read/write locks: timeout keys and writer set, and their channel.
        .arg("~{billing:*")
        .arg("~redisson_rwlock:{billing:*")
        .arg("&redisson_rwlock:{billing:*");
    for cmd in [
        "+evalsha",
        "+script|load",
        "+subscribe",
        "+unsubscribe",
        "+psubscribe",
        "+punsubscribe",
        "+publish",
        "+pubsub|numsub",
        "+ping",
        "+exists",
        "+hexists",
        "+hset",
        "+hincrby",
        "+hget",
        "+hdel",
        "+pexpire",
        "+pttl",
        "+del",
        "+get",
        "+set",
        "+time",
        "+hlen",
        "+hkeys",
        "+zadd",
        "+zrem",
        "+zrange",
        "+zremrangebyscore",
        "+zcard",
        "+zscore",
        "+lindex",
        "+lpop",
        "+rpush",
        "+lrem",
        "+psetex",
    ] {
        acl.arg(cmd);
    }
    let _: () = acl.query(&mut admin).unwrap();
    let url = format!("redis://billing:pw@127.0.0.1:{}/", server.port());
    let client = LockClient::builder(&url)
        .key_prefix("billing:")
        .build()
        .unwrap();
    let g = client
        .lock_with("invoice:7", LockOptions::new().fenced())
        .unwrap();
    assert!(g.fence().is_some());
    g.unlock().unwrap();
    // A plain waiter of another client under the same grants: it stands in
    // line and is granted the lock on the holder's release.
    let held = client.lock("invoice:8").unwrap();
    let other = LockClient::builder(&url)
        .key_prefix("billing:")
        .build()
        .unwrap();
    let waiter = {
        let other = other.clone();
        std::thread::spawn(move || other.lock("invoice:8").map(|g| g.unlock()))
    };
    assert!(eventually(Duration::from_secs(5), || other
        .stats()
        .waiters_parked
        == 1));
    // Its subscriber connected although the user may not CLIENT SETNAME.
    assert!(other.stats().subscriber_connected, "{:?}", other.stats());
    let released = std::time::Instant::now();
    held.unlock().unwrap();
    assert!(matches!(waiter.join().unwrap(), Ok(Ok(()))));
    assert!(
        released.elapsed() < Duration::from_millis(500),
        "granted and woken at once, not at the next confirmation or the 30 s lease: {:?}",
        released.elapsed()
    );
    // A read/write lock under the same grants: two readers, then a writer
    // that waits for them (writer set, channel) and gets in.
    let r1 = client.read_lock("report").unwrap();
    let r2 = LockClient::builder(&url)
        .key_prefix("billing:")
        .build()
        .unwrap()
        .read_lock("report")
        .unwrap();
    let writer = {
        let client = client.clone();
        std::thread::spawn(move || client.write_lock("report").map(drop))
    };
    std::thread::sleep(Duration::from_millis(100));
    drop((r1, r2));
    writer.join().unwrap().unwrap();
    let outside = LockClient::new(&url).unwrap();
    let e = outside.lock("elsewhere").unwrap_err();
    assert!(e.is_refused(), "a key outside the prefix is refused: {e:?}");
}

#[test]
fn a_read_only_replica_is_a_typed_error() {
    let primary = RedisServer::start();
    let replica_of = primary.port().to_string();
    let replica = RedisServer::start_with(&["--replicaof", "127.0.0.1", &replica_of], None);
    let client = LockClient::new(&replica.url()).unwrap();
    let e = client.lock("ro").unwrap_err();
    assert!(
        matches!(e, leasehold::Error::ReadOnlyReplica { .. }),
        "{e:?}"
    );
    assert!(e.is_refused());
    assert!(e.to_string().contains("primary"), "{e}");
}

#[test]
fn redis_out_of_memory_is_a_typed_error() {
    let server = RedisServer::start_with(
        &["--maxmemory", "2mb", "--maxmemory-policy", "noeviction"],
        None,
    );
    let client = LockClient::new(&server.url()).unwrap();
    let mut con = server.connection();
    let chunk = "x".repeat(64 * 1024);
    for i in 0..200 {
        let r: redis::RedisResult<()> = con.set(format!("fill:{i}"), &chunk);
        if r.is_err() {
            break;
        }
    }
    let e = client.lock("oom").unwrap_err();
    assert!(matches!(e, leasehold::Error::OutOfMemory { .. }), "{e:?}");
    assert!(e.is_refused());
}

#[test]
fn script_flush_mid_run_is_recovered_transparently() {
    let server = RedisServer::start();
    let client = LockClient::builder(&server.url())
        .watchdog_lease(Duration::from_millis(900))
        .build()
        .unwrap();
    let held = client.lock("flushed").unwrap();
    let mut con = server.connection();
    let _: () = redis::cmd("SCRIPT").arg("FLUSH").query(&mut con).unwrap();
    // Acquire, release and renewal all reload their scripts.
    let other = client.lock("flushed-2").unwrap();
    other.unlock().unwrap();
    let renewed = client.stats().renewals_sent;
    assert!(eventually(Duration::from_secs(5), || client
        .stats()
        .renewals_sent
        > renewed + 1));
    assert!(held.is_held());
    let _: () = redis::cmd("SCRIPT").arg("FLUSH").query(&mut con).unwrap();
    held.unlock().unwrap();
}

#[test]
fn guards_outlive_their_client_and_still_release() {
    let server = RedisServer::start();
    let client = LockClient::builder(&server.url())
        .watchdog_lease(Duration::from_millis(900))
        .build()
        .unwrap();
    let guard = client.lock("orphan").unwrap();
    drop(client);
    // Still renewed: the guard keeps the client's internals alive.
    thread::sleep(Duration::from_millis(1_500));
    assert!(guard.is_held());
    let exists: bool = server.connection().exists("orphan").unwrap();
    assert!(exists);
    guard.unlock().unwrap();
    let exists: bool = server.connection().exists("orphan").unwrap();
    assert!(!exists);
}
