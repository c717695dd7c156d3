//! Redlock over five independent redis-servers, with fault proxies in front
//! of them: all up, every minority blackholed, a majority blackholed, a node
//! restarted empty during a hold, renewal on every node.

mod support;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use leasehold::{Error, Redlock, RedlockOptions};
use redis::Commands;
use support::proxy::{Fault, FaultProxy};
use support::{eventually, RedisServer};

/// Generous for loopback, so that a busy CI machine does not turn a live
/// node into a "no".
const NODE_TIMEOUT: Duration = Duration::from_millis(200);

struct Nodes {
    servers: Vec<RedisServer>,
    proxies: Vec<FaultProxy>,
}

impl Nodes {
    fn start() -> Nodes {
        let servers: Vec<RedisServer> = (0..5).map(|_| RedisServer::start()).collect();
        let proxies = servers
            .iter()
            .map(|s| FaultProxy::start(s.port()))
            .collect();
        Nodes { servers, proxies }
    }

    /// A Redlock through the proxies.
    fn redlock(&self, lease: Duration) -> Redlock {
        let urls: Vec<String> = self.proxies.iter().map(|p| p.url()).collect();
        Redlock::builder(&urls)
            .node_timeout(NODE_TIMEOUT)
            .watchdog_lease(lease)
            .retry_delay(Duration::from_millis(20))
            .build()
            .unwrap()
    }

    /// On how many nodes `key` exists.
    fn holding(&self, key: &str) -> usize {
        self.servers
            .iter()
            .filter(|s| s.connection().exists::<_, bool>(key).unwrap())
            .count()
    }

    fn set(&self, nodes: &[usize], fault: Fault) {
        for &i in nodes {
            self.proxies[i].set(fault);
        }
    }
}

#[test]
fn with_every_node_up_one_holder_at_a_time_and_every_node_has_it() {
    let nodes = Nodes::start();
    let a = nodes.redlock(Duration::from_secs(5));
    let b = nodes.redlock(Duration::from_secs(5));
    let g = a.lock("rl:up").unwrap();
    assert_eq!(g.nodes_held(), 5);
    assert_eq!(nodes.holding("rl:up"), 5);
    // Redisson's hash layout on each node, with the acquisition's own owner.
    let fields: Vec<String> = nodes.servers[0].connection().hkeys("rl:up").unwrap();
    assert!(
        fields.len() == 1 && fields[0].contains(":redlock-"),
        "{fields:?}"
    );
    assert!(b.try_lock("rl:up").unwrap().is_none());
    assert!(b
        .try_lock_for("rl:up", Duration::from_millis(200))
        .unwrap()
        .is_none());
    // Not reentrant: each acquisition is its own random value.
    assert!(a.try_lock("rl:up").unwrap().is_none());
    g.unlock().unwrap();
    assert_eq!(nodes.holding("rl:up"), 0);

    // Mutual exclusion: 2 Redlock clients × 3 threads.
    let inside = Arc::new(AtomicBool::new(false));
    let overlaps = Arc::new(AtomicUsize::new(0));
    let threads: Vec<_> = (0..6)
        .map(|i| {
            let r = if i % 2 == 0 { a.clone() } else { b.clone() };
            let (inside, overlaps) = (inside.clone(), overlaps.clone());
            thread::spawn(move || {
                for _ in 0..15 {
                    let g = r.lock("rl:mutex").unwrap();
                    if inside.swap(true, Ordering::SeqCst) {
                        overlaps.fetch_add(1, Ordering::SeqCst);
                    }
                    thread::sleep(Duration::from_millis(1));
                    inside.store(false, Ordering::SeqCst);
                    g.unlock().unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(overlaps.load(Ordering::SeqCst), 0);
    assert_eq!(nodes.holding("rl:mutex"), 0);
}

#[test]
fn every_minority_of_blackholed_nodes_still_grants_the_lock() {
    let nodes = Nodes::start();
    let redlock = nodes.redlock(Duration::from_secs(5));
    let mut subsets = Vec::new();
    for i in 0..5 {
        subsets.push(vec![i]);
        for j in i + 1..5 {
            subsets.push(vec![i, j]);
        }
    }
    assert_eq!(subsets.len(), 15);
    for down in &subsets {
        nodes.set(down, Fault::Blackhole);
        let asked = Instant::now();
        let g = redlock
            .try_lock("rl:minority")
            .unwrap()
            .unwrap_or_else(|| panic!("not granted with {down:?} down"));
        // Held on the reachable nodes (a majority), never on a cut-off one.
        let held = g.nodes_held();
        assert!((3..=5 - down.len()).contains(&held), "{down:?}: {held}");
        assert!(g.is_held());
        assert!(g.valid_until().expect("held") > Instant::now());
        assert!(g.remaining() > Duration::ZERO);
        assert!(asked.elapsed() < Duration::from_secs(2), "{down:?}");
        assert_eq!(nodes.holding("rl:minority"), held);
        g.unlock().unwrap();
        assert_eq!(nodes.holding("rl:minority"), 0, "{down:?}");
        nodes.set(down, Fault::Forward);
        // A node back from a partition may count as "no" for an attempt or
        // two while its pool reconnects (r2d2 does that in the background,
        // with backoff): wait until all five grant again.
        assert!(
            eventually(Duration::from_secs(3), || redlock
                .try_lock("rl:minority")
                .unwrap()
                .is_some_and(|g| g.nodes_held() == 5)),
            "not all nodes back after {down:?}"
        );
    }
}

#[test]
fn a_blackholed_majority_fails_typed_within_the_deadline_and_leaves_nothing() {
    let nodes = Nodes::start();
    let urls: Vec<String> = nodes.proxies.iter().map(|p| p.url()).collect();
    let build = |give_up_after: Duration| {
        Redlock::builder(&urls)
            .node_timeout(NODE_TIMEOUT)
            .retry_delay(Duration::from_millis(50))
            .give_up_after(give_up_after)
            .build()
            .unwrap()
    };
    // A bounded wait ends by its deadline: a wait that ran on until it
    // gave up (30 s here) would take fifteen times the bound.
    let patient = build(Duration::from_secs(30));
    let redlock = build(Duration::from_millis(800));
    nodes.set(&[0, 2, 4], Fault::Blackhole);
    let asked = Instant::now();
    let err = patient
        .try_lock_for("rl:majority", Duration::from_millis(600))
        .unwrap_err();
    let took = asked.elapsed();
    assert!(
        matches!(
            err,
            Error::NoQuorum {
                needed: 3,
                nodes: 5,
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("majority of the nodes"), "{err}");
    // The deadline, plus at most one attempt and its release in flight,
    // and a second for a loaded machine.
    assert!(
        took < Duration::from_millis(600) + NODE_TIMEOUT * 2 + Duration::from_secs(1),
        "gave up after {took:?}"
    );
    // Without a deadline it gives up after `give_up_after` (800 ms; the
    // default would be 5 s, a wait that never gives up for ever).
    let asked = Instant::now();
    let err = redlock.lock("rl:majority").unwrap_err();
    assert!(matches!(err, Error::NoQuorum { .. }), "{err}");
    assert!(
        asked.elapsed() < Duration::from_millis(800) + NODE_TIMEOUT * 2 + Duration::from_secs(1),
        "gave up after {:?}",
        asked.elapsed()
    );
    nodes.set(&[0, 2, 4], Fault::Forward);
    assert_eq!(nodes.holding("rl:majority"), 0, "nothing left behind");
    // Back once the nodes' pools have reconnected (in the background).
    assert!(eventually(Duration::from_secs(5), || redlock
        .try_lock("rl:majority")
        .is_ok_and(|g| g.is_some())));
}

/// A bounded wait that fails at its deadline gives back what its last
/// round took on the nodes that answered — at once, as the algorithm says
/// — though the wait's own deadline has passed: the give-back has its own
/// bound (the node timeout), not the caller's. Three of five servers
/// stopped (SIGSTOP): each live node is checked right after `try_lock_for`
/// returns, and again 300 ms later (before, both still held the key for
/// the whole lease).
#[test]
fn a_wait_that_fails_at_its_deadline_leaves_no_hold_on_the_live_nodes() {
    let servers: Vec<RedisServer> = (0..5).map(|_| RedisServer::start()).collect();
    let urls: Vec<String> = servers.iter().map(|s| s.url()).collect();
    let redlock = Redlock::builder(&urls)
        .node_timeout(NODE_TIMEOUT)
        .retry_delay(Duration::from_millis(20))
        .build()
        .unwrap();
    // Connected to every node before they stop.
    redlock
        .try_lock("rl:warm")
        .unwrap()
        .unwrap()
        .unlock()
        .unwrap();
    let mut live: Vec<redis::Connection> = servers[..2].iter().map(|s| s.connection()).collect();
    for s in &servers[2..] {
        s.signal("STOP");
    }
    let mut left = Vec::new();
    for round in 0..3 {
        let name = format!("rl:stopped:{round}");
        let err = redlock
            .try_lock_for(&name, Duration::from_secs(1))
            .unwrap_err();
        assert!(matches!(err, Error::NoQuorum { .. }), "{err}");
        let mut holding = || {
            live.iter_mut()
                .map(|c| usize::from(c.exists::<_, bool>(&name).unwrap()))
                .sum::<usize>()
        };
        let at_once = holding();
        thread::sleep(Duration::from_millis(300));
        let later = holding();
        left.push((at_once, later));
    }
    for s in &servers[2..] {
        s.signal("CONT");
    }
    assert!(
        left.iter()
            .all(|&(at_once, later)| at_once == 0 && later == 0),
        "live nodes still holding (right after, 300 ms later), per try: {left:?}"
    );
}

#[test]
fn a_node_restarted_empty_during_a_hold_costs_the_hold_only_with_a_majority() {
    let mut nodes = Nodes::start();
    let redlock = nodes.redlock(Duration::from_secs(2));
    let other = nodes.redlock(Duration::from_secs(2));
    let g = redlock.lock("rl:restart").unwrap();
    let lost = g.lost().receiver();
    nodes.servers[0].restart();
    // The restarted node forgot the hold; its renewal says so. Four of five
    // still have it: the hold stands, and nobody else can take it.
    thread::sleep(Duration::from_millis(1_500)); // two renewals
    assert!(g.is_held());
    assert!(lost.try_recv().is_err());
    assert!(other.try_lock("rl:restart").unwrap().is_none());
    assert_eq!(nodes.holding("rl:restart"), 4);
    // Two more restarted: only two of five remain — the hold is lost, and
    // the holder is told.
    nodes.servers[1].restart();
    nodes.servers[2].restart();
    let why = lost
        .recv_timeout(Duration::from_secs(5))
        .expect("the lost signal");
    assert!(!g.is_held(), "{why:?}");
    assert_eq!(redlock.leases_lost(), 1);
    assert!(matches!(g.unlock(), Err(Error::NotHeld { .. })));
    assert!(other.try_lock("rl:restart").unwrap().is_some());
}

#[test]
fn holds_are_renewed_on_every_node_and_lost_when_a_majority_is_cut_off() {
    let nodes = Nodes::start();
    let redlock = nodes.redlock(Duration::from_secs(2));
    let g = redlock.lock("rl:renew").unwrap();
    thread::sleep(Duration::from_millis(3_000));
    assert!(g.is_held(), "renewed past its 2 s lease");
    for s in &nodes.servers {
        let ttl: i64 = s.connection().pttl("rl:renew").unwrap();
        assert!(ttl > 0, "renewed on every node: {ttl}");
    }
    let lost = g.lost().receiver();
    nodes.set(&[1, 3, 4], Fault::Blackhole);
    let why = lost
        .recv_timeout(Duration::from_secs(5))
        .expect("lost once a majority cannot be renewed");
    assert!(!g.is_held(), "{why:?}");
    nodes.set(&[1, 3, 4], Fault::Forward);
    drop(g);
    assert!(eventually(Duration::from_secs(3), || nodes
        .holding("rl:renew")
        == 0));

    // An explicit lease is not renewed; the guard's validity is what was
    // left of it after the attempt.
    let short = redlock
        .lock_with(
            "rl:short",
            RedlockOptions::new().lease(Duration::from_millis(500)),
        )
        .unwrap();
    assert!(short.valid_until().expect("held") <= Instant::now() + Duration::from_millis(500));
    thread::sleep(Duration::from_millis(600));
    assert!(!short.is_held());
    // A wait on a busy Redlock ends at its cancel, not at its 60 s bound
    // (what fencing or a fair kind would ask is not offered at compile
    // time: RedlockOptions has no such setter).
    let _held = redlock.lock("rl:busy").unwrap();
    let stop = leasehold::Cancel::new();
    let started = Instant::now();
    let err = thread::scope(|s| {
        let waiting = s.spawn(|| {
            redlock.lock_with(
                "rl:busy",
                RedlockOptions::new()
                    .wait(Duration::from_secs(60))
                    .cancel_on(&stop),
            )
        });
        thread::sleep(Duration::from_millis(300));
        stop.cancel();
        waiting.join().unwrap().unwrap_err()
    });
    assert!(err.is_cancelled(), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(6),
        "{:?}",
        started.elapsed()
    );
    // A wait given a handle cancelled already ends before its first round.
    let err = redlock
        .try_lock_with("rl:free", RedlockOptions::new().cancel_on(&stop))
        .unwrap_err();
    assert!(err.is_cancelled(), "{err}");
}

#[test]
fn waits_of_duration_max_mean_no_deadline_and_do_not_panic() {
    let server = RedisServer::start();
    let redlock = Redlock::builder(&[server.url()])
        .node_timeout(NODE_TIMEOUT)
        .build()
        .unwrap();
    let g = redlock
        .try_lock_for("rl:max", Duration::MAX)
        .unwrap()
        .expect("a free lock");
    g.unlock().unwrap();
    let g = redlock
        .lock_with("rl:max", RedlockOptions::new().wait(Duration::MAX))
        .unwrap();
    assert!(g.is_held());
}

/// A renewed hold's validity moves with its renewals, and its lost signal
/// ends at the release: a thread waiting on it returns `None` (the review
/// found the wait blocked for good, and `remaining()` at zero once the
/// first lease's span had passed while the hold was still renewed).
#[test]
fn a_renewed_hold_stays_valid_and_its_lost_signal_ends_at_the_release() {
    let nodes = Nodes::start();
    let redlock = nodes.redlock(Duration::from_secs(3));
    let g = redlock.lock("renewed").unwrap();
    let first = g.valid_until().expect("held");
    // Past the first lease's span: renewed every second since.
    thread::sleep(Duration::from_millis(4_500));
    assert!(g.is_held());
    let later = g.valid_until().expect("still held");
    assert!(
        later > first + Duration::from_secs(1),
        "{:?}",
        later - first
    );
    assert!(g.remaining() > Duration::ZERO);
    let watch = g.lost();
    let (tx, rx) = std::sync::mpsc::channel();
    let waiter = thread::spawn(move || tx.send(watch.wait()).unwrap());
    g.unlock().unwrap();
    let ended = rx.recv_timeout(Duration::from_secs(10));
    assert_eq!(ended, Ok(None), "the wait did not end at the release");
    waiter.join().unwrap();
}

/// A watchdog hold whose renewals stopped reaching the nodes is held, as
/// its guard tells it, only until its validity: the nodes' leases less the
/// drift allowance (`valid_until()`), not until the nodes' leases
/// themselves, and its lost signal has fired by then. (An 8 s lease allows
/// 82 ms of drift; the renewal thread reported a node lost 70 ms before its
/// lease ended with a 30 ms node timeout: `is_held()` said true, and
/// `lost()` nothing, for the 12 ms between.)
#[test]
fn a_watchdog_hold_is_held_no_longer_than_its_validity() {
    let nodes = Nodes::start();
    let urls: Vec<String> = nodes.proxies.iter().map(|p| p.url()).collect();
    // Tries on (a loaded machine may answer a round late) rather than
    // giving up after 5 s.
    let redlock = Redlock::builder(&urls)
        .node_timeout(Duration::from_millis(30))
        .watchdog_lease(Duration::from_secs(8))
        .give_up_after(Duration::from_secs(60))
        .build()
        .unwrap();
    let guard = redlock.lock("rl:drift").unwrap();
    nodes.set(&[0, 1, 2, 3, 4], Fault::Blackhole);
    let valid_until = guard.valid_until().expect("held");
    std::thread::sleep(valid_until.saturating_duration_since(Instant::now()));
    std::thread::sleep(Duration::from_millis(2));
    assert!(
        !guard.is_held(),
        "held {:?} past its validity",
        valid_until.elapsed()
    );
    assert_eq!(guard.valid_until(), None);
    // And its lost signal has told it by then.
    assert!(
        guard.lost().check().is_some(),
        "not told lost {:?} past its validity",
        valid_until.elapsed()
    );
    nodes.set(&[0, 1, 2, 3, 4], Fault::Forward);
}

/// A bounded wait on a lock held elsewhere ends as its deadline (`None`),
/// also when the round at the deadline is cut short: its nodes answered
/// every earlier round, so their silence is the wait running out, not
/// Redis failing. (Round trips of 30 ms here, longer than the 20 ms a last
/// round at the deadline is given: it ended `NoQuorum`.)
#[test]
fn a_bounded_wait_on_a_busy_lock_over_a_slow_network_ends_as_its_deadline() {
    let nodes = Nodes::start();
    let holder = nodes.redlock(Duration::from_secs(30));
    let held = holder.lock("rl:busy").unwrap();
    nodes.set(&[0, 1, 2, 3, 4], Fault::Delay(Duration::from_millis(15)));
    let urls: Vec<String> = nodes.proxies.iter().map(|p| p.url()).collect();
    // Its pause between rounds is always cut short by the deadline.
    let waiter = Redlock::builder(&urls)
        .node_timeout(NODE_TIMEOUT)
        .retry_delay(Duration::from_secs(10))
        .build()
        .unwrap();
    for _ in 0..3 {
        let got = waiter.try_lock_for("rl:busy", Duration::from_millis(300));
        assert!(matches!(got, Ok(None)), "{got:?}");
    }
    nodes.set(&[0, 1, 2, 3, 4], Fault::Forward);
    held.unlock().unwrap();
}
