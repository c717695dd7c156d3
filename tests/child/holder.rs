//! `leasehold-test-child`: a lock holder in its own process, driven by the
//! fault tests over stdin/stdout (a test helper, not part of the library).
//!
//! `leasehold-test-child <url> <name> <watchdog-lease-ms>` takes a fenced
//! lock, prints `held <token>`, then answers one command per stdin line:
//! - `status` → `status held=<bool> lost=<reason or none>`
//! - `write <store-key> <value>` → `wrote <bool>` (through a `FencedStore`)
//! - `unlock` → `unlock ok` / `unlock not-held` / `unlock error <msg>`
//! - `exit` (or end of input) → exits.

use std::io::{BufRead, Write};
use std::time::Duration;

use leasehold::{FencedStore, LockClient, LockOptions};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [url, name, lease_ms] = &args[..] else {
        eprintln!("usage: leasehold-test-child <url> <name> <watchdog-lease-ms>");
        std::process::exit(2);
    };
    let lease = Duration::from_millis(lease_ms.parse().expect("lease in ms"));
    let client = LockClient::builder(url)
        .watchdog_lease(lease)
        .build()
        .expect("client");
    let guard = client
        .lock_with(name, LockOptions::new().fenced())
        .expect("lock");
    let lost = guard.lost();
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
