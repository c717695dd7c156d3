//! Test children of the async API's tests (`tests/tasks.rs`): this test
//! binary re-executed to run one mode (see `support::child_command`).
//!
//! `hold <url> <prefix> <n>` holds the plain locks `<prefix>0` …
//! `<prefix><n-1>` with a blocking client of its own, prints `held`, and on
//! the line `release` unlocks them all and prints `released`; it ends with
//! its input.
//!
//! `exit <url> <name>` is a short program on the async face, as
//! `#[tokio::main] async fn main` runs it: it takes lock `<name>` and a
//! permit of semaphore `<name>:sem`, prints `held`, and ends — the guard,
//! the permit and the client going out of scope as `main` returns.
//!
//! `mixed <url> <name> <tasks> <threads> <rounds> <tag>` runs `tasks` async
//! tasks (a multi-thread tokio runtime) and `threads` blocking threads of
//! one client, each taking `name` `rounds` times; inside each critical
//! section it appends `E <tag>.<worker>.<i>` to `events:<name>`, reads
//! `count:<name>`, writes it back plus one (a non-atomic read-modify-write)
//! and appends `X …`. Prints `done <sections>`.

use std::io::{BufRead, Write};
use std::sync::Arc;

use leasehold::{LockClient, OwnedLockGuard};
use redis::Commands;

use crate::support::{ChildProcess, CHILD_ENV};

/// In a child process: runs the mode its arguments name, then exits.
/// Otherwise: checks that a child can be started and driven.
#[test]
fn child_process_entry() {
    if let Ok(args) = std::env::var(CHILD_ENV) {
        let args: Vec<String> = args.split('\u{1f}').map(str::to_owned).collect();
        match args.first().map(String::as_str) {
            Some("hold") => hold(&args[1..]),
            Some("mixed") => mixed(&args[1..]),
            Some("exit") => exit_holding(&args[1..]),
            _ => {
                eprintln!("unknown child mode {args:?}");
                std::process::exit(2);
            }
        }
        let _ = std::io::stdout().flush();
        std::process::exit(0);
    }
    let mut holder = ChildProcess::start(&["hold", "redis://127.0.0.1:1/", "x", "0"]);
    assert_eq!(holder.line(), "held");
}

fn exit_holding(args: &[String]) {
    let [url, name] = args else {
        panic!("usage: exit <url> <name>");
    };
    // What `#[tokio::main]` builds.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let client = leasehold::AsyncLockClient::new(url).unwrap();
        let _guard = client.lock(name).await.unwrap();
        let _permit = client
            .semaphore(&format!("{name}:sem"))
            .acquire()
            .await
            .unwrap();
        say("held");
        // `main` ends here: the permit, the guard, then the client go.
    });
}

fn say(line: &str) {
    let mut out = std::io::stdout();
    writeln!(out, "{line}").unwrap();
    out.flush().unwrap();
}

fn hold(args: &[String]) {
    let [url, prefix, n] = args else {
        panic!("usage: hold <url> <prefix> <n>");
    };
    let n: usize = n.parse().unwrap();
    let client = LockClient::new(url).unwrap();
    let mut guards: Vec<OwnedLockGuard> = (0..n)
        .map(|i| client.lock_owned(&format!("{prefix}{i}")).unwrap())
        .collect();
    say("held");
    for line in std::io::stdin().lock().lines().map_while(Result::ok) {
        if line.trim() == "release" {
            for g in guards.drain(..) {
                g.unlock().unwrap();
            }
            say("released");
        }
    }
}

/// One critical section of worker `id`: records entry and exit around a
/// non-atomic increment.
fn section(con: &mut redis::Connection, name: &str, id: &str) {
    let events = format!("events:{name}");
    let count = format!("count:{name}");
    let _: () = con.rpush(&events, format!("E {id}")).unwrap();
    let n: u64 = con.get::<_, Option<u64>>(&count).unwrap().unwrap_or(0);
    let _: () = con.set(&count, n + 1).unwrap();
    let _: () = con.rpush(&events, format!("X {id}")).unwrap();
}

fn mixed(args: &[String]) {
    let [url, name, tasks, threads, rounds, tag] = args else {
        panic!("usage: mixed <url> <name> <tasks> <threads> <rounds> <tag>");
    };
    let (tasks, threads, rounds): (usize, usize, usize) = (
        tasks.parse().unwrap(),
        threads.parse().unwrap(),
        rounds.parse().unwrap(),
    );
    let client = LockClient::new(url).unwrap();
    let records = redis::Client::open(url.as_str()).unwrap();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let blocking: Vec<_> = (0..threads)
        .map(|t| {
            let (client, records, name, tag) =
                (client.clone(), records.clone(), name.clone(), tag.clone());
            std::thread::spawn(move || {
                let mut con = records.get_connection().unwrap();
                for i in 0..rounds {
                    let guard = client.lock(&name).unwrap();
                    section(&mut con, &name, &format!("{tag}.t{t}.{i}"));
                    guard.unlock().unwrap();
                }
                rounds
            })
        })
        .collect();
    let async_client = client.to_async();
    let done = runtime.block_on(async {
        let workers: Vec<_> = (0..tasks)
            .map(|w| {
                let (client, records, name, tag) = (
                    async_client.clone(),
                    records.clone(),
                    Arc::new(name.clone()),
                    tag.clone(),
                );
                tokio::spawn(async move {
                    let mut con = records.get_connection().unwrap();
                    for i in 0..rounds {
                        let guard = client.lock(&name).await.unwrap();
                        // A short synchronous section, as the threads' (a
                        // few local round trips); the guard is held across
                        // an await too.
                        section(&mut con, &name, &format!("{tag}.a{w}.{i}"));
                        tokio::task::yield_now().await;
                        guard.unlock().await.unwrap();
                    }
                    rounds
                })
            })
            .collect();
        let mut done = 0;
        for w in workers {
            done += w.await.unwrap();
        }
        done
    });
    let done = done
        + blocking
            .into_iter()
            .map(|t| t.join().unwrap())
            .sum::<usize>();
    say(&format!("done {done}"));
}
