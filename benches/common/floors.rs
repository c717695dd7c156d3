//! Handoff floors for W2c's shape (8 threads, a connection each): what a
//! handoff *through Redis* costs on this machine in this mode, however little
//! the lock does — so the handoff figures can be read against more than a
//! PING.
//!
//! - **ring**: no lock at all. A token passes round 8 threads: each waits in
//!   `BLPOP` on its own list, runs the critical section, `RPUSH`es the token
//!   to the next thread's list. One native command and one blocked-client
//!   wake per handoff: the least any Redis-mediated handoff can cost.
//! - **bare grant lock**: the least a lock with a line in Redis can do — an
//!   acquire script (take it, or join the line), a release script that sets
//!   the lock to the first in line and `RPUSH`es to that waiter's list, the
//!   waiter blocked in `BLPOP` reading its grant itself (no subscriber
//!   thread). No reentrancy, no lease renewal, no liveness of places, no
//!   Redisson compatibility.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use crate::measure::{commandstats, con, now_ns, percentile};

const BARE_ACQUIRE: &str = r#"
if redis.call('exists', KEYS[1]) == 1 then
    redis.call('rpush', KEYS[2], ARGV[1])
    return 0
end
redis.call('hset', KEYS[1], ARGV[1], 1)
redis.call('pexpire', KEYS[1], 30000)
return 1
"#;

const BARE_RELEASE: &str = r#"
redis.call('hdel', KEYS[1], ARGV[1])
local first = redis.call('lpop', KEYS[2])
if first then
    redis.call('hset', KEYS[1], first, 1)
    redis.call('pexpire', KEYS[1], 3000)
    local grant = KEYS[3] .. first
    redis.call('rpush', grant, 1)
    redis.call('pexpire', grant, 3000)
end
return 1
"#;

/// Handoff p50 / p99 (µs) of one floor, its critical sections per second,
/// and the microseconds Redis spent in its client-sent commands per CS
/// (`INFO commandstats`, as W2c's figure).
#[derive(Clone, Copy, Default)]
pub(crate) struct Floor {
    pub(crate) p50_us: f64,
    pub(crate) p99_us: f64,
    pub(crate) per_s: f64,
    pub(crate) redis_us_per_cs: f64,
}

/// Both floors.
#[derive(Clone, Copy, Default)]
pub(crate) struct Floors {
    pub(crate) ring: Floor,
    pub(crate) bare: Floor,
}

const WORKERS: usize = 8;

pub(crate) fn measure(url: &str, secs: f64) -> Floors {
    Floors {
        ring: run(url, secs, true),
        bare: run(url, secs, false),
    }
}

/// One floor: 8 workers for `secs`, with a check that no two were ever
/// inside at once.
fn run(url: &str, secs: f64, ring: bool) -> Floor {
    let tag = if ring { "ring" } else { "bare" };
    let (lock, line, grant) = (
        format!("floor:{{{tag}}}:lock"),
        format!("floor:{{{tag}}}:line"),
        format!("floor:{{{tag}}}:grant:"),
    );
    let mut admin = con(url);
    let mut del = redis::cmd("DEL");
    del.arg(&lock).arg(&line);
    for i in 0..WORKERS {
        del.arg(format!("{grant}{i}"));
    }
    let _: () = del.query(&mut admin).unwrap();
    let last = Arc::new(AtomicU64::new(0));
    let inside = Arc::new(AtomicBool::new(false));
    let before = commandstats(url);
    let start = Instant::now() + Duration::from_millis(100);
    let until = start + Duration::from_secs_f64(secs);
    let workers: Vec<_> = (0..WORKERS)
        .map(|i| {
            let (mut cmds, mut blocked) = (con(url), con(url));
            let (lock, line, grant) = (lock.clone(), line.clone(), grant.clone());
            let (last, inside) = (last.clone(), inside.clone());
            thread::spawn(move || {
                let acquire = redis::Script::new(BARE_ACQUIRE);
                let release = redis::Script::new(BARE_RELEASE);
                let mine = format!("{grant}{i}");
                let me = i.to_string();
                let mut handoffs = Vec::new();
                let mut turns = 0u64;
                // Waits for this worker's list; false once the run is over.
                let wait = |blocked: &mut redis::Connection| loop {
                    let got: Option<(String, String)> = redis::cmd("BLPOP")
                        .arg(&mine)
                        .arg(0.2)
                        .query(blocked)
                        .unwrap();
                    if got.is_some() {
                        return true;
                    }
                    if Instant::now() > until {
                        return false;
                    }
                };
                while Instant::now() < start {
                    thread::sleep(Duration::from_micros(200));
                }
                if ring && i == 0 {
                    let _: () = redis::cmd("RPUSH")
                        .arg(&mine)
                        .arg(1)
                        .query(&mut cmds)
                        .unwrap();
                }
                while Instant::now() < until {
                    let held = if ring {
                        wait(&mut blocked)
                    } else {
                        let taken: i64 = acquire
                            .key(&lock)
                            .key(&line)
                            .arg(&me)
                            .invoke(&mut cmds)
                            .unwrap();
                        taken == 1 || wait(&mut blocked)
                    };
                    if !held {
                        break;
                    }
                    let entered = now_ns();
                    assert!(!inside.swap(true, Ordering::SeqCst), "{tag}: two inside");
                    let previous = last.load(Ordering::SeqCst);
                    if previous != 0 {
                        handoffs.push(entered.saturating_sub(previous));
                    }
                    let spin = Instant::now();
                    while spin.elapsed() < Duration::from_micros(20) {
                        std::hint::spin_loop();
                    }
                    turns += 1;
                    inside.store(false, Ordering::SeqCst);
                    last.store(now_ns(), Ordering::SeqCst);
                    if ring {
                        let _: () = redis::cmd("RPUSH")
                            .arg(format!("{grant}{}", (i + 1) % WORKERS))
                            .arg(1)
                            .query(&mut cmds)
                            .unwrap();
                    } else {
                        let _: i64 = release
                            .key(&lock)
                            .key(&line)
                            .key(&grant)
                            .arg(&me)
                            .invoke(&mut cmds)
                            .unwrap();
                    }
                }
                (turns, handoffs)
            })
        })
        .collect();
    let (mut turns, mut all) = (0, Vec::new());
    for w in workers {
        let (t, h) = w.join().unwrap();
        turns += t;
        all.extend(h);
    }
    // The commands the workers send themselves (a script's time includes
    // the calls inside it); a served `BLPOP` counts from its wake-up.
    let after = commandstats(url);
    let sent: &[&str] = if ring {
        &["rpush", "blpop"]
    } else {
        &["evalsha", "blpop"]
    };
    let usec: u64 = sent
        .iter()
        .map(|c| {
            let us = |stats: &HashMap<String, (u64, u64)>| stats.get(*c).map_or(0, |s| s.1);
            us(&after) - us(&before)
        })
        .sum();
    all.sort_unstable();
    Floor {
        p50_us: percentile(&all, 0.5) as f64 / 1e3,
        p99_us: percentile(&all, 0.99) as f64 / 1e3,
        per_s: turns as f64 / secs,
        redis_us_per_cs: usec as f64 / turns.max(1) as f64,
    }
}
