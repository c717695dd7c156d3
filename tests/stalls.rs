//! A stalled process never holds a name longer than the lock's own lease
//! (issue 25, item 3): three processes × two threads contend for one name
//! with a 500 ms watchdog lease; in each round one process is stopped
//! (SIGSTOP) for 5 s — the one whose thread just entered (by a grant, an
//! in-process handoff or its own attempt), or the one whose place is first
//! in the line of waiting clients — and another process must enter within
//! 1.5 s of the stop (the lease, and a second for a loaded machine), and
//! the lock may never lie idle longer than that while the stopped one keeps
//! its place or a grant. A stopped process that kept the name would keep it
//! the whole pause: ten times the lease, three times the bound.

#[path = "child/holder.rs"]
mod child;
mod support;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis::Commands;
use support::{ChildProcess, RedisServer};

const LEASE_MS: &str = "500";
const WORK_MS: &str = "100";
const PAUSE: Duration = Duration::from_secs(5);
/// The lease, and a second for waking and a round trip on a loaded machine.
const BOUND_US: u64 = 1_500_000;
const ROUNDS: usize = 10;

#[derive(Debug, Clone, Copy)]
struct Event {
    entry: bool,
    pid: u32,
    at: u64,
}

fn parse(line: &str) -> Event {
    let mut words = line.split_whitespace();
    let entry = words.next() == Some("E");
    let pid = words.next().and_then(|p| p.parse().ok()).expect("pid");
    let at = words.next().and_then(|t| t.parse().ok()).expect("time");
    Event { entry, pid, at }
}

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// Three contending processes on `name`.
fn contenders(server: &RedisServer, name: &str) -> Vec<ChildProcess> {
    (0..3)
        .map(|_| {
            let mut child = ChildProcess::start(&["stall", &server.url(), name, LEASE_MS, WORK_MS]);
            assert_eq!(child.line(), "started");
            child
        })
        .collect()
}

/// The next entry recorded on `list` (waiting for it); with `handed_over`,
/// the next one that came right after another process's exit — the lock
/// handed over between processes, by a grant.
fn next_entry(con: &mut redis::Connection, list: &str, handed_over: bool) -> Event {
    let mut last_exit: Option<Event> = None;
    loop {
        let popped: Option<(String, String)> = con.blpop(list, 5.0).unwrap();
        let (_, line) = popped.expect("no entry for 5 s: the contenders stopped");
        let e = parse(&line);
        if !e.entry {
            last_exit = Some(e);
        } else if !handed_over || last_exit.is_some_and(|x| x.pid != e.pid) {
            return e;
        }
    }
}

/// The events recorded on `list` since it was emptied.
fn events(con: &mut redis::Connection, list: &str) -> Vec<Event> {
    let lines: Vec<String> = con.lrange(list, 0, -1).unwrap();
    lines.iter().map(|l| parse(l)).collect()
}

/// Stops `child` for [`PAUSE`]; the events of the others meanwhile, and
/// when it was stopped.
fn stop_for_the_pause(
    con: &mut redis::Connection,
    list: &str,
    child: &ChildProcess,
) -> (u64, Vec<Event>) {
    child.signal("STOP");
    let stopped = now_us();
    std::thread::sleep(PAUSE);
    child.signal("CONT");
    let others = events(con, list)
        .into_iter()
        .filter(|e| {
            e.pid != child.pid() && e.at > stopped && e.at <= stopped + PAUSE.as_micros() as u64
        })
        .collect();
    (stopped, others)
}

/// How long after `stopped` another process entered, and the longest the
/// lock lay idle meanwhile (from one exit to the next entry, or to the end
/// of the pause).
fn served(stopped: u64, others: &[Event]) -> (Option<u64>, u64) {
    let first = others.iter().find(|e| e.entry).map(|e| e.at - stopped);
    let mut idle = 0;
    let mut free_since = None;
    for e in others {
        match (e.entry, free_since) {
            (true, Some(t)) => {
                idle = u64::max(idle, e.at - t);
                free_since = None;
            }
            (false, _) => free_since = Some(e.at),
            _ => {}
        }
    }
    if let Some(t) = free_since {
        idle = idle.max(stopped + PAUSE.as_micros() as u64 - t);
    }
    (first, idle)
}

fn report(what: &str, rounds: &[(Option<u64>, u64)]) {
    let late: Vec<_> = rounds
        .iter()
        .enumerate()
        .filter(|(_, (first, idle))| first.is_none_or(|f| f > BOUND_US) || *idle > BOUND_US)
        .collect();
    eprintln!(
        "{what}: (first entry by another after the stop, longest idle) per round, µs: {rounds:?}"
    );
    assert!(
        late.is_empty(),
        "{what}: in {} of {} rounds nobody else got in within {BOUND_US} µs: {late:?}",
        late.len(),
        rounds.len()
    );
}

#[test]
fn a_stopped_holder_keeps_the_name_no_longer_than_its_lease() {
    let server = RedisServer::start();
    let name = "stall:holder";
    let list = format!("events:{name}");
    let children = contenders(&server, name);
    let mut con = server.connection();
    let mut rounds = Vec::new();
    for round in 0..ROUNDS {
        let _: () = con.del(&list).unwrap();
        // Every other round, a holder that entered by a grant.
        let entered = next_entry(&mut con, &list, round % 2 == 0);
        let holder = children.iter().find(|c| c.pid() == entered.pid).unwrap();
        let (stopped, others) = stop_for_the_pause(&mut con, &list, holder);
        rounds.push(served(stopped, &others));
    }
    report("holder stopped", &rounds);
}

#[test]
fn a_stopped_first_waiter_keeps_the_name_no_longer_than_its_lease() {
    let server = RedisServer::start();
    let name = "stall:waiter";
    let list = format!("events:{name}");
    let line = format!("leasehold_line:{{{name}}}");
    let children = contenders(&server, name);
    let mut con = server.connection();
    let mut rounds = Vec::new();
    let mut tries = 0;
    while rounds.len() < ROUNDS {
        tries += 1;
        assert!(tries < ROUNDS * 10, "no waiter stood first in line");
        let _: () = con.del(&list).unwrap();
        let entered = next_entry(&mut con, &list, false);
        // The first place in line: `<until>|<client uuid>:<n>#…`; its
        // client's pid from the client's registration.
        let Some(first) = con.lindex::<_, Option<String>>(&line, 0).unwrap() else {
            continue;
        };
        let place = first.split_once('|').map_or(first.as_str(), |(_, p)| p);
        let id = place.split(':').next().unwrap_or_default();
        let pid: Option<u32> = con.hget(format!("leasehold_client:{id}"), "pid").unwrap();
        let Some(waiter) = children
            .iter()
            .find(|c| Some(c.pid()) == pid && c.pid() != entered.pid)
        else {
            continue;
        };
        let (stopped, others) = stop_for_the_pause(&mut con, &list, waiter);
        rounds.push(served(stopped, &others));
    }
    report("first waiter stopped", &rounds);
}
