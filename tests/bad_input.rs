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

/// Owner ids are random (122 bits, as a version 4 UUID's) and marked
/// version 8, which tells leasehold's holders from Redisson's (version 4).
#[test]
fn owner_ids_are_random_uuids_marked_version_8_per_client() {
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
        assert!(uuid[2].starts_with('8'), "version 8: {id}");
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
    // Released once it waits (a deadline that overflowed to the past would
    // have given up after its one attempt).
    assert!(eventually(Duration::from_secs(5), || client
        .stats()
        .waiters_parked
        == 1));
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

/// A key kept beside a lock (its line of waiters, named after it in
/// braces) overwritten by something of another type: the error is
/// `WrongType`, and it points the operator at the keys beside the lock —
/// it said the lock's own key, which holds nothing here, "is not a lock
/// hash".
#[test]
fn a_key_kept_beside_a_lock_of_another_type_is_named_as_such() {
    let server = RedisServer::start();
    let client = LockClient::new(&server.url()).unwrap();
    let mut con = server.connection();
    let _: () = con
        .set("leasehold_line:{beside}", "an application's string")
        .unwrap();
    let e = client.lock("beside").unwrap_err();
    assert!(e.is_wrong_type(), "{e:?}");
    let said = e.to_string();
    assert!(
        said.contains("beside it") && !said.contains("not a lock hash"),
        "{said}"
    );
}

/// Application data under every lock kind's acquire — a hash
/// (`HSET user:1 …`), a string, a counter (`SET stock:5 12`): refused at
/// once as `NotALock`, whatever the call (one attempt, a bounded wait, an
/// unbounded one), and left exactly as it was. Before, a hash was taken for
/// another's hold (`try_lock_for` gave `None` after its whole wait, `lock`
/// waited for ever) — and a read or write lock wrote its `mode` into it.
#[test]
fn application_keys_under_every_lock_kinds_acquire_are_refused_untouched() {
    let server = RedisServer::start();
    let client = LockClient::new(&server.url()).unwrap();
    let async_client = client.to_async();
    let mut con = server.connection();
    let data = support::seed_application_data(&mut con);
    let _: () = con.set("stock:5", 12).unwrap();
    let kinds = [
        ("plain", LockOptions::new()),
        ("fenced", LockOptions::new().fenced()),
        ("fair", LockOptions::new().fair()),
        ("read", LockOptions::new().read()),
        ("write", LockOptions::new().write()),
    ];
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let keys: Vec<&str> = data.iter().map(|(k, _)| *k).chain(["stock:5"]).collect();
    let refused = |what: &str, r: leasehold::Result<bool>| match r {
        Err(e) => assert!(
            matches!(e, leasehold::Error::NotALock { .. }) && e.is_wrong_type(),
            "{what}: {e:?}"
        ),
        Ok(held) => panic!("{what}: taken for a lock (held: {held})"),
    };
    let started = Instant::now();
    for key in &keys {
        for (kind, opts) in kinds.clone() {
            let what = format!("{kind} on {key}");
            refused(
                &format!("{what}, one attempt"),
                client.try_lock_with(key, opts.clone()).map(|g| g.is_some()),
            );
            refused(
                &format!("{what}, bounded"),
                client
                    .try_lock_with(key, opts.clone().wait(Duration::from_secs(30)))
                    .map(|g| g.is_some()),
            );
            refused(
                &format!("{what}, unbounded"),
                client.lock_with(key, opts.clone()).map(|_| true),
            );
            refused(
                &format!("{what}, owned"),
                client.lock_owned_with(key, opts.clone()).map(|_| true),
            );
            refused(
                &format!("{what}, async"),
                rt.block_on(async_client.lock_with(key, opts)).map(|_| true),
            );
        }
        refused(
            &format!("lock_all with {key}"),
            client.lock_all(&[*key, "free"]).map(|_| true),
        );
    }
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "refused at once, not after waits of 30 s or for ever: {:?}",
        started.elapsed()
    );
    assert!(
        support::application_data_intact(&mut con),
        "the application's data changed"
    );
    let stock: i64 = con.get("stock:5").unwrap();
    assert_eq!(stock, 12);
    let ttl: i64 = con.pttl("user:1").unwrap();
    assert_eq!(ttl, -1, "no expiry was set on the application's hash");
    // Nothing of the refused waits is left (no place in a line or queue).
    let mut keys: Vec<String> = con.keys("*").unwrap();
    keys.retain(|k| !k.starts_with("leasehold_client:")); // the client's registration
    keys.sort();
    assert_eq!(keys, ["greeting", "pages", "stock:5", "user:1"]);
    // A lock of another kind under a read/write lock's acquire is waited
    // for as before, not refused (one kind per name, but no corruption).
    let plain = client.lock_owned("shared").unwrap();
    let r = client
        .try_lock_with("shared", LockOptions::new().read())
        .unwrap();
    assert!(r.is_none(), "a plain lock's hash is held, for a reader");
    let fields: Vec<String> = con.hkeys("shared").unwrap();
    assert_eq!(
        fields.len(),
        1,
        "no `mode` written into the plain lock: {fields:?}"
    );
    drop(plain);
}

/// Application data under a semaphore: a hash or a string that is no
/// whole number is refused as `NotASemaphore` by every call that reads or
/// writes permits, untouched; a semaphore whose permits were never set
/// refuses an acquire at once (`NoPermits`), whatever its bound, instead of
/// waiting for ever. A counter (`SET stock:5 12`) is a semaphore's shape
/// to Redis, to Redisson and to us alike (Redisson's counter is a plain
/// whole number): it cannot be told apart — name semaphores apart from
/// application keys (a key prefix).
#[test]
fn application_keys_under_a_semaphore_are_refused_and_unset_permits_say_so() {
    let server = RedisServer::start();
    let client = LockClient::new(&server.url()).unwrap();
    let mut con = server.connection();
    let data = support::seed_application_data(&mut con);
    let started = Instant::now();
    for (key, _) in data {
        let sem = client.semaphore(key);
        let calls: Vec<(&str, leasehold::Result<()>)> = vec![
            ("try_acquire", sem.try_acquire().map(drop)),
            (
                "try_acquire_for",
                sem.try_acquire_for(Duration::from_secs(30)).map(drop),
            ),
            ("acquire", sem.acquire().map(drop)),
            ("try_set_permits", sem.try_set_permits(3).map(drop)),
            ("set_permits", sem.set_permits(3)),
            ("add_permits", sem.add_permits(1)),
            ("available_permits", sem.available_permits().map(drop)),
        ];
        for (call, r) in calls {
            let e = r.expect_err(call);
            assert!(
                matches!(e, leasehold::Error::NotASemaphore { .. }) && e.is_wrong_type(),
                "{call} on {key}: {e:?}"
            );
            assert!(e.to_string().contains("not a semaphore"), "{e}");
        }
    }
    assert!(
        support::application_data_intact(&mut con),
        "the application's data changed"
    );
    // Never set: refused at once, every form.
    let sem = client.semaphore("never-set");
    for (call, r) in [
        ("try_acquire", sem.try_acquire().map(drop)),
        (
            "try_acquire_for",
            sem.try_acquire_for(Duration::from_secs(30)).map(drop),
        ),
        ("acquire", sem.acquire().map(drop)),
    ] {
        let e = r.expect_err(call);
        assert!(
            matches!(e, leasehold::Error::NoPermits { .. }),
            "{call}: {e:?}"
        );
        assert!(e.to_string().contains("set_permits"), "{e}");
    }
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "at once, not after waits of 30 s or for ever: {:?}",
        started.elapsed()
    );
    let left: Vec<String> = con.keys("*never-set*").unwrap();
    assert!(
        left.is_empty(),
        "nothing of the refused acquires is left: {left:?}"
    );
    // Once set, as ever.
    sem.set_permits(1).unwrap();
    sem.try_acquire().unwrap().unwrap().unlock().unwrap();
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

/// An ACL user for `prefix` with exactly the rules the client lists (what
/// its `NOPERM` error names), without `client|setname`; its URL.
fn acl_user(server: &RedisServer, name: &str, rules: &[String]) -> String {
    let mut acl = redis::cmd("ACL");
    acl.arg("SETUSER")
        .arg(name)
        .arg("reset")
        .arg("on")
        .arg(">pw");
    for rule in rules {
        acl.arg(rule);
    }
    let _: () = acl.query(&mut server.connection()).unwrap();
    format!("redis://{name}:pw@127.0.0.1:{}/", server.port())
}

fn prefixed(url: &str) -> LockClient {
    LockClient::builder(url)
        .key_prefix("billing:")
        .build()
        .unwrap()
}

#[test]
fn an_acl_user_with_exactly_the_listed_rules_runs_every_lock_kind() {
    let server = RedisServer::start();
    let rules = prefixed(&server.url()).acl_rules();
    let url = acl_user(&server, "billing", &rules);
    let client = prefixed(&url);
    let other = prefixed(&url);
    // Every kind, taken by one client while a waiter of another client parks,
    // then released: the waiter is woken by the release's message (not at a
    // retry of its own, `Stats::woken_acquisitions`), and nothing was
    // refused on the way.
    for (name, opts) in [
        ("plain", LockOptions::new()),
        ("fenced", LockOptions::new().fenced()),
        ("fair", LockOptions::new().fair()),
        ("fenced-fair", LockOptions::new().fair().fenced()),
        ("write", LockOptions::new().write()),
        ("read-then-write", LockOptions::new().read()),
    ] {
        let held = client.lock_with(name, opts.clone()).unwrap();
        let waiting = if name == "read-then-write" {
            LockOptions::new().write()
        } else {
            opts.clone()
        };
        let parked = other.stats().waiters_parked;
        let woken = other.stats().woken_acquisitions;
        let waiter = {
            let other = other.clone();
            std::thread::spawn(move || {
                let g = other.lock_with(name, waiting)?;
                let fenced = g.fence().is_some();
                g.unlock().map(|()| fenced)
            })
        };
        assert!(
            eventually(Duration::from_secs(5), || other.stats().waiters_parked
                > parked),
            "{name}: the waiter parks"
        );
        let stats = other.stats();
        assert!(stats.subscriber_connected, "{name}: {stats:?}");
        assert_eq!(
            stats.subscriber_error, None,
            "{name}: something was refused"
        );
        held.unlock().unwrap();
        let fenced = waiter.join().unwrap().unwrap();
        assert_eq!(fenced, opts.is_fenced(), "{name}");
        assert_eq!(
            other.stats().woken_acquisitions - woken,
            1,
            "{name}: woken by the release, not at a retry: {:?}",
            other.stats()
        );
    }
    // The operator's tools work with the same rules: the holder is named by
    // its registration (written under the prefix), force_unlock frees it.
    let held = client.lock("named").unwrap();
    assert!(eventually(Duration::from_secs(5), || other
        .inspect("named")
        .unwrap()
        .holders
        .first()
        .is_some_and(|h| h.client.is_some())));
    assert!(other.force_unlock("named").unwrap());
    drop(held);
    // `list` needs `+scan` besides the rules, as its docs say.
    let e = other.list("*", 100).unwrap_err();
    assert!(
        matches!(e, leasehold::Error::NoPermission { .. }),
        "list without +scan: {e:?}"
    );
    let outside = LockClient::new(&url).unwrap();
    let e = outside.lock("elsewhere").unwrap_err();
    assert!(e.is_refused(), "a key outside the prefix is refused: {e:?}");
    // The refusal names the rules of that client (no prefix: every key).
    assert!(
        e.to_string().contains(&outside.acl_rules().join(" ")),
        "{e}"
    );
}

/// A waiter whose subscriber cannot connect (here: Redis refuses new
/// connections, `maxclients` reached) cannot be woken: it retries within a
/// second instead of sleeping out the holder's lease, and `stats()` says why.
/// The holder's lease is a minute, so a waiter that slept it out would get
/// in a minute after the release, not within the 5 s allowed.
#[test]
fn waiters_whose_subscriber_cannot_connect_retry_within_a_second_not_a_lease() {
    let server = RedisServer::start();
    let client = LockClient::new(&server.url()).unwrap();
    let other = LockClient::new(&server.url()).unwrap();
    let held = client
        .lock_with("deaf", LockOptions::new().lease(Duration::from_secs(60)))
        .unwrap();
    // `other` opens its pooled connection; then no new connection is let in.
    assert!(other.try_lock("deaf").unwrap().is_none());
    let mut admin = server.connection();
    let clients: String = redis::cmd("CLIENT").arg("LIST").query(&mut admin).unwrap();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxclients")
        .arg(clients.lines().count())
        .query(&mut admin)
        .unwrap();
    let waiter = {
        let other = other.clone();
        std::thread::spawn(move || other.lock("deaf").map(|g| g.unlock()))
    };
    assert!(
        eventually(Duration::from_secs(5), || other
            .stats()
            .subscriber_error
            .is_some()),
        "{:?}",
        other.stats()
    );
    assert!(!other.stats().subscriber_connected);
    std::thread::sleep(Duration::from_millis(1_500));
    let released = std::time::Instant::now();
    held.unlock().unwrap();
    assert!(matches!(waiter.join().unwrap(), Ok(Ok(()))));
    assert!(
        released.elapsed() < Duration::from_secs(5),
        "retried within a second, not after the 60 s lease: {:?}",
        released.elapsed()
    );
}

/// A script's ACL refusal (a channel it may not publish to) is the same
/// typed NOPERM error as a refused command.
#[test]
fn a_script_refused_by_the_acl_is_no_permission() {
    let server = RedisServer::start();
    let rules: Vec<String> = prefixed(&server.url())
        .acl_rules()
        .into_iter()
        .filter(|r| !r.starts_with('&'))
        .collect();
    let client = prefixed(&acl_user(&server, "mute", &rules));
    let g = client.lock("x").unwrap();
    let e = g.unlock().unwrap_err();
    assert!(matches!(e, leasehold::Error::NoPermission { .. }), "{e:?}");
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
        .watchdog_lease(Duration::from_millis(1_500))
        .build()
        .unwrap();
    let guard = client.lock("orphan").unwrap();
    drop(client);
    // Still renewed: the guard keeps the client's internals alive. Half a
    // second past its first lease it would be gone for sure; renewed every
    // 500 ms, it has a second to spare.
    thread::sleep(Duration::from_millis(2_000));
    assert!(guard.is_held());
    let exists: bool = server.connection().exists("orphan").unwrap();
    assert!(exists);
    guard.unlock().unwrap();
    let exists: bool = server.connection().exists("orphan").unwrap();
    assert!(!exists);
}

/// The longest durations a setting takes are refused with a reason or
/// work: none overflows into a panic (`socket_timeout` of `Duration::MAX`
/// was doubled for the lease check; a Redlock node timeout multiplied by
/// ten).
#[test]
fn the_longest_durations_in_settings_never_panic() {
    let server = RedisServer::start();
    let url = server.url();
    let max = Duration::MAX;
    let built = [
        LockClient::builder(&url).socket_timeout(max).build(),
        LockClient::builder(&url).connect_timeout(max).build(),
        LockClient::builder(&url).watchdog_lease(max).build(),
    ];
    for (i, b) in built.into_iter().enumerate() {
        match b {
            Ok(client) => client.lock("max").unwrap().unlock().unwrap(),
            Err(e) => assert!(e.is_invalid_argument(), "setting {i}: {e:?}"),
        }
    }
    let redlock = [
        leasehold::Redlock::builder(&[&url])
            .node_timeout(max)
            .build(),
        leasehold::Redlock::builder(&[&url])
            .watchdog_lease(max)
            .build(),
        leasehold::Redlock::builder(&[&url])
            .retry_delay(max)
            .build(),
        leasehold::Redlock::builder(&[&url])
            .give_up_after(max)
            .build(),
    ];
    let holder = leasehold::Redlock::new(&[&url]).unwrap();
    let held = holder.lock("max:held").unwrap();
    for (i, r) in redlock.into_iter().enumerate() {
        match r {
            Ok(redlock) => {
                redlock.lock("max").unwrap().unlock().unwrap();
                // Busy: the pause between attempts (up to the retry
                // delay) ends at the wait's deadline.
                let busy = redlock.try_lock_for("max:held", Duration::from_millis(200));
                assert!(busy.unwrap().is_none(), "redlock setting {i}");
            }
            Err(e) => assert!(e.is_invalid_argument(), "redlock setting {i}: {e:?}"),
        }
    }
    held.unlock().unwrap();
}

/// A Redlock's explicit lease must leave a validity (the lease less the
/// round's time and the drift allowance) it could ever hold: one shorter
/// than a node timeout plus the drift allowance is refused. (A 1 ms
/// lease was taken and given back on every node, round after round, and a
/// bounded wait said the lock was busy.)
#[test]
fn a_redlock_lease_too_short_to_ever_be_valid_is_refused() {
    let server = RedisServer::start();
    let redlock = leasehold::Redlock::new(&[server.url()]).unwrap();
    let options = leasehold::RedlockOptions::new()
        .lease(Duration::from_millis(1))
        .wait(Duration::from_secs(1));
    let e = redlock.lock_with("rl:short", options).unwrap_err();
    assert!(e.is_invalid_argument(), "{e:?}");
    assert!(e.to_string().contains("node timeout"), "{e}");
}
