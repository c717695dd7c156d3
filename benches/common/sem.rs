//! The semaphore's rows (issue 28). S1: one thread, acquire + release of
//! one permit, uncontended — pairs/s and the client commands each pair
//! sends (the target is 2). S2: 8 threads, a `LockClient` each, on a
//! semaphore of 2 permits, ~20 µs of work inside — acquisitions/s against
//! the floor a user writes by hand, 8 threads each with its own connection
//! spinning on `DECR` (negative: `INCR` back and retry at once; else the
//! work, then `INCR`), measured in the same run; and the client commands
//! per acquisition under that contention (the target is ≤ 3). Both sides
//! check that never more than 2 are inside.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use leasehold::LockClient;
use redis::Commands;

use crate::measure::{command_delta, commandstats, con};

pub(crate) struct SemFigures {
    pub(crate) s1_rate: f64,
    pub(crate) s1_cmds: f64,
    pub(crate) floor_rate: f64,
    pub(crate) s2_rate: f64,
    pub(crate) s2_cmds: f64,
}

const PERMITS: usize = 2;
const THREADS: usize = 8;

/// Work inside, checking that at most [`PERMITS`] are in.
fn inside(count: &AtomicUsize) {
    let now = count.fetch_add(1, Ordering::SeqCst) + 1;
    assert!(now <= PERMITS, "{now} inside a semaphore of {PERMITS}");
    let spin = Instant::now();
    while spin.elapsed() < Duration::from_micros(20) {
        std::hint::spin_loop();
    }
    count.fetch_sub(1, Ordering::SeqCst);
}

pub(crate) fn measure(url: &str, secs: f64) -> SemFigures {
    let run = Duration::from_secs_f64(secs);
    // S1.
    let client = LockClient::new(url).unwrap();
    let sem = client.semaphore("s1");
    sem.set_permits(1).unwrap();
    sem.acquire().unwrap().unlock().unwrap();
    let before = commandstats(url);
    let (mut pairs, started) = (0u64, Instant::now());
    while started.elapsed() < run {
        sem.acquire().unwrap().unlock().unwrap();
        pairs += 1;
    }
    let s1_rate = pairs as f64 / started.elapsed().as_secs_f64();
    let (client_cmds, _, _) = command_delta(&before, &commandstats(url), false);
    let s1_cmds = client_cmds as f64 / pairs as f64;

    // The floor: spinning DECR / INCR.
    let mut c = con(url);
    let _: () = c.set("s2-floor", PERMITS).unwrap();
    let (count, done) = (AtomicUsize::new(0), AtomicU64::new(0));
    let until = Instant::now() + run;
    std::thread::scope(|s| {
        for _ in 0..THREADS {
            let (count, done) = (&count, &done);
            s.spawn(move || {
                let mut c = con(url);
                while Instant::now() < until {
                    let left: i64 = c.decr("s2-floor", 1).unwrap();
                    if left >= 0 {
                        inside(count);
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                    let _: i64 = c.incr("s2-floor", 1).unwrap();
                }
            });
        }
    });
    let floor_rate = done.load(Ordering::Relaxed) as f64 / secs;

    // S2: leasehold, a client each.
    let clients: Vec<_> = (0..THREADS)
        .map(|_| LockClient::new(url).unwrap())
        .collect();
    clients[0]
        .semaphore("s2")
        .set_permits(PERMITS as u32)
        .unwrap();
    for c in &clients {
        c.semaphore("s2").acquire().unwrap().unlock().unwrap();
    }
    let (count, done) = (AtomicUsize::new(0), AtomicU64::new(0));
    let before = commandstats(url);
    let started = Instant::now();
    let until = started + run;
    std::thread::scope(|s| {
        for c in &clients {
            let (count, done) = (&count, &done);
            s.spawn(move || {
                let sem = c.semaphore("s2");
                while Instant::now() < until {
                    let permit = sem.acquire().unwrap();
                    inside(count);
                    done.fetch_add(1, Ordering::Relaxed);
                    drop(permit);
                }
            });
        }
    });
    let took = started.elapsed().as_secs_f64();
    let (client_cmds, _, _) = command_delta(&before, &commandstats(url), false);
    let acquired = done.load(Ordering::Relaxed) as f64;
    SemFigures {
        s1_rate,
        s1_cmds,
        floor_rate,
        s2_rate: acquired / took,
        s2_cmds: client_cmds as f64 / acquired,
    }
}

/// The rows: (figure, floor, leasehold, ratio, target, met).
pub(crate) fn rows(f: &SemFigures) -> Vec<(String, String, String, String, &'static str, bool)> {
    let ratio = f.s2_rate / f.floor_rate;
    vec![
        (
            "S1 one thread, acquire + release pairs/s; client commands / pair".into(),
            String::new(),
            format!("{:.0}; {:.2}", f.s1_rate, f.s1_cmds),
            String::new(),
            "2 commands",
            f.s1_cmds <= 2.05,
        ),
        (
            "S2 8 threads, a client each, 2 permits: acquisitions/s (floor: spinning DECR/INCR)"
                .into(),
            format!("{:.0}", f.floor_rate),
            format!("{:.0}", f.s2_rate),
            format!("{ratio:.2}"),
            "≥ 1.5",
            ratio >= 1.5,
        ),
        (
            "S2 client commands / acquisition".into(),
            String::new(),
            format!("{:.2}", f.s2_cmds),
            String::new(),
            "≤ 3",
            f.s2_cmds <= 3.0,
        ),
    ]
}

/// The rows as lines (`BENCH_ONLY=sem`).
pub(crate) fn lines(f: &SemFigures) -> String {
    rows(f)
        .into_iter()
        .map(|(what, floor, lh, ratio, target, ok)| {
            format!("{what}: floor {floor}, leasehold {lh}, {ratio} (target {target}: {ok})")
        })
        .collect::<Vec<_>>()
        .join("\n")
}
