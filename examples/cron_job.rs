//! A cron-style job on three replicas: each process fires the job
//! `report` every `--period-ms` by its own clock (the replicas' clocks set
//! apart by up to `--skew-ms`, as real hosts drift), through
//! `client.job("report").run(..)`. One replica per window runs it; the
//! others are skipped and told who ran it. At the end the coordinator reads
//! back the runs per window from Redis: windows run, windows run twice
//! (must be 0), skips.
//!
//! ```text
//! cargo run --example cron_job -- --url redis://127.0.0.1:6379/ \
//!     --processes 3 --windows 10 --period-ms 1000 --skew-ms 200
//! ```

use std::process::{Command, ExitCode};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use leasehold::redis::{self, Commands};
use leasehold::{JobRun, LockClient};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

#[derive(Clone, Debug)]
struct Args {
    url: String,
    processes: i64,
    windows: i64,
    period_ms: i64,
    skew_ms: i64,
    /// A worker: its namespace, clock offset and first window.
    worker: Option<(String, i64, i64)>,
}

fn parse_args() -> Result<Args, BoxError> {
    let mut args = Args {
        url: std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/".into()),
        processes: 3,
        windows: 10,
        period_ms: 1_000,
        skew_ms: 200,
        worker: None,
    };
    let (mut ns, mut offset, mut first) = (None, 0, 0);
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--url" => args.url = value()?,
            "--processes" => args.processes = value()?.parse()?,
            "--windows" => args.windows = value()?.parse()?,
            "--period-ms" => args.period_ms = value()?.parse()?,
            "--skew-ms" => args.skew_ms = value()?.parse()?,
            "--worker-ns" => ns = Some(value()?),
            "--offset-ms" => offset = value()?.parse()?,
            "--first" => first = value()?.parse()?,
            other => return Err(format!("unknown argument {other:?}").into()),
        }
    }
    if args.processes < 1 || args.windows < 1 || args.period_ms < 100 {
        return Err("--processes and --windows must be at least 1, --period-ms 100".into());
    }
    if args.skew_ms < 0 || args.skew_ms * 2 >= args.period_ms {
        return Err("--skew-ms must be under a half period".into());
    }
    args.worker = ns.map(|ns| (ns, offset, first));
    Ok(args)
}

fn main() -> ExitCode {
    let result = parse_args().and_then(|args| match &args.worker {
        Some((ns, offset, first)) => worker(&args, ns, *offset, *first).map(|()| ExitCode::SUCCESS),
        None => coordinator(&args),
    });
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("cron_job: {e}");
            ExitCode::FAILURE
        }
    }
}

fn unix_ms() -> i64 {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    i64::try_from(now.as_millis()).unwrap_or(i64::MAX)
}

/// One replica: fires the job at every window of its (offset) clock.
fn worker(args: &Args, ns: &str, offset: i64, first: i64) -> Result<(), BoxError> {
    let client = LockClient::connect(&args.url)?;
    // Held at least two skews, released well before the next window.
    let at_least = Duration::from_millis((args.skew_ms * 2 + args.period_ms / 4) as u64);
    let job = client
        .job("report")
        .environment(ns)
        .lock_at_least_for(at_least);
    let mut con = redis::Client::open(args.url.as_str())?.get_connection()?;
    for window in first..first + args.windows {
        let wait = window * args.period_ms - (unix_ms() + offset);
        if wait > 0 {
            std::thread::sleep(Duration::from_millis(wait as u64));
        }
        match job.run(|| con.incr::<_, _, i64>(format!("{ns}:runs:{window}"), 1))? {
            JobRun::Ran(runs) => {
                runs?;
            }
            JobRun::RanUnconfirmed { output, error } => {
                output?;
                eprintln!("cron_job: ran, but {error}");
            }
            JobRun::Skipped(_) => {
                con.incr::<_, _, i64>(format!("{ns}:skips"), 1)?;
            }
        }
    }
    Ok(())
}

fn coordinator(args: &Args) -> Result<ExitCode, BoxError> {
    let ns = format!("cron-demo-{}", std::process::id());
    let first = (unix_ms() + 2_000) / args.period_ms + 1;
    let exe = std::env::current_exe()?;
    let mut children = Vec::new();
    for p in 0..args.processes {
        // Clocks spread evenly over ±skew.
        let offset = if args.processes == 1 {
            0
        } else {
            -args.skew_ms + 2 * args.skew_ms * p / (args.processes - 1)
        };
        children.push(
            Command::new(&exe)
                .args(["--url", &args.url, "--worker-ns", &ns])
                .args([
                    "--offset-ms",
                    &offset.to_string(),
                    "--first",
                    &first.to_string(),
                ])
                .args(["--windows", &args.windows.to_string()])
                .args(["--period-ms", &args.period_ms.to_string()])
                .args(["--skew-ms", &args.skew_ms.to_string()])
                .spawn()?,
        );
    }
    let mut failed = false;
    for mut child in children {
        failed |= !child.wait()?.success();
    }
    let mut con = redis::Client::open(args.url.as_str())?.get_connection()?;
    let mut once = 0;
    let mut twice = 0;
    for window in first..first + args.windows {
        match con.get::<_, Option<i64>>(format!("{ns}:runs:{window}"))? {
            Some(1) => once += 1,
            Some(_) => twice += 1,
            None => {}
        }
    }
    let skips: i64 = con
        .get::<_, Option<i64>>(format!("{ns}:skips"))?
        .unwrap_or(0);
    let mut keys: Vec<String> = con.keys(format!("{ns}:*"))?;
    keys.push(format!("job-lock:{ns}:report"));
    keys.push(format!("{{job-lock:{ns}:report}}:leasehold_job_history"));
    con.del::<_, ()>(keys)?;
    println!(
        "{} replicas, clocks up to ±{} ms apart, {} windows of {} ms: \
         {once} windows ran once, {twice} more than once, {skips} runs skipped",
        args.processes, args.skew_ms, args.windows, args.period_ms
    );
    Ok(if failed || twice > 0 || once != args.windows {
        eprintln!("cron_job: a window did not run exactly once, or a replica failed");
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}
