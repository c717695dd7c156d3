//! Test children of `tests/lock_all.rs`: this test binary re-executed (see
//! `support::child_command`).
//!
//! `lockall <url> <names,…> <rounds> <tag>` takes the names with
//! `lock_all_with` (in the order given: the library sorts them; a 10 s
//! bound, so a deadlock fails the child) `rounds` times;
//! inside each section it records `E <tag>.<i>` / `X <tag>.<i>` in
//! `events:<name>` around a non-atomic increment of `count:<name>` for every
//! name. Prints `done <sections>`. A comma-separated `<url>` is a cluster's
//! seed list; the records then go to `LEASEHOLD_RECORDS_URL`.

use std::io::Write;

use leasehold::LockClient;
use redis::Commands;

use crate::support::{ChildProcess, CHILD_ENV};

/// In a child process: runs the mode its arguments name, then exits.
/// Otherwise: checks that a child can be started and driven.
#[test]
fn child_process_entry() {
    if let Ok(args) = std::env::var(CHILD_ENV) {
        let args: Vec<String> = args.split('\u{1f}').map(str::to_owned).collect();
        match args.first().map(String::as_str) {
            Some("lockall") => lockall(&args[1..]),
            _ => {
                eprintln!("unknown child mode {args:?}");
                std::process::exit(2);
            }
        }
        let _ = std::io::stdout().flush();
        std::process::exit(0);
    }
    let mut child = ChildProcess::start(&["lockall", "redis://127.0.0.1:1/", "a", "0", "t"]);
    assert_eq!(child.line(), "done 0");
}

fn lockall(args: &[String]) {
    let [url, names, rounds, tag] = args else {
        panic!("usage: lockall <url> <names,…> <rounds> <tag>");
    };
    let names: Vec<&str> = names.split(',').collect();
    let rounds: usize = rounds.parse().unwrap();
    let (client, records) = if url.contains(',') {
        let seeds: Vec<String> = url.split(',').map(str::to_owned).collect();
        let records = std::env::var("LEASEHOLD_RECORDS_URL").unwrap();
        (
            LockClient::cluster_builder(&seeds).build().unwrap(),
            redis::Client::open(records).unwrap(),
        )
    } else {
        (
            LockClient::new(url).unwrap(),
            redis::Client::open(url.as_str()).unwrap(),
        )
    };
    let mut con = (rounds > 0).then(|| records.get_connection().unwrap());
    for i in 0..rounds {
        // Bounded: a deadlock (each holding a name the other waits for)
        // ends in an error here, and the test fails, instead of hanging.
        let wait = leasehold::LockOptions::new().wait(std::time::Duration::from_secs(10));
        let all = client.lock_all_with(&names, wait).unwrap();
        let con = con.as_mut().unwrap();
        for name in &names {
            let _: () = con
                .rpush(format!("events:{name}"), format!("E {tag}.{i}"))
                .unwrap();
            let n: u64 = con
                .get::<_, Option<u64>>(format!("count:{name}"))
                .unwrap()
                .unwrap_or(0);
            let _: () = con.set(format!("count:{name}"), n + 1).unwrap();
            let _: () = con
                .rpush(format!("events:{name}"), format!("X {tag}.{i}"))
                .unwrap();
        }
        all.unlock().unwrap();
    }
    let mut out = std::io::stdout();
    writeln!(out, "done {rounds}").unwrap();
}
