//! Test children of `tests/job_windows.rs`: this test binary re-executed
//! (see `support::child_command`).
//!
//! `cron <url> <offset-ms> <period-ms> <at-least-ms> <at-most-ms> <first>
//! <last> <kill-window>` — a replica whose clock is `offset-ms` off (the
//! offset is added to the system clock: its own idea of now) fires job
//! `report` at every multiple of `period-ms` of its clock, windows `first`
//! to `last`, through `Job::run`. A run records `<window> <pid> <server ms>`
//! in `runs` and counts itself in `window:<w>`; the run of `kill-window`
//! sets `killme` to its pid and sleeps (the parent SIGKILLs it). Prints
//! `done`.

use std::io::Write;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use leasehold::LockClient;
use redis::Commands;

use crate::support::CHILD_ENV;

#[test]
fn child_process_entry() {
    if let Ok(args) = std::env::var(CHILD_ENV) {
        let args: Vec<String> = args.split('\u{1f}').map(str::to_owned).collect();
        match args.first().map(String::as_str) {
            Some("cron") => cron(&args[1..]),
            _ => {
                eprintln!("unknown child mode {args:?}");
                std::process::exit(2);
            }
        }
        println!("done");
        let _ = std::io::stdout().flush();
        std::process::exit(0);
    }
}

fn cron(args: &[String]) {
    let n = |i: usize| args[i].parse::<i64>().unwrap();
    let (url, offset, period) = (&args[0], n(1), n(2));
    let (at_least, at_most) = (n(3) as u64, n(4) as u64);
    let (first, last, kill) = (n(5), n(6), n(7));
    let client = LockClient::builder(url)
        .socket_timeout(Duration::from_millis(500))
        .connect()
        .unwrap();
    let job = client
        .job("report")
        .lock_at_least_for(Duration::from_millis(at_least))
        .lock_at_most_for(Duration::from_millis(at_most));
    let mut con = redis::Client::open(url.as_str())
        .unwrap()
        .get_connection()
        .unwrap();
    let my_now = || {
        let real = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
        real.as_millis() as i64 + offset
    };
    for window in first..=last {
        let at = window * period;
        let wait = at - my_now();
        if wait > 0 {
            std::thread::sleep(Duration::from_millis(wait as u64));
        }
        let run = job.run(|| {
            let (secs, micros): (i64, i64) = redis::cmd("TIME").query(&mut con).unwrap();
            let server_ms = secs * 1000 + micros / 1000;
            let pid = std::process::id();
            let _: i64 = con.incr(format!("window:{window}"), 1).unwrap();
            let _: i64 = con
                .rpush("runs", format!("{window} {pid} {server_ms}"))
                .unwrap();
            if window == kill {
                let _: () = con.set("killme", pid).unwrap();
                std::thread::sleep(Duration::from_secs(600));
            }
            std::thread::sleep(Duration::from_millis(50));
        });
        // A lost lock's end (a run the renewal could not keep) is an error
        // the parent sees as a missing `done`.
        let _ran_or_skipped = run.unwrap();
    }
}
