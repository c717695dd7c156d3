//! An async service: request handlers lock `order:<id>` around a payment,
//! holding the lock across `.await`s — without blocking the executor.
//!
//! A tokio runtime with two worker threads serves a burst of payment
//! requests for a handful of orders (many requests per order, as retries and
//! double clicks make them). Each handler takes the order's lock with
//! `AsyncLockClient::lock`, checks whether the order is paid, and if not
//! "calls the payment provider" (an `.await` of a few ms) and charges it —
//! a check-then-act that only the lock makes safe. Meanwhile a 1 ms ticker
//! task records the longest gap between its ticks (an executor thread
//! blocked on Redis would show there). At the end the service prints
//! what it proved: every order charged exactly once, how the requests
//! waited, the ticker's longest gap, and how few threads all of that took.
//!
//! ```text
//! cargo run --release --example service -- --url redis://127.0.0.1:6379/ \
//!     --orders 20 --requests 2000 --pay-ms 3
//! ```

use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use std::collections::HashMap;
use std::sync::Mutex;

use leasehold::AsyncLockClient;

struct Args {
    url: String,
    orders: u64,
    requests: u64,
    pay_ms: u64,
}

fn args() -> Result<Args, String> {
    let mut a = Args {
        url: std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/".into()),
        orders: 20,
        requests: 2_000,
        pay_ms: 3,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or(format!("{flag} needs a value"))?;
        let number = || value.parse::<u64>().map_err(|e| format!("{flag}: {e}"));
        match flag.as_str() {
            "--url" => a.url = value.clone(),
            "--orders" => a.orders = number()?.max(1),
            "--requests" => a.requests = number()?,
            "--pay-ms" => a.pay_ms = number()?,
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    Ok(a)
}

/// The service's own records (in-process here; a real service would use an
/// async database client): charges per order.
type Charges = Arc<Mutex<HashMap<u64, u64>>>;

/// One request handler: pay order `order` unless it is paid already. The
/// check and the charge are separated by an `.await` (the provider): only the
/// lock keeps two handlers of one order from both charging.
async fn pay(
    client: &AsyncLockClient,
    charges: &Charges,
    ns: &str,
    order: u64,
    pay_ms: u64,
) -> Result<bool, leasehold::Error> {
    let guard = client.lock(&format!("{ns}:order:{order}")).await?;
    let paid = charges
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .contains_key(&order);
    if !paid {
        tokio::time::sleep(Duration::from_millis(pay_ms)).await; // the provider
        *charges
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(order)
            .or_default() += 1;
    }
    guard.unlock().await?;
    Ok(!paid)
}

fn threads() -> usize {
    std::fs::read_dir("/proc/self/task").map_or(0, |d| d.count())
}

fn main() -> ExitCode {
    let a = match args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("service: {e}");
            return ExitCode::from(2);
        }
    };
    let charges: Charges = Arc::default();
    let ns = format!("service-demo-{}", std::process::id());
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("service: {e}");
            return ExitCode::FAILURE;
        }
    };
    // The start-up check: a wrong URL or password fails here, not at the
    // first lock.
    let client = match rt.block_on(AsyncLockClient::connect(&a.url)) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("service: {e}");
            return ExitCode::FAILURE;
        }
    };
    let before = threads();
    let late = Arc::new(AtomicU64::new(0));
    let peak_threads = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let outcome = rt.block_on(async {
        let ticker = {
            let (late, peak) = (Arc::clone(&late), Arc::clone(&peak_threads));
            tokio::spawn(async move {
                let mut last = Instant::now();
                loop {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    let gap = last.elapsed().as_micros() as u64;
                    late.fetch_max(gap, Ordering::Relaxed);
                    peak.fetch_max(threads() as u64, Ordering::Relaxed);
                    last = Instant::now();
                }
            })
        };
        let requests: Vec<_> = (0..a.requests)
            .map(|i| {
                let (client, charges, ns) = (client.clone(), Arc::clone(&charges), ns.clone());
                tokio::spawn(
                    async move { pay(&client, &charges, &ns, i % a.orders, a.pay_ms).await },
                )
            })
            .collect();
        let (mut charged, mut failed) = (0u64, 0u64);
        for r in requests {
            match r.await {
                Ok(Ok(true)) => charged += 1,
                Ok(Ok(false)) => {}
                Ok(Err(e)) => {
                    eprintln!("a request failed: {e}");
                    failed += 1;
                }
                Err(e) => {
                    eprintln!("a handler panicked: {e}");
                    failed += 1;
                }
            }
        }
        ticker.abort();
        (charged, failed)
    });
    let took = started.elapsed();
    let (charged, failed) = outcome;
    let charges: Vec<u64> = charges
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .values()
        .copied()
        .collect();
    let twice = charges.iter().filter(|&&n| n > 1).count();
    let stats = client.stats();
    println!(
        "{} requests for {} orders in {:.2?} on 2 executor threads: {} orders charged, {} charged twice, {} requests failed",
        a.requests, a.orders, took, charges.len(), twice, failed
    );
    println!(
        "waits: {} acquisitions, {} in-process handoffs; the longest gap between ticks of a 1 ms ticker task: {:.1} ms; threads: {} before, at most {} during",
        stats.acquisitions,
        stats.handoffs,
        late.load(Ordering::Relaxed) as f64 / 1e3,
        before,
        peak_threads.load(Ordering::Relaxed)
    );
    let ok = twice == 0 && failed == 0 && charged == a.orders.min(a.requests);
    if ok {
        println!("proved: every order charged exactly once, with {} concurrent handlers and no thread per waiting request", a.requests);
        ExitCode::SUCCESS
    } else {
        println!("FAILED: some order was charged twice, not at all, or a request failed");
        ExitCode::FAILURE
    }
}
