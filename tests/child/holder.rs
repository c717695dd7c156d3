//! The test child: a lock holder in its own process, driven by the tests
//! over stdin/stdout. No binary of its own (it would be packaged and
//! installed with the library): a test binary that mounts this file as
//! `mod child` re-executes itself to run just [`child_process_entry`] with
//! the child's arguments in `LEASEHOLD_TEST_CHILD` (see
//! `support::child_command`). Modes, by their first argument:
//!
//! `<url> <name> <watchdog-lease-ms>` (client name `child-<name>`) takes a
//! fenced lock, prints `held <token>`, then answers one command per stdin line:
//! - `status` → `status held=<bool> lost=<reason or none>`
//! - `write <store-key> <value>` → `wrote <bool>` (through a `FencedStore`)
//! - `unlock` → `unlock ok` / `unlock not-held` / `unlock error <msg>`
//! - `exit` (or end of input) → exits.
//!
//! `check <url> <names,…> <threads> <per-thread>
//! <process-tag> <watchdog-lease-ms>` runs the mutual-exclusion workload:
//! each thread takes the names in turn, and inside each critical section
//! appends `E <tag>.<thread>.<i>` to `events:<name>`, reads `count:<name>`,
//! writes it back plus one (a non-atomic read-modify-write) and appends
//! `X <tag>.<thread>.<i>`. Prints `done <sections>` at the end. A
//! comma-separated `<url>` is a cluster's seed list; the records then go to
//! `LEASEHOLD_RECORDS_URL` (a plain server).
//!
//! `hammer <url> <name> <millis> [fair]` takes and releases the lock (plain,
//! or fair) in a loop for that long with its own client, one thread, and
//! prints `done <sections>`.
//!
//! `cycle <url> <name>` takes and releases a plain, a fair, a read and a
//! write lock (names `<name>:<kind>`), one thread each, in a loop until it
//! reads `stop`; prints `started` once every thread has had a turn, then
//! `done <sections> failed <n>` (and each failure's text on stderr).
//!
//! `read <url> <name>` holds a read lock (client name `child-reader`),
//! prints `held`, and gives it back at its next input line.
//!
//! `stall <url> <name> <lease-ms> <work-ms>` runs two threads that take
//! the lock (that watchdog lease) in turn for that long each, appending
//! `E <pid> <unix µs>` on entry and `X <pid> <unix µs>` before the release
//! to `events:<name>`; prints `started`, and runs until its input ends. A
//! release that finds the lock lost (the process was stopped) is fine.
//!
//! `soak <sentinel-urls,…> <master> <name> <replicated 0|1> <store-url>`
//! runs two threads that take the fenced lock `name` through Sentinel (a
//! 3 s watchdog lease; with `replicated`, `replicas(1, 300 ms)`), each hold
//! writing through a `FencedStore` on the store server at entry and exit;
//! every hold is recorded on the store as `H <token> <enter µs> <exit µs>
//! <entry write accepted> <exit write accepted> <lost>` in `soak:<name>`,
//! every failed lock call as `E <what>`. Prints `started`; runs until its
//! input ends.
//!
//! `fair <url> <name>` runs fair-lock waiters on
//! command: `take <tag>` starts a thread that takes the fair lock and prints
//! `got <tag>`; `release <tag>` makes it unlock. Each thread is its own waiter.

use std::io::{BufRead, Write};
use std::time::Duration;

use leasehold::{FencedStore, LockClient, LockOptions};

use crate::support::{ChildProcess, CHILD_ENV};

/// In a child process: runs the mode its arguments name, then exits (so the
/// test harness prints nothing after it). Otherwise: checks that a child
/// process can be started and driven (the `echo` mode).
#[test]
fn child_process_entry() {
    if let Ok(args) = std::env::var(CHILD_ENV) {
        run(args.split('\u{1f}').map(str::to_owned).collect());
        let _ = std::io::stdout().flush();
        std::process::exit(0);
    }
    let mut echo = ChildProcess::start(&["echo"]);
    assert_eq!(echo.ask("ping"), "ping");
    assert_eq!(echo.ask("two words"), "two words");
}

fn run(args: Vec<String>) {
    if args.first().map(String::as_str) == Some("echo") {
        for line in std::io::stdin().lock().lines().map_while(Result::ok) {
            println!("{line}");
        }
        return;
    }
    if args.first().map(String::as_str) == Some("check") {
        return check(&args[1..]);
    }
    if args.first().map(String::as_str) == Some("fair") {
        return fair(&args[1..]);
    }
    if args.first().map(String::as_str) == Some("hammer") {
        return hammer(&args[1..]);
    }
    if args.first().map(String::as_str) == Some("cycle") {
        return cycle(&args[1..]);
    }
    if args.first().map(String::as_str) == Some("rw") {
        return rw(&args[1..]);
    }
    if args.first().map(String::as_str) == Some("read") {
        return read_hold(&args[1..]);
    }
    if args.first().map(String::as_str) == Some("rwcheck") {
        return rwcheck(&args[1..]);
    }
    if args.first().map(String::as_str) == Some("stall") {
        return stall(&args[1..]);
    }
    if args.first().map(String::as_str) == Some("soak") {
        return soak(&args[1..]);
    }
    let [url, name, lease_ms] = &args[..] else {
        eprintln!("usage: child <url> <name> <watchdog-lease-ms>");
        std::process::exit(2);
    };
    let lease = Duration::from_millis(lease_ms.parse().expect("lease in ms"));
    let client = LockClient::builder(url)
        .watchdog_lease(lease)
        .client_name(format!("child-{name}"))
        .build()
        .expect("client");
    let guard = client
        .lock_with(name, LockOptions::new().fenced())
        .expect("lock");
    let lost = guard.lost().receiver();
    let mut con = redis::Client::open(url.as_str())
        .and_then(|c| c.get_connection())
        .expect("connection");
    let mut out = std::io::stdout();
    let token = guard.fence().expect("fenced");
    writeln!(out, "held {token}").unwrap();
    out.flush().unwrap();
    let mut guard = Some(guard);
    for line in std::io::stdin().lock().lines() {
        let line = line.unwrap_or_default();
        let words: Vec<&str> = line.split_whitespace().collect();
        let reply = match words.as_slice() {
            ["status"] => {
                let held = guard.as_ref().is_some_and(|g| g.is_held());
                let why = lost
                    .try_recv()
                    .map(|w| format!("{w:?}"))
                    .unwrap_or_else(|_| "none".into());
                format!("status held={held} lost={why}")
            }
            ["write", key, value] => {
                let store = FencedStore::new(*key);
                match store.write(&mut con, token, value) {
                    Ok(w) => format!("wrote {w}"),
                    Err(e) => format!("wrote error {e}"),
                }
            }
            ["unlock"] => match guard.take().map(|g| g.unlock()) {
                Some(Ok(())) => "unlock ok".into(),
                Some(Err(e)) if e.is_not_held() => "unlock not-held".into(),
                Some(Err(e)) => format!("unlock error {e}"),
                None => "unlock error already unlocked".into(),
            },
            ["exit"] => break,
            _ => format!("unknown {line}"),
        };
        writeln!(out, "{reply}").unwrap();
        out.flush().unwrap();
    }
}

fn check(args: &[String]) {
    let [url, names, threads, per_thread, tag, lease_ms] = args else {
        eprintln!("usage: child check <url> <names> <threads> <per-thread> <tag> <lease-ms>");
        std::process::exit(2);
    };
    let names: Vec<String> = names.split(',').map(str::to_owned).collect();
    let threads: usize = threads.parse().expect("threads");
    let per_thread: usize = per_thread.parse().expect("per-thread");
    let lease = Duration::from_millis(lease_ms.parse().expect("lease in ms"));
    // A comma-separated list of URLs is a cluster's seeds; the records then
    // go to the server of `LEASEHOLD_RECORDS_URL`.
    let builder = if url.contains(',') {
        LockClient::cluster_builder(&url.split(',').collect::<Vec<_>>())
    } else {
        LockClient::builder(url)
    };
    let client = builder.watchdog_lease(lease).build().expect("client");
    let records = std::env::var("LEASEHOLD_RECORDS_URL").unwrap_or_else(|_| url.clone());
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let (client, names, url, tag) =
                (client.clone(), names.clone(), records.clone(), tag.clone());
            std::thread::spawn(move || {
                let mut con = redis::Client::open(url.as_str())
                    .and_then(|c| c.get_connection())
                    .expect("connection");
                for i in 0..per_thread {
                    let name = &names[(i + t) % names.len()];
                    let id = format!("{tag}.{t}.{i}");
                    let guard = client.lock(name).expect("lock");
                    let events = format!("events:{name}");
                    let count = format!("count:{name}");
                    push(&mut con, &events, format!("E {id}"));
                    let n = read_count(&mut con, &count);
                    write_count(&mut con, &count, n + 1);
                    push(&mut con, &events, format!("X {id}"));
                    guard.unlock().expect("unlock");
                }
                per_thread
            })
        })
        .collect();
    let done: usize = handles.into_iter().map(|h| h.join().expect("worker")).sum();
    println!("done {done}");
}

fn hammer(args: &[String]) {
    let (url, name, millis, fair) = match args {
        [url, name, millis] => (url, name, millis, false),
        [url, name, millis, kind] if kind == "fair" => (url, name, millis, true),
        _ => {
            eprintln!("usage: child hammer <url> <name> <millis> [fair]");
            std::process::exit(2);
        }
    };
    let client = LockClient::new(url).expect("client");
    let until = std::time::Instant::now() + Duration::from_millis(millis.parse().expect("millis"));
    let opts = if fair {
        LockOptions::new().fair()
    } else {
        LockOptions::new()
    };
    let mut sections = 0u64;
    while std::time::Instant::now() < until {
        let guard = client.lock_with(name, opts.clone()).expect("lock");
        sections += 1;
        guard.unlock().expect("unlock");
    }
    println!("done {sections}");
}

/// `read <url> <name>`: holds a read lock (client name `child-reader`),
/// prints `held`, and keeps it until a line or the end of its input.
fn read_hold(args: &[String]) {
    let [url, name] = args else {
        eprintln!("usage: child read <url> <name>");
        std::process::exit(2);
    };
    let client = LockClient::builder(url)
        .client_name("child-reader")
        .build()
        .expect("client");
    let guard = client.read_lock(name).expect("read lock");
    println!("held");
    let _ = std::io::stdout().flush();
    let mut line = String::new();
    let _ = std::io::stdin().lock().read_line(&mut line);
    drop(guard);
}

fn cycle(args: &[String]) {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::{Arc, Barrier};
    let [url, name] = args else {
        eprintln!("usage: child cycle <url> <name>");
        std::process::exit(2);
    };
    let client = LockClient::new(url).expect("client");
    let stop = Arc::new(AtomicBool::new(false));
    let (sections, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let started = Arc::new(Barrier::new(5));
    let threads: Vec<_> = ["plain", "fair", "read", "write"]
        .into_iter()
        .map(|kind| {
            let (client, stop, sections, failed, started) = (
                client.clone(),
                stop.clone(),
                sections.clone(),
                failed.clone(),
                started.clone(),
            );
            let name = format!("{name}:{kind}");
            std::thread::spawn(move || {
                let mut first = true;
                while first || !stop.load(Ordering::Relaxed) {
                    let guard = match kind {
                        "plain" => client.lock(&name),
                        "fair" => client.lock_with(&name, LockOptions::new().fair()),
                        "read" => client.read_lock(&name),
                        _ => client.write_lock(&name),
                    };
                    let result = guard.and_then(|g| g.unlock());
                    match result {
                        Ok(()) => sections.fetch_add(1, Ordering::Relaxed),
                        Err(e) => {
                            eprintln!("{kind}: {e}");
                            failed.fetch_add(1, Ordering::Relaxed)
                        }
                    };
                    if first {
                        first = false;
                        started.wait();
                    }
                }
            })
        })
        .collect();
    started.wait();
    println!("started");
    let _ = std::io::stdout().flush();
    for line in std::io::stdin().lock().lines() {
        if line.map_or(true, |l| l.trim() == "stop") {
            break;
        }
    }
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().expect("a cycling thread panicked");
    }
    println!(
        "done {} failed {}",
        sections.load(Ordering::Relaxed),
        failed.load(Ordering::Relaxed)
    );
}

fn fair(args: &[String]) {
    let [url, name] = args else {
        eprintln!("usage: child fair <url> <name>");
        std::process::exit(2);
    };
    let client = LockClient::new(url).expect("client");
    let out = std::sync::Arc::new(std::sync::Mutex::new(std::io::stdout()));
    let mut releases = std::collections::HashMap::new();
    for line in std::io::stdin().lock().lines() {
        let line = line.unwrap_or_default();
        match line.split_whitespace().collect::<Vec<_>>().as_slice() {
            ["take", tag] => {
                let (tx, rx) = std::sync::mpsc::channel::<()>();
                releases.insert(tag.to_string(), tx);
                let (client, name, tag, out) =
                    (client.clone(), name.clone(), tag.to_string(), out.clone());
                std::thread::spawn(move || {
                    let guard = client.fair_lock(&name).expect("fair lock");
                    {
                        let mut out = out.lock().unwrap();
                        writeln!(out, "got {tag}").unwrap();
                        out.flush().unwrap();
                    }
                    let _ = rx.recv();
                    guard.unlock().expect("unlock");
                });
            }
            ["release", tag] => {
                if let Some(tx) = releases.remove(*tag) {
                    let _ = tx.send(());
                }
            }
            _ => break,
        }
    }
}

fn rw(args: &[String]) {
    let [url, name, lease_ms] = args else {
        eprintln!("usage: child rw <url> <name> <watchdog-lease-ms>");
        std::process::exit(2);
    };
    let lease = Duration::from_millis(lease_ms.parse().expect("lease in ms"));
    let client = LockClient::builder(url)
        .watchdog_lease(lease)
        .build()
        .expect("client");
    let mut guards = Vec::new();
    let mut out = std::io::stdout();
    for line in std::io::stdin().lock().lines() {
        let reply = match line.unwrap_or_default().trim() {
            "read" => {
                guards.push(client.read_lock(name).expect("read lock"));
                "read ok"
            }
            "write" => {
                guards.push(client.write_lock(name).expect("write lock"));
                "write ok"
            }
            "drop" => {
                guards.clear();
                "dropped"
            }
            _ => break,
        };
        writeln!(out, "{reply}").unwrap();
        out.flush().unwrap();
    }
}

fn rwcheck(args: &[String]) {
    let [url, name, threads, per_thread, tag, every] = args else {
        eprintln!("usage: child rwcheck <url> <name> <threads> <per-thread> <tag> <write-every>");
        std::process::exit(2);
    };
    let threads: usize = threads.parse().expect("threads");
    let per_thread: usize = per_thread.parse().expect("per-thread");
    let every: usize = every.parse().expect("write-every");
    let client = LockClient::new(url).expect("client");
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let (client, name, url, tag) = (client.clone(), name.clone(), url.clone(), tag.clone());
            std::thread::spawn(move || {
                let mut con = redis::Client::open(url.as_str())
                    .and_then(|c| c.get_connection())
                    .expect("connection");
                let events = format!("events:{name}");
                let count = format!("count:{name}");
                let mut writes = 0;
                for i in 0..per_thread {
                    let write = (i + t) % every == 0;
                    let side = if write { "W" } else { "R" };
                    let id = format!("{tag}.{t}.{i}");
                    let guard = if write {
                        client.write_lock(&name)
                    } else {
                        client.read_lock(&name)
                    }
                    .expect("lock");
                    push(&mut con, &events, format!("E {side} {id}"));
                    let n = read_count(&mut con, &count);
                    if write {
                        write_count(&mut con, &count, n + 1);
                        writes += 1;
                    } else {
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    push(&mut con, &events, format!("X {side} {id}"));
                    guard.unlock().expect("unlock");
                }
                writes
            })
        })
        .collect();
    let writes: usize = handles.into_iter().map(|h| h.join().expect("worker")).sum();
    println!("done {writes}");
}

/// Appends one enter/exit record to `list`.
/// `stall <url> <name> <lease-ms> <work-ms>` (see the file's docs).
fn stall(args: &[String]) {
    let [url, name, lease_ms, work_ms] = args else {
        eprintln!("usage: child stall <url> <name> <lease-ms> <work-ms>");
        std::process::exit(2);
    };
    let lease = Duration::from_millis(lease_ms.parse().expect("lease in ms"));
    let work = Duration::from_millis(work_ms.parse().expect("work in ms"));
    let client = LockClient::builder(url)
        .watchdog_lease(lease)
        .client_name(format!("stall-{}", std::process::id()))
        .build()
        .expect("client");
    let micros = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_micros())
    };
    for _ in 0..2 {
        let (client, url, name) = (client.clone(), url.clone(), name.clone());
        std::thread::spawn(move || {
            let mut con = redis::Client::open(url.as_str())
                .and_then(|c| c.get_connection())
                .expect("connection");
            let events = format!("events:{name}");
            let pid = std::process::id();
            loop {
                let guard = match client.lock(&name) {
                    Ok(g) => g,
                    Err(e) => {
                        eprintln!("stall child: lock failed: {e:?}");
                        std::thread::sleep(Duration::from_millis(10));
                        continue;
                    }
                };
                push(&mut con, &events, format!("E {pid} {}", micros()));
                std::thread::sleep(work);
                push(&mut con, &events, format!("X {pid} {}", micros()));
                let _ = guard.unlock(); // lost while stopped: fine
            }
        });
    }
    println!("started");
    let _ = std::io::stdout().flush();
    let mut line = String::new();
    while std::io::stdin().lock().read_line(&mut line).unwrap_or(0) > 0 {
        line.clear();
    }
}

/// `soak <sentinel-urls,…> <master> <name> <replicated 0|1> <store-url>`
/// (see the file's docs).
fn soak(args: &[String]) {
    let [sentinels, master, name, replicated, store_url] = args else {
        eprintln!("usage: child soak <sentinel-urls> <master> <name> <replicated> <store-url>");
        std::process::exit(2);
    };
    let urls: Vec<&str> = sentinels.split(',').collect();
    let mut builder = LockClient::sentinel_builder(&urls, master)
        .watchdog_lease(Duration::from_secs(3))
        .socket_timeout(Duration::from_millis(500))
        .connect_timeout(Duration::from_secs(2))
        .client_name(format!("soak-{}", std::process::id()));
    if replicated == "1" {
        builder = builder.replicas(1, Duration::from_millis(300));
    }
    let client = builder.build().expect("client");
    let micros = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_micros())
    };
    for _ in 0..2 {
        let (client, store_url, name) = (client.clone(), store_url.clone(), name.clone());
        std::thread::spawn(move || {
            let mut con = redis::Client::open(store_url.as_str())
                .and_then(|c| c.get_connection())
                .expect("store connection");
            let store = FencedStore::new(format!("resource:{name}"));
            let records = format!("soak:{name}");
            let opts = LockOptions::new().fenced().wait(Duration::from_secs(2));
            loop {
                let guard = match client.lock_with(&name, opts.clone()) {
                    Ok(g) => g,
                    Err(e) => {
                        let what = if e.is_wait_timeout() {
                            "wait-timeout"
                        } else if matches!(e, leasehold::Error::NotReplicated { .. }) {
                            "not-replicated"
                        } else if e.is_connection() || e.is_refused() {
                            "unavailable"
                        } else {
                            eprintln!("soak child: untyped failure: {e:?}");
                            "other"
                        };
                        push(&mut con, &records, format!("E {what}"));
                        std::thread::sleep(Duration::from_millis(20));
                        continue;
                    }
                };
                let token = guard.fence().expect("fenced");
                let enter = micros();
                let first = store.write(&mut con, token, "entry").unwrap_or(false);
                std::thread::sleep(Duration::from_millis(30));
                let last = store.write(&mut con, token, "exit").unwrap_or(false);
                let exit = micros();
                let lost = !guard.is_held() || guard.lost().check().is_some();
                let unlocked = guard.unlock();
                let lost = lost || unlocked.as_ref().is_err_and(|e| e.is_not_held());
                push(
                    &mut con,
                    &records,
                    format!("H {token} {enter} {exit} {first} {last} {lost}"),
                );
            }
        });
    }
    println!("started");
    let _ = std::io::stdout().flush();
    let mut line = String::new();
    while std::io::stdin().lock().read_line(&mut line).unwrap_or(0) > 0 {
        line.clear();
    }
}

fn push(con: &mut redis::Connection, list: &str, item: String) {
    let _: i64 = redis::cmd("RPUSH")
        .arg(list)
        .arg(item)
        .query(con)
        .expect("rpush");
}

/// The shared counter (0 when unset).
fn read_count(con: &mut redis::Connection, key: &str) -> i64 {
    redis::cmd("GET")
        .arg(key)
        .query::<Option<i64>>(con)
        .expect("get")
        .unwrap_or(0)
}

fn write_count(con: &mut redis::Connection, key: &str, n: i64) {
    let _: () = redis::cmd("SET").arg(key).arg(n).query(con).expect("set");
}
