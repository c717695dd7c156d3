//! Leader election on four processes: each campaigns on election
//! `scheduler`; the leader "works" (a fenced write of its term every
//! 50 ms) while it believes it leads. The coordinator SIGKILLs the leader,
//! then SIGSTOPs the next one past its lease (and lets it go on), then has
//! the third resign — and prints how long each takeover took, the terms,
//! and whether any stale write got through (it must not).
//!
//! ```text
//! cargo run --example leader -- --url redis://127.0.0.1:6379/ --lease-ms 2000
//! ```

use std::process::{Child, Command, ExitCode};
use std::time::{Duration, Instant};

use leasehold::redis::{self, Commands};
use leasehold::{FencedStore, LockClient};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

fn main() -> ExitCode {
    let mut url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/".into());
    let (mut lease_ms, mut candidate) = (2_000u64, None);
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next();
        match (flag.as_str(), value) {
            ("--url", Some(v)) => url = v,
            ("--lease-ms", Some(v)) => lease_ms = v.parse().unwrap_or(2_000),
            ("--candidate", Some(ns)) => candidate = Some(ns),
            (other, _) => {
                eprintln!("leader: unknown or incomplete argument {other:?}");
                return ExitCode::from(2);
            }
        }
    }
    let lease = Duration::from_millis(lease_ms.max(500));
    let result = match candidate {
        Some(ns) => run_candidate(&url, &ns, lease).map(|()| ExitCode::SUCCESS),
        None => coordinate(&url, lease),
    };
    result.unwrap_or_else(|e| {
        eprintln!("leader: {e}");
        ExitCode::FAILURE
    })
}

/// One candidate: campaign, lead while it knows it leads, campaign again.
fn run_candidate(url: &str, ns: &str, lease: Duration) -> Result<(), BoxError> {
    let client = LockClient::builder(url)
        .watchdog_lease(lease)
        .socket_timeout(lease / 4)
        .connect()?;
    let mut con = redis::Client::open(url)?.get_connection()?;
    let store = FencedStore::new(format!("{ns}:store"));
    let election = client.election(ns);
    let pid = std::process::id();
    loop {
        let leadership = election.campaign()?;
        let term = leadership.term();
        con.set::<_, _, ()>(format!("{ns}:leader"), format!("{pid} {term}"))?;
        while leadership.is_held() {
            if !store.write(&mut con, term, &pid.to_string())? {
                con.incr::<_, _, i64>(format!("{ns}:refused"), 1)?;
            }
            if con.del::<_, i64>(format!("{ns}:resign:{pid}"))? == 1 {
                leadership.resign()?;
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

fn leader(con: &mut redis::Connection, ns: &str) -> Result<Option<(u32, u64)>, BoxError> {
    let v: Option<String> = con.get(format!("{ns}:leader"))?;
    Ok(v.and_then(|v| {
        let (pid, term) = v.split_once(' ')?;
        Some((pid.parse().ok()?, term.parse().ok()?))
    }))
}

fn next_leader(
    con: &mut redis::Connection,
    ns: &str,
    old: u64,
) -> Result<(u32, u64, Duration), BoxError> {
    let since = Instant::now();
    loop {
        if let Some((pid, term)) = leader(con, ns)?.filter(|l| l.1 != old) {
            return Ok((pid, term, since.elapsed()));
        }
        if since.elapsed() > Duration::from_secs(60) {
            return Err("no new leader within a minute".into());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn signal(pid: u32, sig: &str) -> Result<(), BoxError> {
    let ok = Command::new("kill")
        .args([&format!("-{sig}"), &pid.to_string()])
        .status()?
        .success();
    if ok {
        Ok(())
    } else {
        Err(format!("kill -{sig} {pid} failed").into())
    }
}

fn coordinate(url: &str, lease: Duration) -> Result<ExitCode, BoxError> {
    let ns = format!("leader-demo-{}", std::process::id());
    let exe = std::env::current_exe()?;
    let mut children: Vec<Child> = (0..4)
        .map(|_| {
            Command::new(&exe)
                .args(["--url", url, "--candidate", &ns])
                .args(["--lease-ms", &lease.as_millis().to_string()])
                .spawn()
        })
        .collect::<Result<_, _>>()?;
    let mut con = redis::Client::open(url)?.get_connection()?;
    let (pid, term, _) = next_leader(&mut con, &ns, 0)?;
    println!("leader {pid}, term {term}");
    std::thread::sleep(Duration::from_millis(500));

    signal(pid, "KILL")?;
    let (pid2, term2, took) = next_leader(&mut con, &ns, term)?;
    println!("SIGKILLed it: leader {pid2}, term {term2}, after {took:?} (lease {lease:?})");
    std::thread::sleep(Duration::from_millis(500));

    signal(pid2, "STOP")?;
    let (pid3, term3, took) = next_leader(&mut con, &ns, term2)?;
    println!("SIGSTOPped it: leader {pid3}, term {term3}, after {took:?}");
    std::thread::sleep(lease);
    signal(pid2, "CONT")?;
    std::thread::sleep(Duration::from_millis(500));
    let stale = FencedStore::new(format!("{ns}:store")).write(&mut con, term2, "stale")?;
    println!("the stopped leader's term {term2} written after it went on: {stale} (must be false)");

    con.set::<_, _, ()>(format!("{ns}:resign:{pid3}"), 1)?;
    let (pid4, term4, took) = next_leader(&mut con, &ns, term3)?;
    println!("it resigned: leader {pid4}, term {term4}, after {took:?}");

    for child in &mut children {
        let _ = child.kill();
        let _ = child.wait();
    }
    let refused: Option<i64> = con.get(format!("{ns}:refused"))?;
    let keys: Vec<String> = con.keys(format!("*{ns}*"))?;
    if !keys.is_empty() {
        con.del::<_, ()>(keys)?;
    }
    let ok = !stale && refused.is_none() && term < term2 && term2 < term3 && term3 < term4;
    println!(
        "terms increasing: {}; writes a leader made that the store refused: {}",
        term < term2 && term2 < term3 && term3 < term4,
        refused.unwrap_or(0)
    );
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
