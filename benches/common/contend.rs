//! W2 (8 threads of one client) and W2p (4 processes × 2 threads) on one
//! name: leasehold against a raw `SET NX PX` spinning lock, with a shared
//! record checked for overlaps and lost updates inside every section.

use std::fs::File;
use std::io::Write as _;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use leasehold::LockClient;

use crate::measure::*;

// ---------------------------------------------------------------- contenders

/// The two ways to take one lock: leasehold, or raw `SET NX PX` spinning.
#[derive(Clone, Copy, PartialEq)]
pub(crate) enum Kind {
    Raw,
    Leasehold,
    /// leasehold's fair lock (`LockOptions::fair`).
    Fair,
    /// leasehold's async API (`AsyncLockClient`), tasks not threads.
    Async,
}

impl Kind {
    pub(crate) fn arg(self) -> &'static str {
        match self {
            Kind::Raw => "raw",
            Kind::Leasehold => "leasehold",
            Kind::Fair => "fair",
            Kind::Async => "async",
        }
    }
}

/// A raw lock on one connection: `SET NX PX` until it succeeds (spinning, no
/// sleep — the fastest a polling lock can hand over), compare-and-delete.
pub(crate) struct RawLock {
    pub(crate) con: redis::Connection,
    pub(crate) cad: redis::Script,
    pub(crate) token: String,
}

impl RawLock {
    pub(crate) fn new(url: &str, token: String) -> Self {
        RawLock {
            con: con(url),
            cad: redis::Script::new(COMPARE_AND_DELETE),
            token,
        }
    }

    pub(crate) fn try_lock(&mut self, name: &str) -> bool {
        let ok: Option<String> = redis::cmd("SET")
            .arg(name)
            .arg(&self.token)
            .arg("NX")
            .arg("PX")
            .arg(30_000)
            .query(&mut self.con)
            .unwrap();
        ok.is_some()
    }

    pub(crate) fn lock(&mut self, name: &str) {
        while !self.try_lock(name) {}
    }

    pub(crate) fn unlock(&mut self, name: &str) {
        let deleted: i64 = self
            .cad
            .key(name)
            .arg(&self.token)
            .invoke(&mut self.con)
            .unwrap();
        assert_eq!(deleted, 1, "raw unlock: the lock was ours");
    }
}

// ---------------------------------------------------------- critical section

/// The record every worker of one contended run reads and writes inside the
/// critical section: `[counter, inside, last_release_ns, last_worker]`.
pub(crate) struct Shared {
    pub(crate) file: File,
}

impl Shared {
    fn create(path: &Path) -> Self {
        let file = File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)
            .unwrap();
        file.write_all_at(&[0u8; 32], 0).unwrap();
        Shared { file }
    }

    pub(crate) fn open(path: &Path) -> Self {
        Shared {
            file: File::options().read(true).write(true).open(path).unwrap(),
        }
    }

    fn read(&self) -> [u64; 4] {
        let mut buf = [0u8; 32];
        self.file.read_exact_at(&mut buf, 0).unwrap();
        let mut out = [0u64; 4];
        for (i, v) in out.iter_mut().enumerate() {
            *v = u64::from_le_bytes(buf[i * 8..i * 8 + 8].try_into().unwrap());
        }
        out
    }

    fn write(&self, rec: [u64; 4]) {
        let mut buf = [0u8; 32];
        for (i, v) in rec.iter().enumerate() {
            buf[i * 8..i * 8 + 8].copy_from_slice(&v.to_le_bytes());
        }
        self.file.write_all_at(&buf, 0).unwrap();
    }
}

/// What one worker saw.
#[derive(Default)]
pub(crate) struct Tally {
    pub(crate) turns: u64,
    pub(crate) same: u64,
    pub(crate) violations: u64,
    pub(crate) handoff_ns: Vec<u64>,
}

impl Tally {
    /// The critical section: check nobody is inside, ~20 µs of work, a
    /// non-atomic counter increment. Returns the release timestamp to write
    /// just before unlocking.
    pub(crate) fn critical_section(&mut self, shared: &Shared, me: u64, per_client: u64) {
        let entered = now_ns();
        let [counter, inside, last_release, last_worker] = shared.read();
        if inside != 0 {
            self.violations += 1;
        }
        if last_release != 0 {
            // Low bit: the previous holder used another client (another
            // process in W2p/W2P: workers k·n+1 … k·n+n share client k).
            let other_process = (last_worker - 1) / per_client != (me - 1) / per_client;
            let ns = entered.saturating_sub(last_release);
            self.handoff_ns.push(ns << 1 | u64::from(other_process));
            if last_worker == me {
                self.same += 1;
            }
        }
        shared.write([counter, 1, last_release, last_worker]);
        let spin = Instant::now();
        while spin.elapsed() < Duration::from_micros(20) {
            std::hint::spin_loop();
        }
        self.turns += 1;
        shared.write([counter + 1, 0, now_ns(), me]);
    }

    fn line(&self) -> String {
        let mut s = format!("{} {} {}", self.turns, self.same, self.violations);
        for h in &self.handoff_ns {
            s.push(' ');
            s.push_str(&h.to_string());
        }
        s
    }

    fn parse(line: &str) -> Tally {
        let mut it = line.split_whitespace().map(|v| v.parse::<u64>().unwrap());
        Tally {
            turns: it.next().unwrap(),
            same: it.next().unwrap(),
            violations: it.next().unwrap(),
            handoff_ns: it.collect(),
        }
    }
}

/// Runs `threads` workers of `kind` on one name until `until`: all on one
/// leasehold client (as threads of one process), or with `client_each` each
/// on its own (as separate processes would be).
#[allow(clippy::too_many_arguments)]
pub(crate) fn contend(
    kind: Kind,
    url: &str,
    name: &str,
    threads: usize,
    client_each: bool,
    first_worker: u64,
    shared_path: &Path,
    (start, until): (Instant, Instant),
) -> (Vec<Tally>, u64) {
    let one = LockClient::new(url).unwrap();
    let per_client = if client_each { 1 } else { threads as u64 };
    let handles: Vec<_> = (0..threads)
        .map(|i| {
            let client = if client_each {
                LockClient::new(url).unwrap()
            } else {
                one.clone()
            };
            let (url, name) = (url.to_owned(), name.to_owned());
            let shared = Shared::open(shared_path);
            let me = first_worker + i as u64 + 1;
            thread::spawn(move || {
                let mut raw = RawLock::new(&url, format!("token-{me}-{}", std::process::id()));
                let mut tally = Tally::default();
                while Instant::now() < start {
                    thread::sleep(Duration::from_micros(200));
                }
                while Instant::now() < until {
                    match kind {
                        Kind::Raw => {
                            raw.lock(&name);
                            tally.critical_section(&shared, me, per_client);
                            raw.unlock(&name);
                        }
                        Kind::Leasehold => {
                            let g = client.lock(&name).unwrap();
                            tally.critical_section(&shared, me, per_client);
                            g.unlock().unwrap();
                        }
                        Kind::Fair => {
                            let g = client.fair_lock(&name).unwrap();
                            tally.critical_section(&shared, me, per_client);
                            g.unlock().unwrap();
                        }
                        Kind::Async => unreachable!("tasks contend in `tasks::contend_tasks`"),
                    }
                }
                (tally, client.stats().handoffs)
            })
        })
        .collect();
    let mut tallies = Vec::new();
    let mut handoffs = 0;
    for h in handles {
        let (tally, theirs) = h.join().unwrap();
        tallies.push(tally);
        handoffs += theirs;
    }
    if !client_each {
        // Every worker read the one client's counter: count it once, now
        // that all of them are done.
        handoffs = one.stats().handoffs;
    }
    (tallies, handoffs)
}

/// Aggregated figures of one contended run.
pub(crate) struct Contended {
    pub(crate) pairs_per_s: f64,
    pub(crate) handoff_p50_us: f64,
    pub(crate) handoff_p99_us: f64,
    /// Handoffs between workers of different processes (W2p).
    pub(crate) cross_p50_us: f64,
    pub(crate) cross_p99_us: f64,
    /// Handoffs between workers of one process (W2p).
    pub(crate) within_p50_us: f64,
    pub(crate) client_cmds_per_cs: f64,
    pub(crate) all_cmds_per_cs: f64,
    /// Microseconds Redis spent in the client-sent commands, per CS.
    pub(crate) redis_us_per_cs: f64,
    /// The server's whole CPU time (`INFO cpu`, network included) per CS
    /// (set by `measured`; 0 where not measured).
    pub(crate) redis_cpu_us_per_cs: f64,
    pub(crate) least_share: f64,
    pub(crate) most_share: f64,
    pub(crate) same_worker: f64,
    /// Turns that were in-process handoffs (leasehold only).
    pub(crate) in_process: f64,
    pub(crate) shares: Vec<u64>,
}

pub(crate) fn summarize(
    tallies: &[Tally],
    secs: f64,
    cmds: (u64, u64, u64),
    counter: u64,
    handoffs: u64,
) -> Contended {
    let turns: u64 = tallies.iter().map(|t| t.turns).sum();
    let violations: u64 = tallies.iter().map(|t| t.violations).sum();
    assert_eq!(
        violations, 0,
        "mutual exclusion violated: {violations} overlapping critical sections"
    );
    assert_eq!(
        counter, turns,
        "mutual exclusion violated: the non-atomic counter lost updates"
    );
    let tagged = || tallies.iter().flat_map(|t| t.handoff_ns.iter().copied());
    let sorted = |it: &mut dyn Iterator<Item = u64>| {
        let mut v: Vec<u64> = it.map(|x| x >> 1).collect();
        v.sort_unstable();
        v
    };
    let lat = sorted(&mut tagged());
    let cross = sorted(&mut tagged().filter(|x| x & 1 == 1));
    let within = sorted(&mut tagged().filter(|x| x & 1 == 0));
    let mean = turns as f64 / tallies.len() as f64;
    let shares: Vec<u64> = tallies.iter().map(|t| t.turns).collect();
    Contended {
        pairs_per_s: turns as f64 / secs,
        handoff_p50_us: percentile(&lat, 0.50) as f64 / 1e3,
        handoff_p99_us: percentile(&lat, 0.99) as f64 / 1e3,
        cross_p50_us: percentile(&cross, 0.50) as f64 / 1e3,
        cross_p99_us: percentile(&cross, 0.99) as f64 / 1e3,
        within_p50_us: percentile(&within, 0.50) as f64 / 1e3,
        client_cmds_per_cs: cmds.0 as f64 / turns.max(1) as f64,
        all_cmds_per_cs: cmds.1 as f64 / turns.max(1) as f64,
        redis_us_per_cs: cmds.2 as f64 / turns.max(1) as f64,
        redis_cpu_us_per_cs: 0.0,
        least_share: *shares.iter().min().unwrap_or(&0) as f64 / mean,
        most_share: *shares.iter().max().unwrap_or(&0) as f64 / mean,
        same_worker: tallies.iter().map(|t| t.same).sum::<u64>() as f64 / turns.max(1) as f64,
        in_process: handoffs as f64 / turns.max(1) as f64,
        shares,
    }
}

pub(crate) fn shared_path(tag: &str) -> PathBuf {
    let dir = if Path::new("/dev/shm").is_dir() {
        PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    };
    dir.join(format!("leasehold-bench-{}-{tag}", std::process::id()))
}

/// W2: 8 workers in this process sharing one client.
pub(crate) fn w2(kind: Kind, url: &str, secs: f64) -> Contended {
    threads(kind, url, secs, false)
}

/// W2c: 8 workers in this process, each with its own client (as 8
/// processes would have).
pub(crate) fn w2c(kind: Kind, url: &str, secs: f64) -> Contended {
    threads(kind, url, secs, true)
}

/// One contended run on the name `tag`: a fresh shared record, Redis's
/// command counters around `work` (which returns the workers' tallies and
/// the in-process handoffs), then the summary.
pub(crate) fn measured(
    kind: Kind,
    tag: &str,
    url: &str,
    secs: f64,
    work: impl FnOnce(&Path) -> (Vec<Tally>, u64),
) -> Contended {
    let path = shared_path(tag);
    let shared = Shared::create(&path);
    let before = commandstats(url);
    let cpu_before = redis_cpu_us(url);
    let (tallies, handoffs) = work(&path);
    let cpu = redis_cpu_us(url) - cpu_before;
    let after = commandstats(url);
    let counter = shared.read()[0];
    let _ = std::fs::remove_file(&path);
    let mut c = summarize(
        &tallies,
        secs,
        command_delta(&before, &after, kind == Kind::Raw),
        counter,
        handoffs,
    );
    c.redis_cpu_us_per_cs = cpu / c.pairs_per_s.max(f64::MIN_POSITIVE) / secs;
    c
}

fn threads(kind: Kind, url: &str, secs: f64, client_each: bool) -> Contended {
    let tag = format!("w2{}-{}", if client_each { "c" } else { "" }, kind.arg());
    measured(kind, &tag, url, secs, |path| {
        let start = Instant::now() + Duration::from_millis(100);
        let until = start + Duration::from_secs_f64(secs);
        contend(kind, url, &tag, 8, client_each, 0, path, (start, until))
    })
}

/// W2p: 4 child processes × 2 threads.
pub(crate) fn w2p(kind: Kind, url: &str, secs: f64) -> Contended {
    processes(kind, url, secs, 4, 2)
}

/// W2P: 8 child processes × 1 thread.
pub(crate) fn w2pp(kind: Kind, url: &str, secs: f64) -> Contended {
    processes(kind, url, secs, 8, 1)
}

fn processes(kind: Kind, url: &str, secs: f64, procs: u64, threads: u64) -> Contended {
    let tag = format!("w2p{procs}x{threads}-{}", kind.arg());
    let exe = std::env::current_exe().unwrap();
    measured(kind, &tag, url, secs, |path| {
        let start_at = now_ns() + 500_000_000; // children start together
        let children: Vec<_> = (0..procs)
            .map(|p| {
                Command::new(&exe)
                    .args([
                        "--child",
                        kind.arg(),
                        url,
                        &tag,
                        &path.to_string_lossy(),
                        &(p * threads).to_string(),
                        &start_at.to_string(),
                        &secs.to_string(),
                        &threads.to_string(),
                    ])
                    .stdout(Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        let mut tallies = Vec::new();
        let mut handoffs = 0;
        for child in children {
            let out = child.wait_with_output().unwrap();
            assert!(out.status.success(), "a W2p child failed");
            for line in String::from_utf8_lossy(&out.stdout).lines() {
                match line.strip_prefix("handoffs ") {
                    Some(n) => handoffs += n.parse::<u64>().unwrap(),
                    None => tallies.push(Tally::parse(line)),
                }
            }
        }
        (tallies, handoffs)
    })
}

/// A W2p/W2P child: `--child <kind> <url> <name> <shared> <first-worker>
/// <start-ns> <secs> <threads>`.
pub(crate) fn child(args: &[String]) {
    let kind = match args[0].as_str() {
        "raw" => Kind::Raw,
        "fair" => Kind::Fair,
        _ => Kind::Leasehold,
    };
    let (url, name, path) = (&args[1], &args[2], Path::new(&args[3]));
    let first: u64 = args[4].parse().unwrap();
    let start_ns: u64 = args[5].parse().unwrap();
    let secs: f64 = args[6].parse().unwrap();
    let start = Instant::now() + Duration::from_nanos(start_ns.saturating_sub(now_ns()));
    let until = start + Duration::from_secs_f64(secs);
    let threads: usize = args[7].parse().unwrap();
    let (tallies, handoffs) = contend(kind, url, name, threads, false, first, path, (start, until));
    let mut out = std::io::stdout().lock();
    for t in tallies {
        writeln!(out, "{}", t.line()).unwrap();
    }
    writeln!(out, "handoffs {handoffs}").unwrap();
}
