//! `leasehold`, the operators' command-line tool (feature `cli`): who holds
//! a lock and who waits (`inspect`), which locks exist (`list`, by `SCAN`,
//! bounded), releasing a stuck one (`force-unlock`, confirmed), watching
//! one change (`watch`), and a semaphore's permits and waiters
//! (`semaphore`). Readable by a person; `--json` for
//! scripts. Connects like the library: `--url` / `REDIS_URL`, `--cluster`
//! seeds or `--sentinel`s with `--master`, `--prefix`, the timeouts, and
//! (feature `tls`) `--tls-ca`. A failure prints its whole cause chain once,
//! naming the server it was about.

use std::io::{BufRead, Write};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use leasehold::{ClientInfo, HoldMode, LockClient, LockInfo, LockKind, WaitQueue};

/// Inspect and operate leasehold (and Redisson) locks in Redis.
#[derive(Parser)]
#[command(name = "leasehold", version = leasehold::VERSION)]
struct Cli {
    /// The Redis server (`redis://…`, `rediss://…` with the `tls` feature).
    #[arg(long, env = "REDIS_URL", default_value = "redis://127.0.0.1/")]
    url: String,
    /// A Redis Cluster instead: seed URLs, comma-separated.
    #[arg(long, value_delimiter = ',')]
    cluster: Vec<String>,
    /// A Sentinel-managed primary instead: the Sentinels' URLs,
    /// comma-separated (their password in the URLs), with `--master`.
    #[arg(long, value_delimiter = ',', requires = "master")]
    sentinel: Vec<String>,
    /// The name the Sentinels monitor the primary under.
    #[arg(long)]
    master: Option<String>,
    /// With `--sentinel`: the primary's ACL user name, if not `default`.
    #[arg(long)]
    primary_user: Option<String>,
    /// With `--sentinel`: the primary's password.
    #[arg(long, env = "LEASEHOLD_PRIMARY_PASSWORD", hide_env_values = true)]
    primary_password: Option<String>,
    /// With `--sentinel`: the primary's database number.
    #[arg(long)]
    primary_db: Option<i64>,
    /// How long one Redis reply may take, in ms.
    #[arg(long, default_value_t = 3_000)]
    socket_timeout: u64,
    /// How long connecting may take, in ms.
    #[arg(long, default_value_t = 5_000)]
    connect_timeout: u64,
    /// The key prefix the services use (`LockClientBuilder::key_prefix`).
    #[arg(long, default_value = "")]
    prefix: String,
    /// PEM root certificate for `rediss://` servers signed by your own CA.
    #[cfg(feature = "tls")]
    #[arg(long)]
    tls_ca: Option<std::path::PathBuf>,
    /// Print JSON (one object per line) instead of text.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Holders (with host, pid and client name), lease left, waiters, fence.
    Inspect { name: String },
    /// Locks whose names match PATTERN (a `SCAN` glob), at most LIMIT keys
    /// looked at per server.
    List {
        #[arg(default_value = "*")]
        pattern: String,
        #[arg(long, default_value_t = 10_000)]
        limit: usize,
    },
    /// Releases a lock whoever holds it and wakes its waiters (asks first).
    ForceUnlock {
        name: String,
        /// Do not ask for confirmation.
        #[arg(long)]
        yes: bool,
    },
    /// A semaphore: permits available, each permit out (id, lease left,
    /// whether a leasehold client took it) and the waiting acquisitions.
    Semaphore { name: String },
    /// Prints the lock's holders and waiters whenever they change.
    Watch {
        name: String,
        /// How often to look, in ms.
        #[arg(long, default_value_t = 200)]
        interval: u64,
        /// Stop after this many seconds (default: until interrupted).
        #[arg(long = "for")]
        duration: Option<f64>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(&cli) {
        Ok(code) => code,
        Err(e) => {
            // The library's error says each cause once in its `Debug` (the
            // tool's own errors are plain messages); its advice is put in
            // this tool's words.
            let said = match e.downcast_ref::<leasehold::Error>() {
                Some(e) => format!("{e:?}"),
                None => e.to_string(),
            }
            .replace("LockClientBuilder::socket_timeout", "--socket-timeout")
            .replace("sentinel_primary_auth", "--primary-password");
            eprintln!("leasehold: {said}");
            ExitCode::from(1)
        }
    }
}

fn client(cli: &Cli) -> Result<LockClient, Box<dyn std::error::Error>> {
    let builder = match (&cli.cluster[..], &cli.sentinel[..]) {
        ([], []) => LockClient::builder(&cli.url),
        (seeds, []) => LockClient::cluster_builder(seeds),
        ([], sentinels) => {
            let master = cli.master.as_deref().unwrap_or_default();
            let mut b = LockClient::sentinel_builder(sentinels, master);
            if let Some(password) = &cli.primary_password {
                b = b.sentinel_primary_auth(cli.primary_user.as_deref(), password);
            }
            if let Some(db) = cli.primary_db {
                b = b.sentinel_primary_db(db);
            }
            b
        }
        _ => return Err("give --cluster or --sentinel, not both".into()),
    };
    #[allow(unused_mut)]
    let mut builder = builder
        .key_prefix(cli.prefix.clone())
        .client_name("leasehold-cli")
        .socket_timeout(Duration::from_millis(cli.socket_timeout))
        .connect_timeout(Duration::from_millis(cli.connect_timeout));
    #[cfg(feature = "tls")]
    if let Some(path) = &cli.tls_ca {
        let pem =
            std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        builder = builder.tls_root_certificate(pem);
    }
    Ok(builder.build()?)
}

fn run(cli: &Cli) -> Result<ExitCode, Box<dyn std::error::Error>> {
    let client = client(cli)?;
    let render: fn(&LockInfo) -> String = if cli.json { json } else { text };
    match &cli.command {
        Command::Inspect { name } => {
            let info = client.inspect(name)?;
            println!("{}", render(&info));
        }
        // Every server's (each primary of a cluster; see `LockClient::list`).
        Command::List { pattern, limit } => {
            for info in client.list(pattern, *limit)? {
                if cli.json {
                    println!("{}", json(&info));
                    continue;
                }
                let holders: Vec<_> = info
                    .holders
                    .iter()
                    .map(|h| who(&h.owner, h.thread, &h.client))
                    .collect();
                println!(
                    "{}\t{}\t{} waiting\tlease left {}\t{}",
                    info.name,
                    kind_text(&info),
                    info.waiters.len(),
                    ttl_text(&info),
                    holders.join("; ")
                );
            }
        }
        Command::Semaphore { name } => {
            let info = client.semaphore(name).inspect()?;
            println!("{}", render_semaphore(&info, cli.json));
        }
        Command::ForceUnlock { name, yes } => {
            if !yes {
                let info = client.inspect(name)?;
                eprintln!("{}", text(&info));
                eprint!("force-unlock {name:?}? Its holders lose it at once. [y/N] ");
                std::io::stderr().flush()?;
                let mut answer = String::new();
                std::io::stdin().lock().read_line(&mut answer)?;
                if !matches!(answer.trim(), "y" | "Y" | "yes") {
                    eprintln!("not changed");
                    return Ok(ExitCode::from(2));
                }
            }
            let freed = client.force_unlock(name)?;
            if cli.json {
                println!("{{\"name\":{},\"freed\":{freed}}}", json_str(name));
            } else if freed {
                println!("{name}: released; its waiters were woken");
            } else {
                println!("{name}: was not held");
            }
        }
        Command::Watch {
            name,
            interval,
            duration,
        } => {
            let until = duration.map(|s| Instant::now() + Duration::from_secs_f64(s.max(0.0)));
            let started = Instant::now();
            // A change of holders or waiters, not of the lease ticking down.
            let mut last = None;
            loop {
                let info = client.inspect(name)?;
                let mut shape = info.clone();
                shape.ttl = shape.ttl.map(|_| Duration::ZERO);
                if last.as_ref() != Some(&shape) {
                    let now = render(&info);
                    if cli.json {
                        println!("{now}");
                    } else {
                        println!("[+{:.3} s] {now}", started.elapsed().as_secs_f64());
                    }
                    std::io::stdout().flush()?;
                    last = Some(shape);
                }
                if until.is_some_and(|u| Instant::now() >= u) {
                    break;
                }
                std::thread::sleep(Duration::from_millis((*interval).max(10)));
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn kind_text(info: &LockInfo) -> &'static str {
    match info.kind {
        LockKind::Free => "free",
        LockKind::Exclusive => "exclusive",
        LockKind::ReadWrite => "read/write",
        LockKind::Job => "job (ShedLock)",
        _ => "unknown",
    }
}

fn ttl_text(info: &LockInfo) -> String {
    info.ttl
        .map_or("-".into(), |t| format!("{:.1} s", t.as_secs_f64()))
}

fn who(owner: &str, thread: Option<u64>, client: &Option<ClientInfo>) -> String {
    let thread = thread.map_or(String::new(), |t| format!("thread {t} of "));
    match client {
        Some(c) => format!("{thread}{c} (leasehold {})", c.version),
        None => format!("{owner} (unregistered client)"),
    }
}

fn text(info: &LockInfo) -> String {
    let mut out = format!(
        "lock {:?} (key {:?}): {}",
        info.name,
        info.key,
        kind_text(info)
    );
    if info.kind != LockKind::Free {
        out += &format!(", lease left {}", ttl_text(info));
    }
    for h in &info.holders {
        let mode = match h.mode {
            HoldMode::Read => "read ",
            HoldMode::Write => "write ",
            _ => "",
        };
        out += &format!(
            "\n  {mode}held by {}, {} hold(s)",
            who(&h.owner, h.thread, &h.client),
            h.holds
        );
    }
    for w in &info.waiters {
        let queue = match w.queue {
            WaitQueue::Line => "line",
            WaitQueue::Fair => "fair queue",
            WaitQueue::Writers => "writers",
            _ => "queue",
        };
        out += &format!(
            "\n  waiting ({queue}): {}",
            who(&w.owner, w.thread, &w.client)
        );
    }
    if let Some(fence) = info.fence {
        out += &format!("\n  last fencing token {fence}");
    }
    out
}

fn render_semaphore(info: &leasehold::SemaphoreInfo, as_json: bool) -> String {
    if as_json {
        let holders = json_list(&info.holders, |p| {
            format!(
                "{{\"id\":{},\"lease_left_ms\":{},\"client\":{}}}",
                json_str(&p.id),
                json_opt(p.expires_in.map(|d| d.as_millis())),
                p.client.as_deref().map_or("null".into(), json_str)
            )
        });
        let waiters = json_list(&info.waiters, |w| {
            format!(
                "{{\"owner\":{},\"permits\":{},\"place_left_ms\":{}}}",
                json_str(&w.owner),
                w.permits,
                w.place_expires_in.as_millis()
            )
        });
        return format!(
            "{{\"name\":{},\"available\":{},\"holders\":{holders},\"waiters\":{waiters}}}",
            json_str(&info.name),
            json_opt(info.available),
        );
    }
    let mut out = match info.available {
        Some(n) => format!(
            "semaphore {}: {n} available, {} out",
            info.name,
            info.holders.len()
        ),
        None => format!("semaphore {}: no permits set", info.name),
    };
    for p in &info.holders {
        let lease = match p.expires_in {
            None => "no lease".to_owned(),
            Some(d) if d.is_zero() => "expired (given back by the next call)".to_owned(),
            Some(d) => format!("lease left {} ms", d.as_millis()),
        };
        let who = match &p.client {
            Some(c) => format!("leasehold client {c}…"),
            None => "another library's".to_owned(),
        };
        out.push_str(&format!("\n  permit {} ({who}): {lease}", p.id));
    }
    for (i, w) in info.waiters.iter().enumerate() {
        out.push_str(&format!(
            "\n  waiting #{}: {} for {} permit(s), place lives {} ms unless confirmed",
            i + 1,
            w.owner,
            w.permits,
            w.place_expires_in.as_millis()
        ));
    }
    out
}

fn json_str(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// `[a,b,…]`, each item as `one` writes it.
fn json_list<T>(items: &[T], one: impl Fn(&T) -> String) -> String {
    format!("[{}]", items.iter().map(one).collect::<Vec<_>>().join(","))
}

fn json_opt<T: ToString>(v: Option<T>) -> String {
    v.map_or("null".into(), |v| v.to_string())
}

fn json_client(c: &Option<ClientInfo>) -> String {
    c.as_ref().map_or("null".into(), |c| {
        format!(
            "{{\"id\":{},\"host\":{},\"pid\":{},\"name\":{},\"version\":{},\"started_ms\":{}}}",
            json_str(&c.id),
            json_str(&c.host),
            json_opt(c.pid),
            c.name.as_deref().map_or("null".into(), json_str),
            json_str(&c.version),
            json_opt(c.started_ms)
        )
    })
}

fn json(info: &LockInfo) -> String {
    let holders = json_list(&info.holders, |h| {
        let mode = match h.mode {
            HoldMode::Read => "read",
            HoldMode::Write => "write",
            _ => "exclusive",
        };
        format!(
            "{{\"owner\":{},\"thread\":{},\"holds\":{},\"mode\":\"{mode}\",\"client\":{}}}",
            json_str(&h.owner),
            json_opt(h.thread),
            h.holds,
            json_client(&h.client)
        )
    });
    let waiters = json_list(&info.waiters, |w| {
        let queue = match w.queue {
            WaitQueue::Line => "line",
            WaitQueue::Fair => "fair",
            _ => "writers",
        };
        format!(
            "{{\"owner\":{},\"thread\":{},\"queue\":\"{queue}\",\"client\":{}}}",
            json_str(&w.owner),
            json_opt(w.thread),
            json_client(&w.client)
        )
    });
    format!(
        "{{\"name\":{},\"key\":{},\"kind\":\"{}\",\"ttl_ms\":{},\"fence\":{},\"holders\":{holders},\"waiters\":{waiters}}}",
        json_str(&info.name),
        json_str(&info.key),
        kind_text(info),
        json_opt(info.ttl.map(|t| t.as_millis())),
        json_opt(info.fence),
    )
}
