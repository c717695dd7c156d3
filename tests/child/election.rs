//! Test children of `tests/election.rs`: this test binary re-executed (see
//! `support::child_command`).
//!
//! `candidate <url> <lease-ms>` — campaigns on election `e` for ever. As
//! leader it sets `leader` to `<pid> <term>`, then every 10 ms acts: while
//! it believes it leads (`is_held`) it records `<term> <pid> <unix µs>
//! <until µs>` in `acts` — `until`: the end of the lease it knows of, by
//! its own clock — and writes its term to the fenced store `store`; it
//! resigns when `resign:<pid>` is set (recording `<term> <pid> <µs> <µs>`:
//! its belief ends there), and campaigns again when it lost or resigned.

use std::io::Write;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use leasehold::{FencedStore, LockClient};
use redis::Commands;

use crate::support::CHILD_ENV;

#[test]
fn child_process_entry() {
    if let Ok(args) = std::env::var(CHILD_ENV) {
        let args: Vec<String> = args.split('\u{1f}').map(str::to_owned).collect();
        match args.first().map(String::as_str) {
            Some("candidate") => candidate(&args[1..]),
            _ => {
                eprintln!("unknown child mode {args:?}");
                std::process::exit(2);
            }
        }
        let _ = std::io::stdout().flush();
        std::process::exit(0);
    }
}

fn micros() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_micros()
}

fn candidate(args: &[String]) {
    let (url, lease) = (&args[0], args[1].parse::<u64>().unwrap());
    let client = LockClient::builder(url)
        .watchdog_lease(Duration::from_millis(lease))
        .socket_timeout(Duration::from_millis(300))
        .connect()
        .unwrap();
    let mut con = redis::Client::open(url.as_str())
        .unwrap()
        .get_connection()
        .unwrap();
    let store = FencedStore::new("store");
    let pid = std::process::id();
    let election = client.election("e");
    loop {
        let leadership = election.campaign().unwrap();
        let term = leadership.term();
        let _: () = con.set("leader", format!("{pid} {term}")).unwrap();
        loop {
            if !leadership.is_held() {
                break; // lost: campaign again
            }
            let now = micros();
            let until = now + leadership.remaining().as_micros();
            let _: () = con
                .rpush("acts", format!("{term} {pid} {now} {until}"))
                .unwrap();
            store.write(&mut con, term, &pid.to_string()).unwrap();
            if con.exists::<_, bool>(format!("resign:{pid}")).unwrap() {
                let _: () = con.del(format!("resign:{pid}")).unwrap();
                let now = micros();
                let _: () = con
                    .rpush("acts", format!("{term} {pid} {now} {now}"))
                    .unwrap();
                leadership.resign().unwrap();
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}
