//! W1 (one thread, lock + unlock pairs against the raw pair) and W3
//! (8 threads on 8 names), and the loopback round trip they are read
//! against.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use leasehold::LockClient;

use crate::contend::{Kind, RawLock};
use crate::measure::*;

// ----------------------------------------------------------- W1, W3, RTT

/// Loopback round trip: `PING` p50 on one connection, in µs.
pub(crate) fn ping_us(url: &str) -> f64 {
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

pub(crate) struct Uncontended {
    pub(crate) raw_rate: f64,
    pub(crate) lh_rate: f64,
    pub(crate) ratio: f64,
    /// leasehold's own two scripts on a plain connection, as a ratio to raw:
    /// what the Redisson layout costs in Redis, without the library around it.
    pub(crate) protocol_ratio: f64,
    pub(crate) raw_p50: f64,
    pub(crate) raw_p99: f64,
    pub(crate) lh_p50: f64,
    pub(crate) lh_p99: f64,
}

/// W1: alternating blocks of raw and leasehold pairs; the ratio is the median
/// of per-block ratios, so machine noise hits both alike.
pub(crate) fn w1(url: &str, secs: f64) -> Uncontended {
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
                .key("leasehold_line:{w1-protocol}")
                .key("leasehold_line:{w1-protocol}:yield")
                .arg(30_000)
                .arg(owner)
                .arg("1")
                .arg("")
                .invoke(&mut raw.con)
                .unwrap();
            assert!(held.is_none(), "protocol floor: the key was free");
            let freed: i64 = release
                .key("w1-protocol")
                .key("redisson_lock__channel:{w1-protocol}")
                .key("leasehold_line:{w1-protocol}")
                .key("leasehold_line:{w1-protocol}:yield")
                .key("redisson_lock_token:{w1-protocol}")
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
pub(crate) fn w3(kind: Kind, url: &str, secs: f64) -> f64 {
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
                        Kind::Leasehold | Kind::Fair | Kind::Async => {
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
