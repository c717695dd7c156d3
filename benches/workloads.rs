//! The performance table: W1–W4, every leasehold figure beside its raw-Redis
//! floor measured in the same run.
//!
//! - W1 uncontended: one thread, one name, lock + unlock. Floor: `SET name
//!   token NX PX` + a compare-and-delete `EVALSHA` on one plain connection.
//! - W2 contended, threads: 8 threads of one client on one name. Floor: 8
//!   threads, each with its own connection, spinning on `SET NX PX`.
//! - W2p contended, processes: 4 processes × 2 threads (children of this
//!   binary), the same two contenders.
//! - W3 many names: 8 threads on distinct names. Floor: the raw pair on 8
//!   connections.
//! - W4 renewal: 100,000 live watchdog guards (see `common/w4.rs`).
//!
//! W2/W2p critical sections do ~20 µs of busy work and a non-atomic
//! read-modify-write of a record shared by every worker (a file in /dev/shm,
//! so processes share it too); an overlap or a lost update fails the run.
//!
//! Run by `scripts/bench.sh` (both modes, one table each). Alone:
//! `cargo bench --bench workloads` (starts its own redis-server unless
//! `REDIS_URL` is set). Settings from the environment: `BENCH_SECS` (2),
//! `BENCH_ROUNDS` (3 rounds of W2/W2p/W3; the median round is shown),
//! `GUARDS` (100000; 0 skips W4), `BENCH_MODE` (the label of the table),
//! `BENCH_SUMMARY` (a file to write the table to).

#[path = "../tests/support/mod.rs"]
mod support;

#[path = "common/w4.rs"]
mod w4;

use std::collections::HashMap;
use std::fs::File;
use std::io::Write as _;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use leasehold::LockClient;

const COMPARE_AND_DELETE: &str = r#"
if redis.call('get', KEYS[1]) == ARGV[1] then
    return redis.call('del', KEYS[1])
end
return 0
"#;

/// Commands a client sends itself; everything else in `INFO commandstats`
/// during a run was called from inside a script.
const CLIENT_COMMANDS: &[&str] = &[
    "evalsha",
    "eval",
    "set",
    "subscribe",
    "unsubscribe",
    "ping",
    "script|load",
];

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i]
}

fn con(url: &str) -> redis::Connection {
    redis::Client::open(url).unwrap().get_connection().unwrap()
}

fn commandstats(url: &str) -> HashMap<String, u64> {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut con(url))
        .unwrap();
    support::parse_command_calls(&info)
}

/// (client-sent, all incl. script calls) commands between two snapshots,
/// leaving out the `INFO` calls of the bench itself.
fn command_delta(before: &HashMap<String, u64>, after: &HashMap<String, u64>) -> (u64, u64) {
    let mut client = 0;
    let mut all = 0;
    for (name, n) in after {
        if name == "info" {
            continue;
        }
        let d = n - before.get(name).copied().unwrap_or(0);
        all += d;
        if CLIENT_COMMANDS.contains(&name.as_str()) {
            client += d;
        }
    }
    (client, all)
}

// ---------------------------------------------------------------- contenders

/// The two ways to take one lock: leasehold, or raw `SET NX PX` spinning.
#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Raw,
    Leasehold,
    /// leasehold's fair lock (`LockOptions::fair`).
    Fair,
}

impl Kind {
    fn arg(self) -> &'static str {
        match self {
            Kind::Raw => "raw",
            Kind::Leasehold => "leasehold",
            Kind::Fair => "fair",
        }
    }
}

/// A raw lock on one connection: `SET NX PX` until it succeeds (spinning, no
/// sleep — the fastest a polling lock can hand over), compare-and-delete.
struct RawLock {
    con: redis::Connection,
    cad: redis::Script,
    token: String,
}

impl RawLock {
    fn new(url: &str, token: String) -> Self {
        RawLock {
            con: con(url),
            cad: redis::Script::new(COMPARE_AND_DELETE),
            token,
        }
    }

    fn try_lock(&mut self, name: &str) -> bool {
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

    fn lock(&mut self, name: &str) {
        while !self.try_lock(name) {}
    }

    fn unlock(&mut self, name: &str) {
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
struct Shared {
    file: File,
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

    fn open(path: &Path) -> Self {
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
struct Tally {
    turns: u64,
    same: u64,
    violations: u64,
    handoff_ns: Vec<u64>,
}

impl Tally {
    /// The critical section: check nobody is inside, ~20 µs of work, a
    /// non-atomic counter increment. Returns the release timestamp to write
    /// just before unlocking.
    fn critical_section(&mut self, shared: &Shared, me: u64) {
        let entered = now_ns();
        let [counter, inside, last_release, last_worker] = shared.read();
        if inside != 0 {
            self.violations += 1;
        }
        if last_release != 0 {
            // Low bit: the previous holder ran in another process (W2p
            // workers 2p+1 and 2p+2 share process p).
            let other_process = (last_worker - 1) / 2 != (me - 1) / 2;
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

/// Runs `threads` workers of `kind` on one name until `until`; one leasehold
/// client per call (i.e. per process).
fn contend(
    kind: Kind,
    url: &str,
    name: &str,
    threads: usize,
    first_worker: u64,
    shared_path: &Path,
    (start, until): (Instant, Instant),
) -> (Vec<Tally>, u64) {
    let client = LockClient::new(url).unwrap();
    let handles: Vec<_> = (0..threads)
        .map(|i| {
            let (client, url, name) = (client.clone(), url.to_owned(), name.to_owned());
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
                            tally.critical_section(&shared, me);
                            raw.unlock(&name);
                        }
                        Kind::Leasehold => {
                            let g = client.lock(&name).unwrap();
                            tally.critical_section(&shared, me);
                            g.unlock().unwrap();
                        }
                        Kind::Fair => {
                            let g = client.fair_lock(&name).unwrap();
                            tally.critical_section(&shared, me);
                            g.unlock().unwrap();
                        }
                    }
                }
                tally
            })
        })
        .collect();
    let tallies = handles.into_iter().map(|h| h.join().unwrap()).collect();
    (tallies, client.stats().handoffs)
}

/// Aggregated figures of one contended run.
struct Contended {
    pairs_per_s: f64,
    handoff_p50_us: f64,
    handoff_p99_us: f64,
    /// Handoffs between workers of different processes (W2p).
    cross_p50_us: f64,
    cross_p99_us: f64,
    /// Handoffs between workers of one process (W2p).
    within_p50_us: f64,
    client_cmds_per_cs: f64,
    all_cmds_per_cs: f64,
    least_share: f64,
    most_share: f64,
    same_worker: f64,
    /// Turns that were in-process handoffs (leasehold only).
    in_process: f64,
    shares: Vec<u64>,
}

fn summarize(
    tallies: &[Tally],
    secs: f64,
    cmds: (u64, u64),
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
        least_share: *shares.iter().min().unwrap_or(&0) as f64 / mean,
        most_share: *shares.iter().max().unwrap_or(&0) as f64 / mean,
        same_worker: tallies.iter().map(|t| t.same).sum::<u64>() as f64 / turns.max(1) as f64,
        in_process: handoffs as f64 / turns.max(1) as f64,
        shares,
    }
}

fn shared_path(tag: &str) -> PathBuf {
    let dir = if Path::new("/dev/shm").is_dir() {
        PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    };
    dir.join(format!("leasehold-bench-{}-{tag}", std::process::id()))
}

/// W2: `threads` workers in this process.
fn w2(kind: Kind, url: &str, secs: f64) -> Contended {
    let path = shared_path(&format!("w2-{}", kind.arg()));
    let shared = Shared::create(&path);
    let name = format!("w2-{}", kind.arg());
    let before = commandstats(url);
    let start = Instant::now() + Duration::from_millis(100);
    let until = start + Duration::from_secs_f64(secs);
    let (tallies, handoffs) = contend(kind, url, &name, 8, 0, &path, (start, until));
    let after = commandstats(url);
    let counter = shared.read()[0];
    let _ = std::fs::remove_file(&path);
    summarize(
        &tallies,
        secs,
        command_delta(&before, &after),
        counter,
        handoffs,
    )
}

/// W2p: 4 child processes × 2 threads.
fn w2p(kind: Kind, url: &str, secs: f64) -> Contended {
    let path = shared_path(&format!("w2p-{}", kind.arg()));
    let shared = Shared::create(&path);
    let name = format!("w2p-{}", kind.arg());
    let exe = std::env::current_exe().unwrap();
    let before = commandstats(url);
    let start_at = now_ns() + 500_000_000; // children start together
    let children: Vec<_> = (0..4u64)
        .map(|p| {
            Command::new(&exe)
                .args([
                    "--child",
                    kind.arg(),
                    url,
                    &name,
                    &path.to_string_lossy(),
                    &(p * 2).to_string(),
                    &start_at.to_string(),
                    &secs.to_string(),
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
    let after = commandstats(url);
    let counter = shared.read()[0];
    let _ = std::fs::remove_file(&path);
    summarize(
        &tallies,
        secs,
        command_delta(&before, &after),
        counter,
        handoffs,
    )
}

/// A W2p child: `--child <kind> <url> <name> <shared> <first-worker> <start-ns> <secs>`.
fn child(args: &[String]) {
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
    let (tallies, handoffs) = contend(kind, url, name, 2, first, path, (start, until));
    let mut out = std::io::stdout().lock();
    for t in tallies {
        writeln!(out, "{}", t.line()).unwrap();
    }
    writeln!(out, "handoffs {handoffs}").unwrap();
}

// ----------------------------------------------------------- W1, W3, RTT

/// Loopback round trip: `PING` p50 on one connection, in µs.
fn ping_us(url: &str) -> f64 {
    let mut c = con(url);
    let mut lat = Vec::with_capacity(5_000);
    for _ in 0..5_000 {
        let t = Instant::now();
        let _: String = redis::cmd("PING").query(&mut c).unwrap();
        lat.push(t.elapsed().as_nanos() as u64);
    }
    lat.sort_unstable();
    percentile(&lat, 0.5) as f64 / 1e3
}

struct Uncontended {
    raw_rate: f64,
    lh_rate: f64,
    ratio: f64,
    /// leasehold's own two scripts on a plain connection, as a ratio to raw:
    /// what the Redisson layout costs in Redis, without the library around it.
    protocol_ratio: f64,
    raw_p50: f64,
    raw_p99: f64,
    lh_p50: f64,
    lh_p99: f64,
}

/// W1: alternating blocks of raw and leasehold pairs; the ratio is the median
/// of per-block ratios, so machine noise hits both alike.
fn w1(url: &str, secs: f64) -> Uncontended {
    let mut raw = RawLock::new(url, "token-w1".into());
    let client = LockClient::new(url).unwrap();
    let (acquire, release) = (
        redis::Script::new(leasehold::scripts::ACQUIRE),
        redis::Script::new(leasehold::scripts::RELEASE),
    );
    let owner = "00000000-0000-4000-8000-000000000000:1";
    let mut protocol_ratios = Vec::new();
    const BLOCK: usize = 1_000;
    let (mut raw_lat, mut lh_lat) = (Vec::new(), Vec::new());
    let (mut ratios, mut raw_rates, mut lh_rates) = (Vec::new(), Vec::new(), Vec::new());
    let until = Instant::now() + Duration::from_secs_f64(secs);
    while ratios.len() < 5 || Instant::now() < until {
        let t = Instant::now();
        for _ in 0..BLOCK {
            let s = Instant::now();
            assert!(raw.try_lock("w1-raw"), "raw floor: the key was free");
            raw.unlock("w1-raw");
            raw_lat.push(s.elapsed().as_nanos() as u64);
        }
        let r = BLOCK as f64 / t.elapsed().as_secs_f64();
        let t = Instant::now();
        for _ in 0..BLOCK {
            let s = Instant::now();
            client.lock("w1-leasehold").unwrap().unlock().unwrap();
            lh_lat.push(s.elapsed().as_nanos() as u64);
        }
        let l = BLOCK as f64 / t.elapsed().as_secs_f64();
        let t = Instant::now();
        for _ in 0..BLOCK {
            let held: Option<i64> = acquire
                .key("w1-protocol")
                .arg(30_000)
                .arg(owner)
                .arg("1")
                .invoke(&mut raw.con)
                .unwrap();
            assert!(held.is_none(), "protocol floor: the key was free");
            let freed: i64 = release
                .key("w1-protocol")
                .key("redisson_lock__channel:{w1-protocol}")
                .arg("0")
                .arg(30_000)
                .arg(owner)
                .arg("1")
                .invoke(&mut raw.con)
                .unwrap();
            assert_eq!(freed, 1);
        }
        protocol_ratios.push(BLOCK as f64 / t.elapsed().as_secs_f64() / r);
        raw_rates.push(r);
        lh_rates.push(l);
        ratios.push(l / r);
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    raw_lat.sort_unstable();
    lh_lat.sort_unstable();
    Uncontended {
        raw_rate: median(&mut raw_rates),
        lh_rate: median(&mut lh_rates),
        ratio: median(&mut ratios),
        protocol_ratio: median(&mut protocol_ratios),
        raw_p50: percentile(&raw_lat, 0.5) as f64 / 1e3,
        raw_p99: percentile(&raw_lat, 0.99) as f64 / 1e3,
        lh_p50: percentile(&lh_lat, 0.5) as f64 / 1e3,
        lh_p99: percentile(&lh_lat, 0.99) as f64 / 1e3,
    }
}

/// W3: 8 threads, 8 distinct names, pairs/s in aggregate.
fn w3(kind: Kind, url: &str, secs: f64) -> f64 {
    let client = LockClient::new(url).unwrap();
    let barrier = Arc::new(Barrier::new(8));
    let stop = Arc::new(AtomicBool::new(false));
    let handles: Vec<_> = (0..8)
        .map(|i| {
            let (client, url, barrier, stop) = (
                client.clone(),
                url.to_owned(),
                barrier.clone(),
                stop.clone(),
            );
            thread::spawn(move || {
                let name = format!("w3-{}-{i}", kind.arg());
                let mut raw = RawLock::new(&url, format!("token-w3-{i}"));
                let mut n = 0u64;
                barrier.wait();
                while !stop.load(Ordering::Relaxed) {
                    match kind {
                        Kind::Raw => {
                            assert!(raw.try_lock(&name));
                            raw.unlock(&name);
                        }
                        Kind::Leasehold | Kind::Fair => {
                            client.lock(&name).unwrap().unlock().unwrap()
                        }
                    }
                    n += 1;
                }
                n
            })
        })
        .collect();
    thread::sleep(Duration::from_secs_f64(secs));
    stop.store(true, Ordering::Relaxed);
    let total: u64 = handles.into_iter().map(|h| h.join().unwrap()).sum();
    total as f64 / secs
}

/// Runs raw then leasehold `rounds` times and keeps the round whose
/// leasehold/raw ratio of `rate` is the median: one noisy run neither makes
/// nor breaks a figure, and both figures of a row come from the same round.
/// W5: read-mostly sections on one name — 8 threads of 2 clients, every
/// 10th section of a thread a write, the rest reads, each waiting ~100 µs
/// (sleeping, as on I/O) inside.
/// With `exclusive` every section takes the plain lock instead (the floor a
/// read/write lock has to beat). Returns (sections/s, most readers seen
/// inside at once, client commands per section).
fn w5(url: &str, secs: f64, exclusive: bool) -> (f64, usize, f64) {
    use std::sync::atomic::AtomicUsize;
    let clients: Vec<LockClient> = (0..2).map(|_| LockClient::new(url).unwrap()).collect();
    let name = if exclusive { "w5-plain" } else { "w5-rw" };
    let inside = Arc::new(AtomicUsize::new(0));
    let writing = Arc::new(AtomicBool::new(false));
    let most = Arc::new(AtomicUsize::new(0));
    let before = commandstats(url);
    let start = Instant::now() + Duration::from_millis(100);
    let until = start + Duration::from_secs_f64(secs);
    let handles: Vec<_> = (0..8)
        .map(|t| {
            let c = clients[t % 2].clone();
            let (inside, writing, most) = (inside.clone(), writing.clone(), most.clone());
            thread::spawn(move || {
                while Instant::now() < start {
                    thread::sleep(Duration::from_millis(1));
                }
                let mut done = 0u64;
                let mut i = t;
                while Instant::now() < until {
                    let write = i % 10 == 0;
                    i += 1;
                    let g = if exclusive {
                        c.lock(name)
                    } else if write {
                        c.write_lock(name)
                    } else {
                        c.read_lock(name)
                    }
                    .unwrap();
                    let n = inside.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(n, Ordering::SeqCst);
                    if write || exclusive {
                        assert!(
                            n == 1 && !writing.swap(true, Ordering::SeqCst),
                            "a writer was not alone"
                        );
                    } else {
                        assert!(!writing.load(Ordering::SeqCst), "a reader beside a writer");
                    }
                    // The section waits on something (a read of the
                    // guarded resource), as most critical sections do.
                    thread::sleep(Duration::from_micros(100));
                    if write || exclusive {
                        writing.store(false, Ordering::SeqCst);
                    }
                    inside.fetch_sub(1, Ordering::SeqCst);
                    g.unlock().unwrap();
                    done += 1;
                }
                done
            })
        })
        .collect();
    let done: u64 = handles.into_iter().map(|h| h.join().unwrap()).sum();
    let (client_cmds, _) = command_delta(&before, &commandstats(url));
    (
        done as f64 / secs,
        most.load(Ordering::SeqCst),
        client_cmds as f64 / done.max(1) as f64,
    )
}

fn median_round<T>(
    rounds: usize,
    mut run: impl FnMut(Kind) -> T,
    rate: impl Fn(&T) -> f64,
) -> (T, T) {
    let mut all: Vec<(T, T)> = (0..rounds)
        .map(|_| {
            let raw = run(Kind::Raw);
            let lh = run(Kind::Leasehold);
            (raw, lh)
        })
        .collect();
    all.sort_by(|a, b| (rate(&a.1) / rate(&a.0)).total_cmp(&(rate(&b.1) / rate(&b.0))));
    all.swap_remove(all.len() / 2)
}

// --------------------------------------------------------------------- table

fn met(ok: bool) -> &'static str {
    if ok {
        "met"
    } else {
        "**missed**"
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--list") {
        return; // `cargo test --benches` asks for a listing
    }
    if args.first().map(String::as_str) == Some("--child") {
        child(&args[1..]);
        return;
    }
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let rounds: usize = env("BENCH_ROUNDS")
        .and_then(|v| v.parse().ok())
        .unwrap_or(3)
        .max(1);
    let secs: f64 = env("BENCH_SECS")
        .and_then(|v| v.parse().ok())
        .unwrap_or(2.0);
    let guards: usize = env("GUARDS")
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    let mode = env("BENCH_MODE").unwrap_or_else(|| "unpinned".into());
    let server;
    let url = match env("REDIS_URL") {
        Some(u) => u,
        None => {
            server = support::RedisServer::start();
            server.url()
        }
    };
    let redis_version: String = {
        let info: String = redis::cmd("INFO")
            .arg("server")
            .query(&mut con(&url))
            .unwrap();
        info.lines()
            .find_map(|l| l.strip_prefix("redis_version:"))
            .unwrap_or("?")
            .trim()
            .to_owned()
    };

    eprintln!("[{mode}] loopback round trip…");
    let rtt = ping_us(&url);
    if let Some(only) = env("BENCH_ONLY") {
        // A quick look at one workload while working on it; no table.
        match only.as_str() {
            "w1" => {
                let u = w1(&url, secs);
                println!(
                    "W1 raw {:.0}/s leasehold {:.0}/s ratio {:.2} (scripts alone {:.2})",
                    u.raw_rate, u.lh_rate, u.ratio, u.protocol_ratio
                );
            }
            "w3" => {
                let (r, l) = (w3(Kind::Raw, &url, secs), w3(Kind::Leasehold, &url, secs));
                println!("W3 raw {r:.0}/s leasehold {l:.0}/s ratio {:.2}", l / r);
            }
            "w2p" => {
                let c = w2p(Kind::Leasehold, &url, secs);
                println!(
                    "W2p leasehold {:.0}/s handoff p50 {:.0} µs = {:.1} RTT, p99 {:.0} µs (across processes p50 {:.0} µs, p99 {:.0} µs; within p50 {:.0} µs), cmds/CS {:.2}, in-process {:.0} %, shares {:?}",
                    c.pairs_per_s, c.handoff_p50_us, c.handoff_p50_us / rtt, c.handoff_p99_us, c.cross_p50_us, c.cross_p99_us, c.within_p50_us, c.client_cmds_per_cs, c.in_process * 100.0, c.shares
                );
            }
            "fair" => {
                for (w, c) in [
                    ("W2 fair", w2(Kind::Fair, &url, secs)),
                    ("W2p fair", w2p(Kind::Fair, &url, secs)),
                ] {
                    println!(
                        "{w} {:.0}/s handoff p50 {:.0} µs = {:.1} RTT, p99 {:.0} µs, cmds/CS {:.2}, least/most {:.2}/{:.2}, shares {:?}",
                        c.pairs_per_s, c.handoff_p50_us, c.handoff_p50_us / rtt, c.handoff_p99_us, c.client_cmds_per_cs, c.least_share, c.most_share, c.shares
                    );
                }
            }
            "w5" => {
                let (p, _, pc) = w5(&url, secs, true);
                let (r, most, rc) = w5(&url, secs, false);
                println!(
                    "W5 plain {p:.0}/s ({pc:.2} cmds/CS), read/write {r:.0}/s ({rc:.2} cmds/CS), ratio {:.2}, most readers inside {most}",
                    r / p
                );
            }
            other => eprintln!("BENCH_ONLY: w1, w3, w2p, w5 or fair, not {other}"),
        }
        return;
    }
    eprintln!("[{mode}] W1 uncontended…");
    let u = w1(&url, secs);
    eprintln!("[{mode}] W2 8 threads: raw spin floor, then leasehold…");
    let (w2_raw, w2_lh) = median_round(rounds, |k| w2(k, &url, secs), |c| c.pairs_per_s);
    eprintln!("[{mode}] W2p 4 processes x 2 threads: raw spin floor, then leasehold…");
    let (w2p_raw, w2p_lh) = median_round(rounds, |k| w2p(k, &url, secs), |c| c.pairs_per_s);
    eprintln!("[{mode}] W2 / W2p with the fair lock…");
    let w2_fair = w2(Kind::Fair, &url, secs);
    let w2p_fair = w2p(Kind::Fair, &url, secs);
    eprintln!("[{mode}] W5 read-mostly: plain lock, then read/write lock…");
    let w5_plain = w5(&url, secs, true);
    let w5_rw = w5(&url, secs, false);
    eprintln!("[{mode}] W3 8 threads on distinct names…");
    let (w3_raw, w3_lh) = median_round(rounds, |k| w3(k, &url, secs), |r| *r);
    let w4 = (guards > 0).then(|| {
        eprintln!("[{mode}] W4 {guards} live guards (about 40 s)…");
        w4::run(&url, guards)
    });

    let mut t = String::new();
    let date = Command::new("date")
        .arg("+%Y-%m-%d %H:%M %Z")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default();
    t += &format!(
        "### {mode} — {date}, redis {redis_version}, {secs} s per run, W2/W2p/W3 median of {rounds} rounds, loopback PING p50 {rtt:.1} µs\n\n"
    );
    t += "| workload | figure | raw floor | leasehold | ratio | target | |\n";
    t += "|---|---|---:|---:|---:|---|---|\n";
    let mut row = |w: &str,
                   f: &str,
                   raw: String,
                   lh: String,
                   ratio: String,
                   target: &str,
                   ok: Option<bool>| {
        t += &format!(
            "| {w} | {f} | {raw} | {lh} | {ratio} | {target} | {} |\n",
            ok.map(met).unwrap_or("")
        );
    };
    row(
        "W1 uncontended",
        "lock+unlock pairs/s",
        format!("{:.0}", u.raw_rate),
        format!("{:.0}", u.lh_rate),
        format!("{:.2}", u.ratio),
        "≥ 0.90",
        Some(u.ratio >= 0.90),
    );
    row(
        "W1 uncontended",
        "leasehold's scripts alone (plain connection)",
        String::new(),
        String::new(),
        format!("{:.2}", u.protocol_ratio),
        "",
        None,
    );
    row(
        "W1 uncontended",
        "pair latency p50 / p99 µs",
        format!("{:.0} / {:.0}", u.raw_p50, u.raw_p99),
        format!("{:.0} / {:.0}", u.lh_p50, u.lh_p99),
        String::new(),
        "",
        None,
    );
    for (w, raw, lh, procs) in [
        ("W2 8 threads", &w2_raw, &w2_lh, false),
        ("W2p 4 proc × 2 thr", &w2p_raw, &w2p_lh, true),
    ] {
        let ratio = lh.pairs_per_s / raw.pairs_per_s;
        row(
            w,
            "critical sections/s",
            format!("{:.0}", raw.pairs_per_s),
            format!("{:.0}", lh.pairs_per_s),
            format!("{ratio:.2}"),
            if procs { "" } else { "≥ 1.5" },
            (!procs).then_some(ratio >= 1.5),
        );
        let cmd_target = if procs { 4.0 } else { 3.0 };
        row(
            w,
            "client commands / CS (all incl. script calls)",
            format!("{:.1} ({:.1})", raw.client_cmds_per_cs, raw.all_cmds_per_cs),
            format!("{:.2} ({:.1})", lh.client_cmds_per_cs, lh.all_cmds_per_cs),
            String::new(),
            if procs { "≤ 4" } else { "≤ 3" },
            Some(lh.client_cmds_per_cs <= cmd_target),
        );
        let p50_rtt = lh.handoff_p50_us / rtt;
        row(
            w,
            "handoff p50 / p99 µs",
            format!("{:.0} / {:.0}", raw.handoff_p50_us, raw.handoff_p99_us),
            format!("{:.0} / {:.0}", lh.handoff_p50_us, lh.handoff_p99_us),
            format!("p50 = {p50_rtt:.1} RTT"),
            if procs {
                "p50 ≤ 3 RTT, p99 ≤ 1 ms"
            } else {
                "p99 ≤ 0.5 ms"
            },
            Some(if procs {
                p50_rtt <= 3.0 && lh.handoff_p99_us <= 1_000.0
            } else {
                lh.handoff_p99_us <= 500.0
            }),
        );
        if procs {
            row(
                w,
                "of which across processes: p50 / p99 µs",
                format!("{:.0} / {:.0}", raw.cross_p50_us, raw.cross_p99_us),
                format!("{:.0} / {:.0}", lh.cross_p50_us, lh.cross_p99_us),
                format!("p50 = {:.1} RTT", lh.cross_p50_us / rtt),
                "",
                None,
            );
        }
        row(
            w,
            "least / most busy worker vs mean share",
            format!("{:.2} / {:.2}", raw.least_share, raw.most_share),
            format!("{:.2} / {:.2}", lh.least_share, lh.most_share),
            String::new(),
            if procs {
                "every worker gets turns"
            } else {
                "least ≥ 0.50"
            },
            Some(if procs {
                lh.shares.iter().all(|&s| s > 0)
            } else {
                lh.least_share >= 0.5
            }),
        );
        row(
            w,
            "turns back to the same worker",
            format!("{:.0} %", raw.same_worker * 100.0),
            format!("{:.0} %", lh.same_worker * 100.0),
            String::new(),
            "",
            None,
        );
        row(
            w,
            "turns that were in-process handoffs",
            String::new(),
            format!("{:.0} %", lh.in_process * 100.0),
            String::new(),
            "",
            None,
        );
        if procs {
            row(
                w,
                "turns per worker",
                format!("{:?}", raw.shares),
                format!("{:?}", lh.shares),
                String::new(),
                "",
                None,
            );
        }
    }
    for (w, raw, fair) in [
        ("W2 fair lock, 8 threads", &w2_raw, &w2_fair),
        ("W2p fair lock, 4 proc × 2 thr", &w2p_raw, &w2p_fair),
    ] {
        row(
            w,
            "critical sections/s; client commands / CS",
            format!("{:.0}; {:.1}", raw.pairs_per_s, raw.client_cmds_per_cs),
            format!("{:.0}; {:.2}", fair.pairs_per_s, fair.client_cmds_per_cs),
            format!("{:.2}", fair.pairs_per_s / raw.pairs_per_s),
            "",
            None,
        );
        row(
            w,
            "handoff p50 / p99 µs; least / most vs mean share",
            format!(
                "{:.0} / {:.0}; {:.2} / {:.2}",
                raw.handoff_p50_us, raw.handoff_p99_us, raw.least_share, raw.most_share
            ),
            format!(
                "{:.0} / {:.0}; {:.2} / {:.2}",
                fair.handoff_p50_us, fair.handoff_p99_us, fair.least_share, fair.most_share
            ),
            format!("p50 = {:.1} RTT", fair.handoff_p50_us / rtt),
            "",
            None,
        );
    }
    row(
        "W5 read-mostly, 8 threads (1 in 10 writes)",
        "sections/s (floor: the plain lock); client commands / section; most readers at once",
        format!("{:.0}; {:.2}", w5_plain.0, w5_plain.2),
        format!("{:.0}; {:.2}; {}", w5_rw.0, w5_rw.2, w5_rw.1),
        format!("{:.2}", w5_rw.0 / w5_plain.0),
        "",
        None,
    );
    let r3 = w3_lh / w3_raw;
    row(
        "W3 8 names × 8 threads",
        "lock+unlock pairs/s",
        format!("{w3_raw:.0}"),
        format!("{w3_lh:.0}"),
        format!("{r3:.2}"),
        "≥ 0.85",
        Some(r3 >= 0.85),
    );
    if let Some(w) = &w4 {
        row(
            &format!("W4 {} guards", w.guards),
            &format!("renewal round trips per {:?} period", w.period),
            format!("{:.0} (1 per 1,000)", w.renewals_per_period / 1_000.0),
            format!("{:.0}", w.round_trips_per_period),
            format!(
                "{:.2}",
                w.round_trips_per_period / (w.renewals_per_period / 1_000.0).max(1.0)
            ),
            "",
            None,
        );
        row(
            &format!("W4 {} guards", w.guards),
            "renewal thread CPU per period; memory per guard",
            String::new(),
            format!(
                "{:.2} s ({:.2} % of a core); {:.0} B (took {:.1} s to acquire)",
                w.cpu_secs_per_period, w.cpu_percent, w.bytes_per_guard, w.acquire_secs
            ),
            String::new(),
            "",
            Some(w.leases_lost == 0),
        );
    }
    println!("\n{t}");
    if let Some(path) = env("BENCH_SUMMARY") {
        std::fs::write(&path, &t).unwrap();
    }
}
