//! Leader election (issue 39) against a real server: one leader at a time
//! with a term that only grows, who leads visible to anyone, a resignation
//! handing over at once, a lost lease told; four candidate processes
//! through a SIGKILL, a SIGSTOP past the lease and a resignation — a new
//! leader within lease + 1 s each time, terms strictly increasing, no two
//! leaders' acts overlapping, a stale term's fenced write refused — and a
//! thousand follower tasks costing no thread each, a resignation waking
//! one of them.

#[path = "child/election.rs"]
mod child;
mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use leasehold::{AsyncLockClient, FencedStore, LockClient, Role};
use redis::Commands;
use support::{ChildProcess, Monitor, RedisServer};

/// The tests of this binary run one at a time: one counts the process's
/// threads.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn client(server: &RedisServer, lease: Duration) -> LockClient {
    LockClient::builder(&server.url())
        .watchdog_lease(lease)
        // Over a slow round trip on a loaded machine (a call past it is an
        // error, and these tests unwrap); a renewal past it loses the lease.
        .socket_timeout(Duration::from_millis(800))
        .client_name("candidate")
        .connect()
        .unwrap()
}

#[test]
fn one_leader_at_a_time_visible_to_all_and_a_resignation_hands_over_at_once() {
    let _serial = serial();
    let server = RedisServer::start();
    let lease = Duration::from_secs(3); // B's place: 3 s, confirmed every second
    let (a, b) = (client(&server, lease), client(&server, lease));
    let observer = LockClient::connect(&server.url()).unwrap();
    assert_eq!(observer.election("e").leader().unwrap(), None);

    let first = a.election("e").campaign().unwrap();
    assert_eq!(first.role(), Role::Leader { term: first.term() });
    assert!(b.election("e").try_campaign().unwrap().is_none());
    let leader = observer.election("e").leader().unwrap().expect("a leader");
    assert_eq!(leader.term, first.term());
    // The client's registration is written by its renewal thread a moment
    // after the campaign (never on the lock path): wait for it, at most 5 s.
    let mut leader = leader;
    assert!(
        support::eventually(Duration::from_secs(5), || {
            leader = observer.election("e").leader().unwrap().expect("a leader");
            leader.client.is_some()
        }),
        "the leader's client never registered"
    );
    let who = leader.client.clone().expect("a registered client");
    assert_eq!(
        (who.pid, who.name.as_deref()),
        (Some(std::process::id()), Some("candidate"))
    );
    assert_eq!(leader.since, Some(first.since()));

    // B waits as a follower; A resigns: the release hands the lock to B's
    // place in the line in the same script, so B holds it in Redis as soon
    // as the resignation returns — no attempt of B's needed (a release that
    // only published would leave it free until B's next attempt).
    let (term_a, b2) = (first.term(), b.clone());
    let key = first.key().to_owned();
    let mut con = server.connection();
    let follower = std::thread::spawn(move || b2.election("e").campaign().unwrap());
    let line = format!("leasehold_line:{{{key}}}");
    assert!(
        support::eventually(Duration::from_secs(10), || con
            .llen::<_, i64>(&line)
            .unwrap()
            == 1),
        "B never stood in line"
    );
    let a_holds: Vec<String> = con.hkeys(&key).unwrap();
    first.resign().unwrap();
    let b_holds: Vec<String> = con.hkeys(&key).unwrap();
    assert!(
        b_holds.len() == 1 && b_holds != a_holds,
        "held by {b_holds:?} right after A ({a_holds:?}) resigned"
    );
    let second = follower.join().unwrap();
    assert_eq!(second.key(), key);
    assert!(second.term() > term_a, "{} > {term_a}", second.term());

    // The deposed leader's term is refused by the fenced resource.
    let store = FencedStore::new("store");
    assert!(store.write(&mut con, second.term(), "b").unwrap());
    assert!(!store.write(&mut con, term_a, "a, late").unwrap());

    // A lease lost (removed by hand) is told: the role says so.
    let _: () = con.del(second.key()).unwrap();
    let why = second.lost().wait_timeout(Duration::from_secs(10));
    assert!(why.is_some());
    assert!(
        matches!(second.role(), Role::Lost { why: Some(_), .. }),
        "{:?}",
        second.role()
    );
}

/// The leader's term, as the child that leads published it.
fn leader(con: &mut redis::Connection) -> Option<(u32, u64)> {
    let v: Option<String> = con.get("leader").unwrap();
    v.map(|v| {
        let (pid, term) = v.split_once(' ').unwrap();
        (pid.parse().unwrap(), term.parse().unwrap())
    })
}

/// Waits for a leader other than `old` (by term), up to `within`: the new
/// leader and how long it took.
fn next_leader(
    con: &mut redis::Connection,
    old_term: u64,
    since: Instant,
    within: Duration,
) -> ((u32, u64), Duration) {
    loop {
        if let Some(l) = leader(con).filter(|l| l.1 != old_term) {
            return (l, since.elapsed());
        }
        assert!(
            since.elapsed() < within * 3,
            "no new leader after {:?}",
            since.elapsed()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn four_candidate_processes_through_a_kill_a_stop_and_a_resignation() {
    let _serial = serial();
    let server = RedisServer::start();
    let lease = Duration::from_millis(2_000);
    let within = lease + Duration::from_secs(1);
    let mut con = server.connection();
    let lease_ms = lease.as_millis().to_string();
    let mut children: Vec<ChildProcess> = (0..4)
        .map(|_| ChildProcess::start(&["candidate", &server.url(), &lease_ms]))
        .collect();
    let start = Instant::now();
    let (mut current, _) = next_leader(&mut con, 0, start, within);
    let mut terms = vec![current.1];
    let mut took = Vec::new();
    let by_pid =
        |children: &[ChildProcess], pid: u32| children.iter().position(|c| c.pid() == pid).unwrap();

    // SIGKILL the leader.
    std::thread::sleep(Duration::from_millis(500));
    let i = by_pid(&children, current.0);
    children[i].signal("KILL");
    let killed = Instant::now();
    children.remove(i).kill();
    let (next, t) = next_leader(&mut con, current.1, killed, within);
    took.push(("SIGKILL", t));
    current = next;
    terms.push(current.1);

    // SIGSTOP the next one past its lease, then let it go on: it must not
    // act as leader again, and its stale term is refused.
    std::thread::sleep(Duration::from_millis(500));
    let i = by_pid(&children, current.0);
    let (stopped_pid, stale) = current;
    children[i].signal("STOP");
    let stopped = Instant::now();
    let (next, t) = next_leader(&mut con, current.1, stopped, within);
    took.push(("SIGSTOP", t));
    current = next;
    terms.push(current.1);
    std::thread::sleep(lease);
    children[i].signal("CONT");
    std::thread::sleep(Duration::from_millis(500));
    assert!(!FencedStore::new("store")
        .write(&mut con, stale, "stale")
        .unwrap());

    // The leader resigns: the next is elected at once.
    let _: () = con.set(format!("resign:{}", current.0), 1).unwrap();
    let resigned = Instant::now();
    let (next, t) = next_leader(&mut con, current.1, resigned, within);
    took.push(("resign", t));
    terms.push(next.1);
    std::thread::sleep(Duration::from_millis(500));
    drop(children);

    for (what, t) in &took {
        assert!(
            *t < within,
            "{what}: a new leader after {t:?} (lease {lease:?})"
        );
    }
    assert!(terms.windows(2).all(|w| w[0] < w[1]), "terms {terms:?}");
    // The history: by each process's own clock, the lease a leader knew of
    // ended (its last act's `until`, or its resignation) before the next
    // term's first act — no instant with two leaders believing they lead.
    let acts: Vec<String> = con.lrange("acts", 0, -1).unwrap();
    // term → (first act, end of belief, pid)
    let mut spans: Vec<(u64, u128, u128, u32)> = Vec::new();
    for act in &acts {
        let f: Vec<&str> = act.split(' ').collect();
        let term: u64 = f[0].parse().unwrap();
        let pid: u32 = f[1].parse().unwrap();
        let (at, until): (u128, u128) = (f[2].parse().unwrap(), f[3].parse().unwrap());
        match spans.iter_mut().find(|s| s.0 == term) {
            Some(s) if at == until => s.2 = until, // resigned: belief ends here
            Some(s) => {
                s.1 = s.1.min(at);
                s.2 = s.2.max(until);
            }
            None => spans.push((term, at, until, pid)),
        }
    }
    spans.sort();
    for w in spans.windows(2) {
        assert!(
            w[0].2 <= w[1].1,
            "term {} believed it led until {} µs, term {} acted from {} µs",
            w[0].0,
            w[0].2,
            w[1].0,
            w[1].1
        );
    }
    // The stopped leader did not act after it was stopped (its last act is
    // before the next term's first, above) — and it did act before.
    assert!(spans.iter().any(|s| s.0 == stale && s.3 == stopped_pid));
    println!(
        "4 candidates, lease {lease:?}: a new leader after {}; terms {terms:?}, {} acts, no two leaders' leases overlapping (smallest gap {} ms)",
        took.iter()
            .map(|(w, t)| format!("{w} {} ms", t.as_millis()))
            .collect::<Vec<_>>()
            .join(", "),
        acts.len(),
        spans.windows(2).map(|w| w[1].1 - w[0].2).min().unwrap_or(0) / 1000
    );
}

#[test]
fn a_thousand_follower_tasks_cost_no_thread_each_and_a_resignation_wakes_one() {
    let _serial = serial();
    let server = RedisServer::start();
    let lease = Duration::from_secs(3);
    let leader = client(&server, lease);
    let followers = AsyncLockClient::builder(&server.url())
        .watchdog_lease(lease)
        .socket_timeout(Duration::from_millis(800))
        .build()
        .unwrap();
    let threads = || std::fs::read_dir("/proc/self/task").unwrap().count();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let first = leader.election("e").campaign().unwrap();
    let before = threads();
    let (tx, rx) = std::sync::mpsc::channel();
    let elected = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    // A leader resigns when the test lets one go (a permit each).
    let go = Arc::new(tokio::sync::Semaphore::new(0));
    for _ in 0..1_000 {
        let (election, tx, elected) = (followers.election("e"), tx.clone(), Arc::clone(&elected));
        let go = Arc::clone(&go);
        rt.spawn(async move {
            let l = election.campaign().await.unwrap();
            elected.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            tx.send(l.term()).unwrap();
            go.acquire().await.unwrap().forget();
            l.resign().await.unwrap();
        });
    }
    // Every follower waits: one on Redis, the others queued behind it here.
    assert!(
        support::eventually(Duration::from_secs(30), || followers.stats().waiters_parked
            == 1_000),
        "the followers never all waited: {:?}",
        followers.stats()
    );
    let grown = threads().saturating_sub(before);
    assert!(grown <= 16, "1,000 waiting followers added {grown} threads");

    // The resignation: one follower is elected, and Redis sees a handful
    // of commands for it — not one per follower.
    let monitor = Monitor::start(&server);
    let term = first.term();
    first.resign().unwrap();
    let next = rx
        .recv_timeout(Duration::from_secs(5))
        .expect("a follower elected");
    assert!(next > term);
    std::thread::sleep(Duration::from_millis(100));
    let commands = monitor.client_commands_except("leasehold_client:");
    assert!(
        commands.len() < 40,
        "{} commands for one handover: {:?}",
        commands.len(),
        &commands[..commands.len().min(50)]
    );
    assert_eq!(
        elected.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "one elected"
    );
    println!(
        "1,000 follower tasks added {grown} threads; a resignation: 1 follower elected, {} client commands",
        commands.len()
    );
    // Each leader resigns when let go: the next few take over one by one.
    for _ in 0..3 {
        go.add_permits(1);
        let t = rx
            .recv_timeout(Duration::from_secs(5))
            .expect("the next leader");
        assert!(t > term);
    }
    rt.shutdown_timeout(Duration::from_secs(1));
}

/// A leader records when its term began only over an older term's record:
/// one paused between winning and writing cannot overwrite a newer term's.
#[test]
fn a_term_is_recorded_only_over_an_older_ones() {
    let _serial = serial();
    let server = RedisServer::start();
    let c = client(&server, Duration::from_secs(2));
    let mut con = server.connection();
    let record = "{leasehold_election:r}:leasehold_leader";
    let newer = u64::MAX / 2;
    let _: () = con
        .hset_multiple(record, &[("term", newer), ("since_ms", 7)])
        .unwrap();
    let leadership = c.election("r").campaign().unwrap();
    assert!(leadership.term() < newer);
    let term: u64 = con.hget(record, "term").unwrap();
    assert_eq!(term, newer, "an older term overwrote a newer one's record");
    let leader = c.election("r").leader().unwrap().expect("a leader");
    assert_eq!((leader.term, leader.since), (leadership.term(), None));
    drop(leadership);
    let _: () = con.del(record).unwrap();
    let next = c.election("r").campaign().unwrap();
    let leader = c.election("r").leader().unwrap().expect("a leader");
    assert_eq!(leader.since, Some(next.since()));
}

/// A bounded campaign won just as Redis stalls — on the write of the
/// term's record, which a proxy holds — ends by its deadline, blocking and
/// async: the record is written within what is left of the campaign, and
/// past it in the background, not with the socket timeout (15 s here, ten
/// times the 1.5 s bound).
#[test]
fn a_bounded_campaign_won_as_redis_stalls_ends_by_its_deadline() {
    use support::proxy::{Fault, FaultProxy};
    let _serial = serial();
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port());
    let c = LockClient::builder(&proxy.url())
        .socket_timeout(Duration::from_secs(15))
        .watchdog_lease(Duration::from_secs(40))
        .build()
        .unwrap();
    // Connections pooled and the scripts loaded, the record's too.
    drop(c.election("warm").campaign().unwrap());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let a = c.to_async();
    drop(rt.block_on(a.election("warm").campaign()).unwrap());
    proxy.set(Fault::HoldMatching("leasehold_leader"));
    let wait = Duration::from_millis(300);
    let bound = wait + Duration::from_millis(1_200);
    let started = Instant::now();
    let won = c.election("stall").try_campaign_for(wait);
    let took = started.elapsed();
    assert!(matches!(won, Ok(Some(_))), "{won:?}");
    assert!(took < bound, "returned {took:?} into a {wait:?} campaign");
    let started = Instant::now();
    let won = rt.block_on(a.election("stall-async").try_campaign_for(wait));
    let took = started.elapsed();
    assert!(matches!(won, Ok(Some(_))), "{won:?}");
    assert!(
        took < bound,
        "async: returned {took:?} into a {wait:?} campaign"
    );
}
