//! A nightly batch: several worker processes × threads drain one shared list
//! of jobs, each job guarded by `client.lock("job:<id>")`, and every job must
//! run exactly once.
//!
//! Each worker thread walks the whole job list in its own random order. For a
//! job it takes the job's lock, checks whether the job is done, and if not runs
//! it (a few ms of work), counts the run and marks it done — a check-then-act
//! that only the lock makes safe. At the end the coordinator reads the run
//! counts back from Redis: jobs done, jobs done twice (must be 0), and the lock
//! wait times. `--compare` repeats the batch without the lock to show the check
//! is real.
//!
//! ```text
//! cargo run --release --example batch_jobs -- --url redis://127.0.0.1:6379/ \
//!     --processes 4 --threads 4 --jobs 400 --work-ms 2 --compare
//! ```

use std::process::{Command, ExitCode};
use std::thread;
use std::time::{Duration, Instant};

use leasehold::redis::{self, Commands};
use leasehold::LockClient;

#[derive(Clone, Debug)]
struct Args {
    url: String,
    processes: usize,
    threads: usize,
    jobs: usize,
    work_ms: u64,
    compare: bool,
    worker: Option<Worker>,
}

#[derive(Clone, Debug)]
struct Worker {
    ns: String,
    seed: u64,
    unlocked: bool,
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

fn parse_args() -> Result<Args, BoxError> {
    let mut args = Args {
        url: std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/".into()),
        processes: 4,
        threads: 4,
        jobs: 400,
        work_ms: 2,
        compare: false,
        worker: None,
    };
    let mut ns = None;
    let mut seed = 0;
    let mut unlocked = false;
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--url" => args.url = value()?,
            "--processes" => args.processes = value()?.parse()?,
            "--threads" => args.threads = value()?.parse()?,
            "--jobs" => args.jobs = value()?.parse()?,
            "--work-ms" => args.work_ms = value()?.parse()?,
            "--compare" => args.compare = true,
            "--worker-ns" => ns = Some(value()?),
            "--seed" => seed = value()?.parse()?,
            "--unlocked" => unlocked = true,
            other => return Err(format!("unknown argument {other:?}").into()),
        }
    }
    args.worker = ns.map(|ns| Worker { ns, seed, unlocked });
    if args.processes == 0 || args.threads == 0 || args.jobs == 0 {
        return Err("--processes, --threads and --jobs must be at least 1".into());
    }
    Ok(args)
}

fn main() -> ExitCode {
    let result = parse_args().and_then(|args| match &args.worker {
        Some(w) => run_worker(&args, w).map(|()| ExitCode::SUCCESS),
        None => run_coordinator(&args),
    });
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("batch_jobs: {e}");
            ExitCode::FAILURE
        }
    }
}

/// One worker process: `threads` threads, each walking every job.
fn run_worker(args: &Args, w: &Worker) -> Result<(), BoxError> {
    let client = LockClient::connect(&args.url)?;
    let jobs: Vec<String> = redis::Client::open(args.url.as_str())?
        .get_connection()?
        .lrange(format!("{}:jobs", w.ns), 0, -1)?;
    let handles: Vec<_> = (0..args.threads)
        .map(|t| {
            let client = client.clone();
            let mut order = jobs.clone();
            let (w, url, work) = (w.clone(), args.url.clone(), args.work_ms);
            thread::spawn(move || -> Result<(u64, Vec<u64>), BoxError> {
                let mut con = redis::Client::open(url)?.get_connection()?;
                shuffle(&mut order, w.seed * 1000 + t as u64 + 1);
                let mut executed = 0;
                let mut waits_us = Vec::with_capacity(order.len());
                for job in &order {
                    let asked = Instant::now();
                    let guard = if w.unlocked {
                        None
                    } else {
                        Some(client.lock(&format!("{}:job:{job}", w.ns))?)
                    };
                    waits_us.push(asked.elapsed().as_micros() as u64);
                    let done: bool = con.exists(format!("{}:done:{job}", w.ns))?;
                    if !done {
                        thread::sleep(Duration::from_millis(work)); // the job itself
                        let _: u64 = con.incr(format!("{}:runs:{job}", w.ns), 1)?;
                        let _: () = con.set(format!("{}:done:{job}", w.ns), 1)?;
                        executed += 1;
                    }
                    if let Some(g) = guard {
                        g.unlock()?;
                    }
                }
                Ok((executed, waits_us))
            })
        })
        .collect();
    let mut executed = 0;
    let mut waits = Vec::new();
    for h in handles {
        let (n, w) = h.join().map_err(|_| "a worker thread panicked")??;
        executed += n;
        waits.extend(w);
    }
    println!("executed {executed}");
    let list: Vec<String> = waits.iter().map(u64::to_string).collect();
    println!("waits_us {}", list.join(","));
    Ok(())
}

struct Round {
    done: usize,
    twice: usize,
    waits_us: Vec<u64>,
    wall: Duration,
}

fn run_coordinator(args: &Args) -> Result<ExitCode, BoxError> {
    println!(
        "leasehold batch demo: {} processes x {} threads draining {} jobs ({} ms of work each)",
        args.processes, args.threads, args.jobs, args.work_ms
    );
    let locked = run_round(args, false)?;
    let ok = locked.done == args.jobs && locked.twice == 0;
    let mut waits = locked.waits_us.clone();
    waits.sort_unstable();
    println!("  jobs done:        {} / {}", locked.done, args.jobs);
    println!("  jobs done twice:  {}", locked.twice);
    println!(
        "  lock waits:       {} acquisitions, p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        waits.len(),
        percentile(&waits, 50.0),
        percentile(&waits, 99.0),
        percentile(&waits, 100.0)
    );
    println!("  wall time:        {:.2} s", locked.wall.as_secs_f64());
    if args.compare {
        let unlocked = run_round(args, true)?;
        println!(
            "  without the lock: {} jobs done twice in the same batch (that is what the lock prevents)",
            unlocked.twice
        );
    }
    if ok {
        println!("proved: every job ran exactly once across all processes and threads");
        Ok(ExitCode::SUCCESS)
    } else {
        println!("FAILED: jobs were lost or run twice");
        Ok(ExitCode::FAILURE)
    }
}

fn run_round(args: &Args, unlocked: bool) -> Result<Round, BoxError> {
    let mut con = redis::Client::open(args.url.as_str())?.get_connection()?;
    let ns = format!("batch-demo:{}:{}", std::process::id(), unlocked);
    let ids: Vec<usize> = (0..args.jobs).collect();
    let _: () = con.del(format!("{ns}:jobs"))?;
    let _: () = con.rpush(format!("{ns}:jobs"), &ids)?;
    let exe = std::env::current_exe()?;
    let started = Instant::now();
    let children: Vec<_> = (0..args.processes)
        .map(|p| {
            let mut cmd = Command::new(&exe);
            cmd.args(["--url", &args.url, "--worker-ns", &ns])
                .args(["--threads", &args.threads.to_string()])
                .args(["--work-ms", &args.work_ms.to_string()])
                .args(["--seed", &p.to_string()]);
            if unlocked {
                cmd.arg("--unlocked");
            }
            cmd.stdout(std::process::Stdio::piped()).spawn()
        })
        .collect::<Result<_, _>>()?;
    let mut waits_us = Vec::new();
    for child in children {
        let out = child.wait_with_output()?;
        if !out.status.success() {
            return Err(format!("a worker process failed: {}", out.status).into());
        }
        let text = String::from_utf8_lossy(&out.stdout);
        for line in text.lines() {
            if let Some(list) = line.strip_prefix("waits_us ") {
                waits_us.extend(list.split(',').filter_map(|v| v.parse::<u64>().ok()));
            }
        }
    }
    let wall = started.elapsed();
    let mut done = 0;
    let mut twice = 0;
    for id in &ids {
        let runs: Option<u64> = con.get(format!("{ns}:runs:{id}"))?;
        match runs.unwrap_or(0) {
            0 => {}
            1 => done += 1,
            _ => {
                done += 1;
                twice += 1;
            }
        }
    }
    // Leave nothing behind.
    let keys: Vec<String> = con.keys(format!("{ns}:*"))?;
    if !keys.is_empty() {
        let _: () = con.del(keys)?;
    }
    Ok(Round {
        done,
        twice,
        waits_us,
        wall,
    })
}

fn percentile(sorted_us: &[u64], p: f64) -> f64 {
    if sorted_us.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * (sorted_us.len() - 1) as f64).round() as usize;
    sorted_us[rank.min(sorted_us.len() - 1)] as f64 / 1000.0
}

/// Fisher–Yates with xorshift: each thread its own order, no extra crate.
fn shuffle<T>(v: &mut [T], seed: u64) {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    for i in (1..v.len()).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.swap(i, (x % (i as u64 + 1)) as usize);
    }
}
