//! Scheduled jobs across processes with skewed clocks (issue 39): five
//! replicas, their clocks up to ±500 ms apart, fire a job every 2 s for
//! 60 s with `lock_at_least_for` 1.5 s — every window's job runs exactly
//! once (a Redis counter per window) — and the replica running one window's
//! job is SIGKILLed mid-run: nobody starts the job again before its
//! `lock_at_most_for` (5 s) has passed since that run began, and it runs
//! again in the first window that fires after the lock is gone.
//!
//! About a minute, mostly sleeping: run by scripts/test.sh beside the
//! failover soak (`cargo test --test job_windows`), not by the plain
//! `cargo test`.

#[path = "child/jobs.rs"]
mod child;
mod support;

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use redis::Commands;
use support::{ChildProcess, RedisServer};

const PERIOD_MS: i64 = 2_000;
const AT_LEAST_MS: i64 = 1_500;
const AT_MOST_MS: i64 = 5_000;
const WINDOWS: i64 = 30;
const OFFSETS_MS: [i64; 5] = [-500, -250, 0, 250, 500];

fn server_ms(con: &mut redis::Connection) -> i64 {
    let (secs, micros): (i64, i64) = redis::cmd("TIME").query(con).unwrap();
    secs * 1000 + micros / 1000
}

#[test]
fn five_skewed_replicas_run_each_window_once_and_a_killed_run_holds_its_window_at_most() {
    let server = RedisServer::start();
    let mut con = server.connection();
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    // The first window fires (on the fastest clock) 3 s from now: every
    // replica is up by then.
    let first = (now_ms + 3_000 + 500) / PERIOD_MS + 1;
    let last = first + WINDOWS - 1;
    let kill = first + 8;
    let mut children: Vec<ChildProcess> = OFFSETS_MS
        .iter()
        .map(|offset| {
            let args = [
                "cron".to_owned(),
                server.url(),
                offset.to_string(),
                PERIOD_MS.to_string(),
                AT_LEAST_MS.to_string(),
                AT_MOST_MS.to_string(),
                first.to_string(),
                last.to_string(),
                kill.to_string(),
            ];
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            ChildProcess::start(&args)
        })
        .collect();

    // The run of the kill window announces itself: SIGKILL it, then watch
    // for the moment its lock is gone (by the server's clock).
    let give_up = Instant::now() + Duration::from_secs(60);
    let victim = loop {
        if let Some(pid) = con.get::<_, Option<u32>>("killme").unwrap() {
            break pid;
        }
        assert!(
            Instant::now() < give_up,
            "the kill window's run never started"
        );
        std::thread::sleep(Duration::from_millis(5));
    };
    // When the killed run took the lock, by the server's clock: the
    // history's `last_started`, written by the take's script with its SET
    // (nobody else can take the job while the killed run holds it). Not the
    // run's own `TIME`, which comes a round trip later.
    let history = "{job-lock:default:report}:leasehold_job_history";
    let killed_start: i64 = con.hget(history, "last_started").unwrap();
    let index = children.iter().position(|c| c.pid() == victim).unwrap();
    children[index].signal("KILL");
    let mut dead = children.remove(index);
    dead.kill();
    let gone_at = loop {
        if !con.exists::<_, bool>("job-lock:default:report").unwrap() {
            break server_ms(&mut con);
        }
        assert!(Instant::now() < give_up, "the killed run's lock never went");
        std::thread::sleep(Duration::from_millis(5));
    };
    for mut child in children {
        assert_eq!(child.line(), "done", "a replica failed");
    }

    let runs: Vec<String> = con.lrange("runs", 0, -1).unwrap();
    let runs: Vec<(i64, i64)> = runs
        .iter()
        .map(|r| {
            let f: Vec<i64> = r.split(' ').map(|x| x.parse().unwrap()).collect();
            (f[0], f[2])
        })
        .collect();
    let count = |w: i64| runs.iter().filter(|(rw, _)| *rw == w).count();
    let started = |w: i64| runs.iter().find(|(rw, _)| *rw == w).map(|r| r.1);
    // Never twice in a window.
    for w in first..=last {
        assert!(count(w) <= 1, "window {w} ran {} times: {runs:?}", count(w));
        let counter: Option<i64> = con.get(format!("window:{w}")).unwrap();
        assert_eq!(counter.unwrap_or(0) as usize, count(w), "window {w}");
    }
    // The killed run held the job for its lock_at_most_for at least.
    assert!(started(kill).is_some(), "the killed run is recorded");
    assert!(
        gone_at >= killed_start + AT_MOST_MS,
        "the lock went {} ms after the killed run began",
        gone_at - killed_start
    );
    let next = (kill + 1..=last)
        .find(|w| count(*w) == 1)
        .expect("ran again");
    assert!(
        started(next).unwrap() >= killed_start + AT_MOST_MS,
        "started again {} ms after the killed run",
        started(next).unwrap() - killed_start
    );
    // Every window before the kill ran once, and after it every window
    // whose last replica fired after the lock was gone (the slowest clock
    // fires 500 ms after the window's time; 100 ms for the watch's poll).
    let fired_last = |w: i64| w * PERIOD_MS + 500;
    for w in first..=kill {
        assert_eq!(count(w), 1, "window {w} before the kill: {runs:?}");
    }
    let back: Vec<i64> = (kill + 1..=last)
        .filter(|w| fired_last(*w) > gone_at + 100)
        .collect();
    // (A window whose last replica fired within the poll's 100 ms of the
    // lock going may or may not have found it gone.)
    assert!(
        next <= back[0],
        "window {next} ran first again, {} was due: {runs:?}",
        back[0]
    );
    for w in back {
        assert_eq!(count(w), 1, "window {w} after the lock went: {runs:?}");
    }
    println!(
        "{} windows of {PERIOD_MS} ms, 5 replicas skewed by up to ±500 ms: {} runs, none twice; \
         the SIGKILLed run's lock went {} ms after it began (lock_at_most_for {AT_MOST_MS} ms), \
         the job ran again {} ms after it began, in the first window after",
        last - first + 1,
        runs.len(),
        gone_at - killed_start,
        started(next).unwrap() - killed_start
    );
}
