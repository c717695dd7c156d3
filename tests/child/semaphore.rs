//! Test children of `tests/semaphore.rs`: this test binary re-executed (see
//! `support::child_command`).
//!
//! `sem <url> <name> <threads> <rounds> <tag>` — `threads` threads of one
//! client take a permit of semaphore `name` `rounds` times each (a 20 s
//! bound, so a wait that never ends fails the child); inside, each records
//! `E <tag>.<thread>.<i>` in `events:<name>`, works 0–3 ms, records
//! `X <tag>.<thread>.<i>` and gives the permit back. Prints
//! `done <sections>`.
//!
//! `hold <url> <name> <permits> <watchdog-lease-ms>` takes that many
//! permits at once, prints `held`, and waits for its input to end (or a
//! SIGKILL).

use std::io::{BufRead, Write};
use std::time::Duration;

use leasehold::{LockClient, SemaphoreOptions};
use redis::Commands;

use crate::support::{ChildProcess, CHILD_ENV};

/// In a child process: runs the mode its arguments name, then exits.
/// Otherwise: checks that a child can be started and driven.
#[test]
fn child_process_entry() {
    if let Ok(args) = std::env::var(CHILD_ENV) {
        let args: Vec<String> = args.split('\u{1f}').map(str::to_owned).collect();
        match args.first().map(String::as_str) {
            Some("sem") => sem(&args[1..]),
            Some("hold") => hold(&args[1..]),
            _ => {
                eprintln!("unknown child mode {args:?}");
                std::process::exit(2);
            }
        }
        let _ = std::io::stdout().flush();
        std::process::exit(0);
    }
    let mut child = ChildProcess::start(&["sem", "redis://127.0.0.1:1/", "s", "1", "0", "t"]);
    assert_eq!(child.line(), "done 0");
}

fn sem(args: &[String]) {
    let [url, name, threads, rounds, tag] = args else {
        panic!("usage: sem <url> <name> <threads> <rounds> <tag>");
    };
    let (threads, rounds): (usize, usize) = (threads.parse().unwrap(), rounds.parse().unwrap());
    let client = LockClient::new(url).unwrap();
    let records = redis::Client::open(url.as_str()).unwrap();
    let done: usize = std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                let (client, records) = (&client, &records);
                s.spawn(move || {
                    let sem = client.semaphore(name);
                    let mut con = (rounds > 0).then(|| records.get_connection().unwrap());
                    for i in 0..rounds {
                        let wait = SemaphoreOptions::new().wait(Duration::from_secs(20));
                        let permit = sem.acquire_with(1, wait).unwrap();
                        let con = con.as_mut().unwrap();
                        let events = format!("events:{name}");
                        let _: () = con.rpush(&events, format!("E {tag}.{t}.{i}")).unwrap();
                        let work = u64::from(uuid::Uuid::new_v4().as_bytes()[0]) % 4;
                        std::thread::sleep(Duration::from_millis(work));
                        let _: () = con.rpush(&events, format!("X {tag}.{t}.{i}")).unwrap();
                        permit.unlock().unwrap();
                    }
                    rounds
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap()).sum()
    });
    println!("done {done}");
}

fn hold(args: &[String]) {
    let [url, name, permits, lease_ms] = args else {
        panic!("usage: hold <url> <name> <permits> <watchdog-lease-ms>");
    };
    let client = LockClient::builder(url)
        .watchdog_lease(Duration::from_millis(lease_ms.parse().unwrap()))
        .build()
        .unwrap();
    let _permits = client
        .semaphore(name)
        .acquire_many(permits.parse().unwrap())
        .unwrap();
    println!("held");
    let _ = std::io::stdout().flush();
    for line in std::io::stdin().lock().lines() {
        if line.is_err() {
            break;
        }
    }
}
