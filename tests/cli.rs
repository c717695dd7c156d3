//! The operators' `leasehold` binary (feature `cli`), run end to end against
//! a throwaway server: inspect (text and JSON), list, force-unlock (asking
//! first unless `--yes`), and watch for a second.
#![cfg(feature = "cli")]

mod support;

use std::io::{BufRead, Read, Write};
use std::process::{Command, Output, Stdio};
use std::thread;
use std::time::Duration;

use leasehold::{LockClient, LockOptions};
use support::{eventually, RedisServer};

fn cli(server: &RedisServer, args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_leasehold-cli"))
        .arg("--url")
        .arg(server.url())
        .arg("--prefix")
        .arg("ops:")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run the leasehold binary");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

fn stdout(out: &Output) -> String {
    assert!(
        out.status.success(),
        "exit {:?}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn the_cli_inspects_lists_force_unlocks_and_watches() {
    let server = RedisServer::start();
    let service = LockClient::builder(&server.url())
        .key_prefix("ops:")
        .client_name("billing-worker-3")
        .build()
        .unwrap();
    let waiter = LockClient::builder(&server.url())
        .key_prefix("ops:")
        .client_name("billing-worker-4")
        .build()
        .unwrap();
    let held = service
        .lock_with("order:pay", LockOptions::new().fenced())
        .unwrap();
    let fence = held.fence().unwrap();
    // The waiter keeps the lock it gets until told (after the watch below
    // ended), so the watch sees exactly one change: a release that came
    // while the watch still ran was a third, under load.
    let (got_tx, got_rx) = std::sync::mpsc::channel::<()>();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let w = {
        let waiter = waiter.clone();
        thread::spawn(move || {
            let g = waiter.lock("order:pay")?;
            let _ = got_tx.send(());
            let _ = done_rx.recv();
            g.unlock()
        })
    };
    assert!(eventually(Duration::from_secs(5), || {
        let info = service.inspect("order:pay").unwrap();
        info.waiters.iter().all(|w| w.client.is_some())
            && info.holders.iter().all(|h| h.client.is_some())
            && !info.waiters.is_empty()
    }));
    let _other = service.read_lock("catalog").unwrap();

    // inspect, as text: who, where, how long, who waits.
    let text = stdout(&cli(&server, &["inspect", "order:pay"], ""));
    println!("{text}");
    assert!(
        text.contains("lock \"order:pay\" (key \"ops:order:pay\"): exclusive"),
        "{text}"
    );
    assert!(text.contains("billing-worker-3 on "), "{text}");
    assert!(
        text.contains(&format!("pid {}", std::process::id())),
        "{text}"
    );
    assert!(text.contains("waiting (line): thread"), "{text}");
    assert!(text.contains("billing-worker-4"), "{text}");
    assert!(
        text.contains(&format!("last fencing token {fence}")),
        "{text}"
    );
    // … and as JSON.
    let json = stdout(&cli(&server, &["--json", "inspect", "order:pay"], ""));
    assert!(json.starts_with("{\"name\":\"order:pay\""), "{json}");
    assert!(json.contains("\"name\":\"billing-worker-3\""), "{json}");
    assert!(json.contains(&format!("\"fence\":{fence}")), "{json}");

    // list: both locks, no registrations.
    let list = stdout(&cli(&server, &["list"], ""));
    println!("{list}");
    assert!(
        list.lines()
            .any(|l| l.starts_with("order:pay\texclusive\t1 waiting")),
        "{list}"
    );
    assert!(
        list.lines().any(|l| l.starts_with("catalog\tread/write")),
        "{list}"
    );
    assert_eq!(list.lines().count(), 2, "{list}");
    let some = stdout(&cli(&server, &["list", "order:*"], ""));
    assert_eq!(some.lines().count(), 1, "{some}");

    // force-unlock asks first; "n" changes nothing.
    let refused = cli(&server, &["force-unlock", "order:pay"], "n\n");
    assert_eq!(refused.status.code(), Some(2));
    assert!(service.is_locked("order:pay").unwrap());

    // watch: the release below shows up as a change (the waiter in). The
    // release comes once the watch printed the lock as it is, and the watch
    // goes on for 4 s: the change shows within a few hundred ms.
    let mut watch = Command::new(env!("CARGO_BIN_EXE_leasehold-cli"))
        .args(["--url", &server.url(), "--prefix", "ops:"])
        .args(["watch", "order:pay", "--interval", "50", "--for", "4"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut output = std::io::BufReader::new(watch.stdout.take().unwrap());
    let mut watched = String::new();
    output.read_line(&mut watched).unwrap();
    // Confirmed: the lock goes, its waiter gets in, the holder learns it.
    let freed = stdout(&cli(&server, &["force-unlock", "order:pay"], "y\n"));
    assert!(freed.contains("order:pay: released"), "{freed}");
    got_rx
        .recv_timeout(Duration::from_secs(5))
        .expect("the waiter got in");
    output.read_to_string(&mut watched).unwrap();
    assert!(watch.wait().unwrap().success());
    done_tx.send(()).unwrap();
    w.join().unwrap().unwrap();
    println!("{watched}");
    let changes: Vec<&str> = watched.lines().filter(|l| l.starts_with("[+")).collect();
    assert_eq!(
        changes.len(),
        2,
        "the watch printed the change only: {watched}"
    );
    assert!(changes[0].contains("exclusive"), "{watched}");
    // The change: the forced release let the waiter in.
    let after = &watched[watched.find(changes[1]).unwrap_or(0)..];
    assert!(
        after.contains("held by thread") && after.contains("billing-worker-4"),
        "{watched}"
    );
    let again = stdout(&cli(&server, &["force-unlock", "--yes", "order:pay"], ""));
    assert!(again.contains("was not held"), "{again}");
    drop(held);
}

/// `list` with the default (empty) prefix, where leasehold's own companion
/// hashes (the fair lock's waiter marks, client registrations) and a hash of
/// the application's share the keyspace with the locks: only locks are
/// listed, each once.
#[test]
fn list_without_a_prefix_shows_locks_only() {
    let server = RedisServer::start();
    let client = LockClient::new(&server.url()).unwrap();
    let other = LockClient::new(&server.url()).unwrap();
    let _plain = client.lock("order:pay").unwrap();
    let _fair = client.fair_lock("batch:shard-1").unwrap();
    let _read = client.read_lock("catalog").unwrap();
    // A fair waiter of another client: the fair lock marks its place.
    let waiter = {
        let other = other.clone();
        thread::spawn(move || other.fair_lock("batch:shard-1").map(drop))
    };
    assert!(eventually(Duration::from_secs(5), || {
        !client.inspect("batch:shard-1").unwrap().waiters.is_empty()
    }));
    let mut con = redis::Client::open(server.url())
        .unwrap()
        .get_connection()
        .unwrap();
    let _: () = redis::cmd("HSET")
        .arg("user:1")
        .arg("name")
        .arg("bob")
        .query(&mut con)
        .unwrap();
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut con).unwrap();
    println!("keys: {keys:?}");

    let out = Command::new(env!("CARGO_BIN_EXE_leasehold-cli"))
        .args(["--url", &server.url(), "list"])
        .output()
        .unwrap();
    let list = stdout(&out);
    println!("{list}");
    let mut names: Vec<&str> = list
        .lines()
        .map(|l| l.split('\t').next().unwrap())
        .collect();
    names.sort_unstable();
    assert_eq!(names, ["batch:shard-1", "catalog", "order:pay"], "{list}");
    drop((_plain, _fair, _read));
    waiter.join().unwrap().unwrap();
}

/// Runs the CLI with exactly `args`; its output.
fn cli_raw(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_leasehold-cli"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run the leasehold binary")
}

fn stderr(out: &Output) -> String {
    assert!(!out.status.success(), "it should have failed: {out:?}");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn force_unlock_refuses_application_data_and_list_leaves_it_out() {
    let server = RedisServer::start();
    let mut con = server.connection();
    let data = support::seed_application_data(&mut con);
    let client = LockClient::new(&server.url()).unwrap();
    let _held = client.lock("order:pay").unwrap();
    let url = server.url();
    for (name, is) in data {
        let out = cli_raw(&["--url", &url, "force-unlock", name, "--yes"]);
        let text = stderr(&out);
        assert!(
            text.contains("is not a lock") && text.contains(is) && !text.contains("released"),
            "{name}: {text}"
        );
        let out = cli_raw(&["--url", &url, "inspect", name]);
        assert!(stderr(&out).contains("is not a lock"), "{name}");
    }
    assert!(support::application_data_intact(&mut con));
    let out = cli_raw(&["--url", &url, "list"]);
    let listed = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{out:?}");
    let names: Vec<&str> = listed
        .lines()
        .filter_map(|l| l.split('\t').next())
        .collect();
    assert_eq!(names, ["order:pay"], "{listed}");
}

#[test]
fn the_cli_names_the_cause_and_the_address() {
    // A wrong password.
    let server = RedisServer::start_with_password("right");
    let addr = format!("127.0.0.1:{}", server.port());
    let out = cli_raw(&["--url", &format!("redis://:wrong@{addr}/"), "inspect", "x"]);
    let text = stderr(&out);
    assert!(
        text.contains(&addr) && text.contains("credentials"),
        "{text}"
    );
    assert!(text.contains("WRONGPASS"), "the cause: {text}");
    assert!(!text.contains("wrong@"), "no password printed: {text}");
    // No password at all: every command says one is needed (a lock's
    // scripts are long commands, which the server refuses unread).
    let bare = server.bare_url();
    for args in [
        vec!["inspect", "x"],
        vec!["list"],
        vec!["force-unlock", "x", "--yes"],
        vec!["semaphore", "s"],
    ] {
        let mut all = vec!["--url", bare.as_str()];
        all.extend(args.iter().copied());
        let text = stderr(&cli_raw(&all));
        assert!(
            text.contains(&addr) && text.contains("requires a password"),
            "{args:?}: {text}"
        );
    }

    // A port that accepts and never answers: the address, the timeout it
    // waited, and the option that changes it.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let silent = listener.local_addr().unwrap().to_string();
    // It holds the connections a minute: a client that waited for an
    // answer instead of its 300 ms socket timeout would wait that long.
    let _accepting = thread::spawn(move || {
        let held: Vec<_> = listener.incoming().take(4).collect();
        thread::sleep(Duration::from_secs(60));
        drop(held);
    });
    let started = std::time::Instant::now();
    let out = cli_raw(&[
        "--url",
        &format!("redis://{silent}/"),
        "--socket-timeout",
        "300",
        "inspect",
        "x",
    ]);
    let text = stderr(&out);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert!(
        text.contains(&silent) && text.contains("300ms") && text.contains("--socket-timeout"),
        "{text}"
    );
}

#[cfg(feature = "tls")]
#[test]
fn the_cli_names_a_certificate_it_cannot_trust_and_the_address() {
    let server = RedisServer::start_tls();
    let other_ca = std::env::temp_dir().join(format!("leasehold-cli-ca-{}", std::process::id()));
    std::fs::create_dir_all(&other_ca).unwrap();
    let certs = support::TlsFiles::make(&other_ca);
    let out = cli_raw(&[
        "--url",
        &server.url(),
        "--tls-ca",
        certs.ca_file().to_str().unwrap(),
        "--connect-timeout",
        "1000",
        "inspect",
        "x",
    ]);
    let text = stderr(&out);
    let _ = std::fs::remove_dir_all(&other_ca);
    assert!(
        text.contains(&format!("127.0.0.1:{}", server.port())),
        "the address: {text}"
    );
    assert!(
        text.contains("UnknownIssuer") || text.contains("certificate"),
        "the cause: {text}"
    );
}

#[test]
fn the_cli_shows_a_semaphores_permits_and_waiters() {
    let server = RedisServer::start();
    let service = LockClient::builder(&server.url())
        .key_prefix("ops:")
        .build()
        .unwrap();
    let sem = service.semaphore("exports");
    sem.set_permits(2).unwrap();
    let held = sem.acquire_many(2).unwrap();
    let waiter = thread::spawn({
        let sem = sem.clone();
        move || {
            sem.try_acquire_for(Duration::from_secs(10))
                .unwrap()
                .is_some()
        }
    });
    assert!(eventually(Duration::from_secs(3), || {
        sem.inspect().unwrap().waiters.len() == 1
    }));
    let text = stdout(&cli(&server, &["semaphore", "exports"], ""));
    assert!(
        text.starts_with("semaphore exports: 0 available, 2 out"),
        "{text}"
    );
    let info = sem.inspect().unwrap();
    let client = info.holders[0].client.clone().unwrap();
    assert!(info.holders.iter().all(|p| p.ours), "{info:?}");
    assert!(info.waiters[0].owner.starts_with(&client), "{info:?}");
    let text_client = format!("leasehold client {client}…");
    assert_eq!(text.matches(&text_client).count(), 2, "{text}");
    assert!(text.contains("lease left"), "{text}");
    assert!(
        text.contains("for 1 permit(s)") && text.contains(&info.waiters[0].owner),
        "{text}"
    );
    let json = stdout(&cli(&server, &["--json", "semaphore", "exports"], ""));
    assert!(
        json.starts_with("{\"name\":\"exports\",\"available\":0,"),
        "{json}"
    );
    assert_eq!(json.matches("\"lease_left_ms\":").count(), 2, "{json}");
    assert!(json.contains("\"permits\":1"), "{json}");
    drop(held);
    assert!(waiter.join().unwrap());
    let text = stdout(&cli(&server, &["semaphore", "nothing"], ""));
    assert_eq!(text.trim(), "semaphore nothing: no permits set");
}
