//! The performance table: W1–W4, every leasehold figure beside its raw-Redis
//! floor measured in the same run.
//!
//! - W1 uncontended: one thread, one name, lock + unlock. Floor: `SET name
//!   token NX PX` + a compare-and-delete `EVALSHA` on one plain connection.
//! - W2 contended, threads: 8 threads of one client on one name. Floor: 8
//!   threads, each with its own connection, spinning on `SET NX PX`.
//! - W2p contended, processes: 4 processes × 2 threads (children of this
//!   binary), the same two contenders.
//! - W2c / W2P one client per contender: 8 threads each with its own
//!   `LockClient`, and 8 processes × 1 thread; the same two contenders.
//! - W3 many names: 8 threads on distinct names. Floor: the raw pair on 8
//!   connections.
//! - W4 renewal: 100,000 live watchdog guards (see `common/w4.rs`).
//! - A1 / A2c, the async API: one task's lock + unlock against W1's blocking
//!   pairs (and the same for the fair, read and write locks and a
//!   semaphore permit, against their blocking pairs), and 8 tasks with a
//!   client each in the W2c shape (see `common/tasks.rs`).
//! - S1 / S2, the semaphore: uncontended acquire + release, and 8 clients
//!   on 2 permits against a spinning `DECR`/`INCR` floor (see
//!   `common/sem.rs`).
//! - Handoff floors beside W2c: a token ring over `BLPOP` and a bare grant
//!   lock, the least a handoff through Redis costs (see `common/floors.rs`).
//! - Where one handoff's time goes, two clients and a probe on the grant
//!   channels (`BENCH_ONLY=split` only; see `common/split.rs`).
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

#[path = "common/contend.rs"]
mod contend;
#[path = "common/floors.rs"]
mod floors;
#[path = "common/measure.rs"]
mod measure;
#[cfg(feature = "peers")]
#[path = "common/peer.rs"]
mod peer;
#[path = "common/sem.rs"]
mod sem;
#[path = "common/split.rs"]
mod split;
#[path = "common/table.rs"]
mod table;
#[path = "common/tasks.rs"]
mod tasks;
#[path = "common/uncontended.rs"]
mod uncontended;
#[path = "common/w4.rs"]
mod w4;
#[path = "common/w5.rs"]
mod w5;

use contend::{child, w2, w2c, w2p, w2pp, Kind};
use measure::con;
use table::Results;
use uncontended::{ping_us, w1, w3};
use w5::w5;

/// Runs raw then leasehold `rounds` times and keeps the round whose
/// leasehold/raw ratio of `rate` is the median: one noisy run neither makes
/// nor breaks a figure, and both figures of a row come from the same round.
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
            "w2" => {
                let (raw, lh) = (w2(Kind::Raw, &url, secs), w2(Kind::Leasehold, &url, secs));
                println!(
                    "W2 leasehold {:.0}/s (floor {:.0}/s, ratio {:.2}) handoff p50 {:.0} µs, p99 {:.0} µs, cmds/CS {:.2}, in-process {:.0} %",
                    lh.pairs_per_s, raw.pairs_per_s, lh.pairs_per_s / raw.pairs_per_s, lh.handoff_p50_us, lh.handoff_p99_us, lh.client_cmds_per_cs, lh.in_process * 100.0
                );
            }
            "w2p" => {
                let c = w2p(Kind::Leasehold, &url, secs);
                println!(
                    "W2p leasehold {:.0}/s handoff p50 {:.0} µs = {:.1} RTT, p99 {:.0} µs (across processes p50 {:.0} µs, p99 {:.0} µs; within p50 {:.0} µs), cmds/CS {:.2}, in-process {:.0} %, shares {:?}",
                    c.pairs_per_s, c.handoff_p50_us, c.handoff_p50_us / rtt, c.handoff_p99_us, c.cross_p50_us, c.cross_p99_us, c.within_p50_us, c.client_cmds_per_cs, c.in_process * 100.0, c.shares
                );
            }
            "w2c" | "w2P" => {
                let run = |k| {
                    if only == "w2c" {
                        w2c(k, &url, secs)
                    } else {
                        w2pp(k, &url, secs)
                    }
                };
                let (raw, lh) = (run(Kind::Raw), run(Kind::Leasehold));
                println!("{}", table::one_client_each_line(&only, &raw, &lh, rtt));
            }
            "fair" => {
                for (w, raw, c) in [
                    (
                        "W2 fair",
                        w2(Kind::Raw, &url, secs),
                        w2(Kind::Fair, &url, secs),
                    ),
                    (
                        "W2p fair",
                        w2p(Kind::Raw, &url, secs),
                        w2p(Kind::Fair, &url, secs),
                    ),
                ] {
                    println!(
                        "{w} {:.0}/s (floor {:.0}/s, ratio {:.2}) handoff p50 {:.0} µs = {:.1} RTT, p99 {:.0} µs, cmds/CS {:.2}, least/most {:.2}/{:.2}, shares {:?}",
                        c.pairs_per_s, raw.pairs_per_s, c.pairs_per_s / raw.pairs_per_s, c.handoff_p50_us, c.handoff_p50_us / rtt, c.handoff_p99_us, c.client_cmds_per_cs, c.least_share, c.most_share, c.shares
                    );
                }
            }
            "a2c" | "w2c-alone" => {
                // One side of A2c alone (to profile it): the tasks, or W2c's
                // blocking threads.
                let c = if only == "a2c" {
                    tasks::a2c(&url, secs)
                } else {
                    w2c(Kind::Leasehold, &url, secs)
                };
                println!(
                    "{only} {:.0} CS/s, handoff p50 {:.0} µs, p99 {:.0} µs, cmds/CS {:.2}, Redis CPU {:.1} µs/CS",
                    c.pairs_per_s, c.handoff_p50_us, c.handoff_p99_us, c.client_cmds_per_cs, c.redis_cpu_us_per_cs
                );
            }
            "a1" => {
                let a = tasks::a1(&url, secs);
                println!(
                    "A1 blocking {:.0}/s async {:.0}/s ratio {:.2}",
                    a.blocking_rate, a.async_rate, a.ratio
                );
            }
            "async" => {
                let a = tasks::a1(&url, secs);
                let (w2c_lh, a2c) = (w2c(Kind::Leasehold, &url, secs), tasks::a2c(&url, secs));
                println!("{}", table::async_lines(&a, &w2c_lh, &a2c));
                println!("{}", table::kind_lines(&tasks::a1_kinds(&url, secs)));
            }
            #[cfg(feature = "peers")]
            "r1" => {
                for (f, rslock, lh, ratio, ..) in peer::rows(&peer::r1(&url, secs)) {
                    println!("{f}: rslock {rslock}, leasehold {lh}, ratio {ratio}");
                }
            }
            "sem" => println!("{}", sem::lines(&sem::measure(&url, secs))),
            "floors" => {
                let f = floors::measure(&url, secs);
                println!("{}", table::floors_line(&f, rtt));
            }
            "split" => {
                let s = split::measure(&url, 2000);
                println!(
                    "split of {} handoffs between two clients, p50 µs: the release call {:.1}; release start → grant heard by a probe {:.1}; heard → the waiter in its section {:.1}; release start → the waiter in its section {:.1} = {:.1} RTT",
                    s.handoffs, s.release_call, s.to_grant_heard, s.heard_to_section, s.total, s.total / rtt
                );
            }
            "w5" => {
                let (p, _, pc) = w5(&url, secs, true);
                let (r, most, rc) = w5(&url, secs, false);
                println!(
                    "W5 plain {p:.0}/s ({pc:.2} cmds/CS), read/write {r:.0}/s ({rc:.2} cmds/CS), ratio {:.2}, most readers inside {most}",
                    r / p
                );
            }
            other => {
                eprintln!(
                    "BENCH_ONLY: w1, w2, a1, r1 (feature peers), w3, w2p, w2c, w2P, async, a2c, w2c-alone, sem, floors, split, w5 or fair, not {other}"
                )
            }
        }
        return;
    }
    eprintln!("[{mode}] W1 uncontended…");
    let u = w1(&url, secs);
    eprintln!("[{mode}] W2 8 threads: raw spin floor, then leasehold…");
    let (w2_raw, w2_lh) = median_round(rounds, |k| w2(k, &url, secs), |c| c.pairs_per_s);
    eprintln!("[{mode}] W2p 4 processes x 2 threads: raw spin floor, then leasehold…");
    let (w2p_raw, w2p_lh) = median_round(rounds, |k| w2p(k, &url, secs), |c| c.pairs_per_s);
    eprintln!("[{mode}] W2c 8 threads, a client each: raw spin floor, then leasehold…");
    let (w2c_raw, w2c_lh) = median_round(rounds, |k| w2c(k, &url, secs), |c| c.pairs_per_s);
    eprintln!("[{mode}] A1 / A2c the async API: one task uncontended, 8 tasks a client each…");
    let a1 = tasks::a1(&url, secs);
    let a1_kinds = tasks::a1_kinds(&url, secs);
    // Each round: W2c's blocking threads, then the tasks; the median
    // round's pair is compared.
    let (a2c_w2c, a2c) = median_round(
        rounds,
        |k| match k {
            Kind::Raw => w2c(Kind::Leasehold, &url, secs),
            _ => tasks::a2c(&url, secs),
        },
        |c| c.pairs_per_s,
    );
    #[cfg(feature = "peers")]
    let peer = {
        eprintln!("[{mode}] R1 the async face against rslock, a thread's own runtime per call…");
        peer::r1(&url, secs)
    };
    eprintln!("[{mode}] W2P 8 processes x 1 thread: raw spin floor, then leasehold…");
    let (w2pp_raw, w2pp_lh) = median_round(rounds, |k| w2pp(k, &url, secs), |c| c.pairs_per_s);
    eprintln!("[{mode}] handoff floors: a token ring, a bare grant lock…");
    let floors = floors::measure(&url, secs);
    eprintln!("[{mode}] W2 / W2p with the fair lock…");
    let w2_fair = w2(Kind::Fair, &url, secs);
    let w2p_fair = w2p(Kind::Fair, &url, secs);
    eprintln!("[{mode}] W5 read-mostly: plain lock, then read/write lock…");
    let w5_plain = w5(&url, secs, true);
    let w5_rw = w5(&url, secs, false);
    eprintln!("[{mode}] S1 / S2 the semaphore: uncontended, 8 clients on 2 permits…");
    let sem = sem::measure(&url, secs);
    eprintln!("[{mode}] W3 8 threads on distinct names…");
    let (w3_raw, w3_lh) = median_round(rounds, |k| w3(k, &url, secs), |r| *r);
    let w4 = (guards > 0).then(|| {
        eprintln!("[{mode}] W4 {guards} live guards (about 40 s)…");
        w4::run(&url, guards)
    });

    let t = table::render(&Results {
        mode: mode.clone(),
        secs,
        rounds,
        rtt,
        redis_version,
        u,
        w2_raw,
        w2_lh,
        w2p_raw,
        w2p_lh,
        w2c_raw,
        w2c_lh,
        a1,
        a1_kinds,
        a2c_w2c,
        a2c,
        w2pp_raw,
        w2pp_lh,
        floors,
        w2_fair,
        w2p_fair,
        w5_plain,
        w5_rw,
        w3_raw,
        w3_lh,
        w4,
        sem,
        #[cfg(feature = "peers")]
        peer,
    });
    println!("\n{t}");
    if let Some(path) = env("BENCH_SUMMARY") {
        std::fs::write(&path, &t).unwrap();
    }
}
