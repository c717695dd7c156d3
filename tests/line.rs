//! Contention across processes: the line of waiting clients in Redis and
//! the direct grants of the plain lock. A granted waiter that died costs the
//! next one a grant lease, not a watchdog lease; a waiter of another library
//! (Redisson's protocol, played on a plain connection) still gets the lock
//! while leasehold processes hammer it, and one that never takes it costs
//! leasehold's waiters its 20 ms, not a second; waiters of eight processes
//! each get turns; a single try or a waiter that gives up leaves nothing in line;
//! the places of a line whose waiters all died expire by themselves; a
//! grant heard twice is not taken for a new one.

#[path = "child/holder.rs"]
mod child;
mod support;

use std::process::Stdio;
use std::thread;
use std::time::{Duration, Instant};

use leasehold::{LockClient, LockOptions};
use redis::Commands;
use support::{
    child_command, child_done, eventually, listening_clients, ChildProcess, RedisServer,
};

/// Places in the line of lock `name`.
fn line_len(server: &RedisServer, name: &str) -> usize {
    server
        .connection()
        .llen(format!("leasehold_line:{{{name}}}"))
        .unwrap()
}

/// Keys of the line (the list; its yield marker when set).
fn line_keys(server: &RedisServer, name: &str) -> Vec<String> {
    server
        .connection()
        .keys(format!("leasehold_line:{{{name}}}*"))
        .unwrap()
}

/// The line's elements, oldest first: (until when the place lives, ms by
/// the server's clock; the place) — an element is `<until>|<place>`.
fn line_elements(server: &RedisServer, name: &str) -> Vec<(u64, String)> {
    let line: Vec<String> = server
        .connection()
        .lrange(format!("leasehold_line:{{{name}}}"), 0, -1)
        .unwrap();
    line.iter()
        .map(|el| {
            let (until, place) = el.split_once('|').expect("an element");
            (until.parse().expect("an expiry"), place.to_owned())
        })
        .collect()
}

/// `hammer` children: each takes and releases `name` in a loop for `millis`.
fn hammers(url: &str, name: &str, n: usize, millis: u64) -> Vec<std::process::Child> {
    (0..n)
        .map(|_| {
            child_command(&["hammer", url, name, &millis.to_string()])
                .stdout(Stdio::piped())
                .spawn()
                .expect("start a hammer child")
        })
        .collect()
}

/// `holder` takes `name`, `waiter` waits for it in line with `opts`, the
/// holder releases: the waiter's guard (owned, to come back from the
/// waiting thread).
fn granted_after_waiting(
    server: &RedisServer,
    holder: &LockClient,
    waiter: &LockClient,
    name: &'static str,
    opts: LockOptions,
) -> leasehold::OwnedLockGuard {
    let guard = holder.lock(name).unwrap();
    let t = {
        let waiter = waiter.clone();
        thread::spawn(move || waiter.lock_owned_with(name, opts).unwrap())
    };
    assert!(eventually(Duration::from_secs(5), || line_len(
        server, name
    ) == 1));
    guard.unlock().unwrap();
    t.join().unwrap()
}

fn sections(children: Vec<std::process::Child>) -> Vec<u64> {
    children
        .into_iter()
        .map(|c| child_done(&c.wait_with_output().unwrap()))
        .collect()
}

#[test]
fn a_killed_granted_waiter_costs_the_next_one_a_grant_lease_not_a_watchdog_lease() {
    let server = RedisServer::start();
    let name = "line:killed";
    // Watchdog leases of two minutes: a grant with a whole one would keep
    // the next waiter out past its 20 s wait, against about 3 s here.
    let holder = LockClient::builder(&server.url())
        .watchdog_lease(Duration::from_secs(120))
        .build()
        .unwrap();
    let guard = holder.lock(name).unwrap();
    // A waiter in another process, first in line …
    let mut first = ChildProcess::start(&[&server.url(), name, "120000"]);
    assert!(eventually(Duration::from_secs(10), || line_len(
        &server, name
    ) == 1));
    // … killed right away: its place lives on until it would have been confirmed.
    first.kill();
    let next = LockClient::builder(&server.url())
        .watchdog_lease(Duration::from_secs(120))
        .build()
        .unwrap();
    let waiter = thread::spawn(move || {
        let got = next.try_lock_for(name, Duration::from_secs(20)).unwrap();
        (got.is_some(), Instant::now())
    });
    assert!(eventually(Duration::from_secs(10), || line_len(
        &server, name
    ) == 2));
    let released = Instant::now();
    guard.unlock().unwrap();
    let (got, at) = waiter.join().unwrap();
    assert!(got, "the next waiter got the lock");
    let delay = at - released;
    assert!(
        delay >= Duration::from_millis(900),
        "the release granted the lock to the dead waiter first (it was first in line): {delay:?}"
    );
    assert!(
        delay < Duration::from_secs(8),
        "a dead grantee costs a grant lease (3 s) and a confirmation, not the 120 s watchdog lease: {delay:?}"
    );
}

/// Redisson's `RLock` acquire and release scripts, as its client sends them.
const REDISSON_ACQUIRE: &str = r#"
if ((redis.call('exists', KEYS[1]) == 0) or (redis.call('hexists', KEYS[1], ARGV[2]) == 1)) then
    redis.call('hincrby', KEYS[1], ARGV[2], 1);
    redis.call('pexpire', KEYS[1], ARGV[1]);
    return nil;
end;
return redis.call('pttl', KEYS[1]);
"#;
const REDISSON_RELEASE: &str = r#"
if (redis.call('hexists', KEYS[1], ARGV[3]) == 0) then
    return nil;
end;
local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1);
if (counter > 0) then
    redis.call('pexpire', KEYS[1], ARGV[2]);
    return 0;
else
    redis.call('del', KEYS[1]);
    redis.call('publish', KEYS[2], ARGV[1]);
    return 1;
end;
"#;

#[test]
fn a_redisson_waiter_gets_the_lock_while_leasehold_processes_hammer_it() {
    let server = RedisServer::start();
    let name = "line:mixed";
    let channel = format!("redisson_lock__channel:{{{name}}}");
    let children = hammers(&server.url(), name, 4, 4_000);
    // The hammers wait in line for each other.
    assert!(eventually(Duration::from_secs(10), || line_len(
        &server, name
    ) >= 1));
    // A Redisson waiter: subscribe, then try; retry on every message or when
    // the holder's lease would have run out (as `RedissonLock.lock()` does).
    let client = redis::Client::open(server.url()).unwrap();
    let mut con = client.get_connection().unwrap();
    let mut sub = client.get_connection().unwrap();
    let mut pubsub = sub.as_pubsub();
    pubsub.subscribe(&channel).unwrap();
    pubsub
        .set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let (acquire, release) = (
        redis::Script::new(REDISSON_ACQUIRE),
        redis::Script::new(REDISSON_RELEASE),
    );
    let owner = "0a0b0c0d-0000-4000-8000-000000c0ffee:1";
    let started = Instant::now();
    loop {
        let ttl: Option<i64> = acquire
            .key(name)
            .arg(30_000)
            .arg(owner)
            .invoke(&mut con)
            .unwrap();
        if ttl.is_none() {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the Redisson waiter never got the lock"
        );
        let _ = pubsub.get_message(); // a message, or 100 ms
    }
    let waited = started.elapsed();
    println!("the Redisson waiter got in after {waited:?}");
    let fields: Vec<String> = con.hkeys(name).unwrap();
    assert_eq!(fields, [owner], "the lock is the Redisson client's alone");
    // It got in while the hammers were at it, not once they stopped (4 s
    // after they started): one of them waits in line behind it. Once the
    // hammers stop, nobody queues again.
    assert!(
        eventually(Duration::from_secs(2), || line_len(&server, name) >= 1),
        "the Redisson waiter got in only once the hammers stopped, after {waited:?}"
    );
    let freed: Option<i64> = release
        .key(name)
        .key(&channel)
        .arg(0)
        .arg(30_000)
        .arg(owner)
        .invoke(&mut con)
        .unwrap();
    assert_eq!(freed, Some(1));
    let done = sections(children);
    assert!(
        done.iter().all(|&n| n > 0),
        "every hammer got turns: {done:?}"
    );
}

/// Another library's waiter that is subscribed but never takes the lock
/// (a slow one): every third release leaves the lock to it for 20 ms, and
/// the first leasehold waiter in line is told on its grant channel to try
/// again after that — it does not sleep until it next confirms its place
/// (a second), since it does not hear the unlock channel.
#[test]
fn a_release_left_to_another_librarys_waiter_costs_leasehold_waiters_20_ms_not_a_second() {
    let server = RedisServer::start();
    let name = "line:yield";
    let channel = format!("redisson_lock__channel:{{{name}}}");
    let client = redis::Client::open(server.url()).unwrap();
    let mut sub = client.get_connection().unwrap();
    let mut silent = sub.as_pubsub();
    silent.subscribe(&channel).unwrap();
    let workers: Vec<_> = (0..3)
        .map(|_| {
            let c = LockClient::new(&server.url()).unwrap();
            thread::spawn(move || {
                let (mut longest, mut total) = (Duration::ZERO, Duration::ZERO);
                for _ in 0..20 {
                    let asked = Instant::now();
                    let g = c.lock(name).unwrap();
                    longest = longest.max(asked.elapsed());
                    total += asked.elapsed();
                    thread::sleep(Duration::from_millis(1));
                    g.unlock().unwrap();
                }
                (longest, total)
            })
        })
        .collect();
    let waits: Vec<(Duration, Duration)> = workers.into_iter().map(|w| w.join().unwrap()).collect();
    let longest = waits.iter().map(|w| w.0).max().unwrap();
    let total: Duration = waits.iter().map(|w| w.1).sum();
    let yields: Vec<String> = server.connection().keys(format!("*{name}*yield")).unwrap();
    // `PSETEX` counts the grants made while the silent waiter listens and
    // the yields to it (one in three of them).
    let psetex = server.command_calls().get("psetex").copied().unwrap_or(0);
    println!(
        "longest wait {longest:?}, all waits {total:?}, {psetex} grants and yields, yield keys {yields:?}"
    );
    assert!(psetex > 0, "the lock was left to the silent waiter");
    // A yield costs each leasehold waiter about 20 ms: all 60 waits take
    // 1-2 s together with ~20 yields. Sleeping until it next confirms its
    // place instead (a second; half a second on average), each yield would
    // cost the waiting workers about 500 ms each. The budget: 100 ms a
    // grant or yield, and 5 s for the waits' own handoffs on a loaded
    // machine (~11 s, against about 30 s the other way).
    let budget = Duration::from_millis(100) * psetex as u32 + Duration::from_secs(5);
    assert!(
        total < budget,
        "the waits took {total:?} for {psetex} grants and yields (budget {budget:?}; longest {longest:?})"
    );
}

#[test]
fn waiters_of_eight_processes_each_get_turns() {
    let server = RedisServer::start();
    let name = "line:eight";
    let done = sections(hammers(&server.url(), name, 8, 3_000));
    let mean = done.iter().sum::<u64>() as f64 / done.len() as f64;
    let least = *done.iter().min().unwrap() as f64;
    assert!(
        least >= mean / 4.0 && least > 0.0,
        "each process gets its turns in line: {done:?}"
    );
    assert!(line_keys(&server, name).is_empty(), "nothing left in line");
}

#[test]
fn a_single_try_takes_no_place_and_a_waiter_that_gives_up_leaves_at_once() {
    let server = RedisServer::start();
    let name = "line:leave";
    let holder = LockClient::new(&server.url()).unwrap();
    let other = LockClient::new(&server.url()).unwrap();
    let guard = holder.lock(name).unwrap();
    assert!(other.try_lock(name).unwrap().is_none());
    assert!(
        line_keys(&server, name).is_empty(),
        "a single try leaves nothing"
    );
    let waiter = {
        let other = other.clone();
        thread::spawn(move || {
            // Seconds: the checks below must see it waiting first.
            let got = other.try_lock_for(name, Duration::from_secs(3));
            got.map(|g| g.is_some())
        })
    };
    assert!(eventually(Duration::from_secs(5), || line_len(
        &server, name
    ) == 1));
    // It subscribes to its grant channel after its place is in line.
    assert!(eventually(Duration::from_secs(5), || listening_clients(
        &server, name
    ) == 1));
    assert!(!waiter.join().unwrap().unwrap());
    // Left at once — or, its last try answered after its deadline (a
    // loaded machine), by the undo thread a round trip later — never by
    // its place expiring (up to 3 s).
    assert!(
        eventually(Duration::from_millis(300), || line_keys(&server, name)
            .is_empty()),
        "the waiter left the line when it gave up: {:?}",
        line_keys(&server, name)
    );
    guard.unlock().unwrap();
    // With nobody in line, a release publishes as before and the lock is free.
    let exists: bool = server.connection().exists(name).unwrap();
    assert!(!exists);
}

#[test]
fn a_granted_hold_is_lengthened_to_its_watchdog_lease_by_renewal() {
    let server = RedisServer::start();
    let name = "line:granted";
    let holder = LockClient::new(&server.url()).unwrap();
    let waiter = LockClient::new(&server.url()).unwrap(); // 30 s watchdog lease
    let granted = granted_after_waiting(&server, &holder, &waiter, name, LockOptions::new());
    let pttl: i64 = server.connection().pttl(name).unwrap();
    assert!(
        pttl <= 3_000,
        "granted with the short grant lease, not the watchdog's: {pttl}"
    );
    // Past the grant lease: renewal has lengthened it to the watchdog lease.
    thread::sleep(Duration::from_millis(3_500));
    assert!(granted.is_held());
    let pttl: i64 = server.connection().pttl(name).unwrap();
    assert!(pttl > 20_000, "renewed to the 30 s watchdog lease: {pttl}");
    assert!(waiter.stats().renewals_sent >= 1);
    granted.unlock().unwrap();
}

/// A grant heard again — the copy of one a waiter already used, arriving
/// while it waits again with a new place (a subscriber reconnecting while a
/// publish was in flight, a proxy retrying) — is not taken for a new one:
/// the waiter stays in line while the lock is held, and takes it at the
/// next release. (The protocol simulator checks the protocol under such
/// copies: `grants_heard_twice_are_never_taken_for_new_ones`; this, the
/// client.)
#[test]
fn a_grant_heard_again_is_not_taken_for_a_new_one() {
    let server = RedisServer::start();
    let name = "line:twice";
    let holder = LockClient::new(&server.url()).unwrap();
    let waiter = LockClient::new(&server.url()).unwrap();
    let places = || -> Vec<String> {
        line_elements(&server, name)
            .into_iter()
            .map(|(_, place)| place)
            .collect()
    };
    // A first wait, granted at the holder's release.
    let guard = holder.lock(name).unwrap();
    let t = {
        let waiter = waiter.clone();
        thread::spawn(move || waiter.lock_owned(name).unwrap())
    };
    assert!(eventually(Duration::from_secs(5), || places().len() == 1));
    let first = places()[0].clone();
    guard.unlock().unwrap();
    t.join().unwrap().unlock().unwrap();
    // A second wait, behind the holder again, with a place of its own.
    let guard = holder.lock(name).unwrap();
    let (held, got) = std::sync::mpsc::channel();
    let t = {
        let waiter = waiter.clone();
        thread::spawn(move || {
            let guard = waiter.lock_owned(name).unwrap();
            held.send(()).unwrap();
            guard
        })
    };
    assert!(eventually(Duration::from_secs(5), || places().len() == 1));
    let second = places()[0].clone();
    assert_ne!(first, second, "every wait takes a place of its own");
    // The first grant, heard again on the waiter's client's grant channel.
    let client = first.split(':').next().unwrap();
    let channel = format!("leasehold_grant:{{{name}}}:{client}");
    let heard: i64 = server.connection().publish(&channel, &first).unwrap();
    assert_eq!(heard, 1, "the waiter's client hears its grant channel");
    // Taken for a grant, the copy would end the wait within milliseconds.
    assert!(
        got.recv_timeout(Duration::from_secs(1)).is_err(),
        "a copy of an old grant was taken while the lock is held"
    );
    assert!(guard.is_held());
    assert_eq!(places(), vec![second], "still in line, in its place");
    guard.unlock().unwrap();
    got.recv_timeout(Duration::from_secs(10))
        .expect("granted at the release");
    let granted = t.join().unwrap();
    assert!(granted.is_held());
    granted.unlock().unwrap();
}

#[test]
fn a_waiter_with_an_explicit_lease_takes_a_grant_with_that_lease() {
    let server = RedisServer::start();
    let name = "line:explicit";
    let holder = LockClient::new(&server.url()).unwrap();
    let waiter = LockClient::new(&server.url()).unwrap();
    let opts = LockOptions::new().lease(Duration::from_secs(20));
    let granted = granted_after_waiting(&server, &holder, &waiter, name, opts);
    let pttl: i64 = server.connection().pttl(name).unwrap();
    assert!(
        pttl > 15_000,
        "the grant was taken by an attempt with the waiter's own 20 s lease: {pttl}"
    );
    let fields: Vec<(String, i64)> = server.connection().hgetall(name).unwrap();
    assert_eq!(fields.len(), 1);
    assert_eq!(fields[0].1, 1, "one hold, not a grant plus a hold");
    granted.unlock().unwrap();
    let exists: bool = server.connection().exists(name).unwrap();
    assert!(!exists);
}

/// The line of waiters that all died goes by itself: the line expires one
/// to two place leases (3–6 s) after a place was last taken or confirmed —
/// its elements have no expiry of their own — while the lock
/// stays held and no script of another client comes by to drop them. (The
/// list had no expiry: it stayed for good when no release came by after,
/// found by the protocol simulator.)
#[test]
fn the_line_of_waiters_that_all_died_goes_by_itself() {
    let server = RedisServer::start();
    let holder = LockClient::new(&server.url()).unwrap();
    let name = "line:dead";
    let guard = holder.lock(name).unwrap();
    let url = server.url();
    let mut waiter = ChildProcess::start(&[&url, name, "30000"]);
    assert!(eventually(Duration::from_secs(5), || line_len(
        &server, name
    ) == 1));
    assert_eq!(
        line_keys(&server, name),
        vec![format!("leasehold_line:{{{name}}}")],
        "the line alone: each place's expiry is in its element"
    );
    waiter.kill();
    // It lives at most two place leases (6 s) after the waiter last
    // confirmed its place — by Redis's clock, read as its expiry, not by
    // ours; living with the lock, it would stay as long as the lock's
    // renewed lease (for ever, here).
    let ttl: i64 = server
        .connection()
        .pttl(format!("leasehold_line:{{{name}}}"))
        .unwrap();
    assert!((1..=6000).contains(&ttl), "the line's expiry: {ttl} ms");
    let killed = Instant::now();
    assert!(
        eventually(Duration::from_secs(15), || line_keys(&server, name)
            .is_empty()),
        "left: {:?}",
        line_keys(&server, name)
    );
    println!("the line went {:?} after the kill", killed.elapsed());
    assert!(guard.is_held());
    guard.unlock().unwrap();
    assert!(line_keys(&server, name).is_empty());
}

/// A waiter confirming its place rewrites its element where it stands (the
/// element the last reply named, `LPOS` + `LSET`): after many
/// confirmations the line still has one element per waiter, in arrival
/// order, each with a later expiry — and the grants go in that order. (A
/// confirmation that pushed its place again would grow the line by one
/// element per confirmation: 500 ms each here, for 4 s.)
#[test]
fn confirmations_rewrite_each_place_where_it_stands() {
    let server = RedisServer::start();
    let name = "line:confirm";
    let holder = LockClient::new(&server.url()).unwrap();
    let line = || line_elements(&server, name);
    let guard = holder.lock(name).unwrap();
    // A lease of 1.5 s: the place lives 1.5 s unconfirmed and is
    // confirmed every 500 ms (a second of slack for each confirmation on a
    // loaded machine).
    let short = LockOptions::new().lease(Duration::from_millis(1_500));
    let (order, got) = std::sync::mpsc::channel();
    let mut waiters = Vec::new();
    for i in 0..2 {
        let client = LockClient::new(&server.url()).unwrap();
        let (order, short) = (order.clone(), short.clone());
        waiters.push(thread::spawn(move || {
            let g = client.lock_with(name, short).unwrap();
            order.send(i).unwrap();
            g.unlock().unwrap();
        }));
        assert!(eventually(Duration::from_secs(5), || line().len() == i + 1));
    }
    let before = line();
    thread::sleep(Duration::from_secs(4));
    let after = line();
    let places = |l: &[(u64, String)]| l.iter().map(|(_, p)| p.clone()).collect::<Vec<_>>();
    assert_eq!(
        places(&after),
        places(&before),
        "one element each, in order"
    );
    for ((was, _), (now, place)) in before.iter().zip(&after) {
        assert!(now > was, "{place}: confirmed in place ({was} → {now})");
    }
    guard.unlock().unwrap();
    let served: Vec<usize> = (0..2)
        .map(|_| got.recv_timeout(Duration::from_secs(10)).unwrap())
        .collect();
    assert_eq!(served, vec![0, 1], "granted in arrival order");
    for w in waiters {
        w.join().unwrap();
    }
    assert!(line().is_empty());
}

/// A copy of the holder's own place left in line — a wait of its that
/// ended while an earlier attempt of it was still on its way to Redis, and
/// pushed the place again when it got there — is dropped by the holder's
/// release, never granted back to it (which would hold the lock for nobody
/// for a grant lease): the lock is free at once.
#[test]
fn a_release_never_grants_the_lock_back_to_its_own_owner() {
    let server = RedisServer::start();
    let name = "line:own";
    let client = LockClient::new(&server.url()).unwrap();
    let mut con = server.connection();
    let guard = client.lock(name).unwrap();
    let owners: Vec<String> = con.hkeys(name).unwrap();
    assert_eq!(owners.len(), 1, "{owners:?}");
    // A live copy of a place of the holder's owner (60 s by the server's
    // clock), first in line.
    let time: Vec<u64> = redis::cmd("TIME").query(&mut con).unwrap();
    let until = time[0] * 1000 + time[1] / 1000 + 60_000;
    let line = format!("leasehold_line:{{{name}}}");
    let _: () = con
        .rpush(&line, format!("{until}|{}#99@3000/3000", owners[0]))
        .unwrap();
    guard.unlock().unwrap();
    let held: bool = con.exists(name).unwrap();
    assert!(!held, "granted back to its own owner: held for nobody");
    let left: usize = con.llen(&line).unwrap();
    assert_eq!(left, 0, "the copy is dropped");
    // The lock is free for anyone at once.
    let other = LockClient::new(&server.url()).unwrap();
    assert!(other.try_lock(name).unwrap().is_some());
}
