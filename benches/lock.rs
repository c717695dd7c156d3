//! Uncontended lock + unlock beside the raw floor, on one throwaway server in
//! the same run: `SET name token NX PX` + a compare-and-delete `EVALSHA` on a
//! plain `redis::Connection` — the least any owner-checked Redis lock can do.
//!
//! `cargo bench --bench lock` prints criterion's figures for both, then a
//! ratio measured by interleaving the two (so machine noise hits both alike).

#[path = "../tests/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput};
use leasehold::LockClient;

const COMPARE_AND_DELETE: &str = r#"
if redis.call('get', KEYS[1]) == ARGV[1] then
    return redis.call('del', KEYS[1])
end
return 0
"#;

struct Raw {
    con: redis::Connection,
    unlock: redis::Script,
}

impl Raw {
    fn new(url: &str) -> Self {
        let client = redis::Client::open(url).unwrap();
        let con = client.get_connection().unwrap();
        Raw {
            con,
            unlock: redis::Script::new(COMPARE_AND_DELETE),
        }
    }

    fn pair(&mut self) {
        let ok: Option<String> = redis::cmd("SET")
            .arg("raw-floor")
            .arg("token-0123456789")
            .arg("NX")
            .arg("PX")
            .arg(30_000)
            .query(&mut self.con)
            .unwrap();
        assert!(ok.is_some(), "raw floor: the key was free");
        let deleted: i64 = self
            .unlock
            .key("raw-floor")
            .arg("token-0123456789")
            .invoke(&mut self.con)
            .unwrap();
        assert_eq!(deleted, 1);
    }
}

fn leasehold_pair(client: &LockClient) {
    let g = client.lock("leasehold-bench").unwrap();
    g.unlock().unwrap();
}

fn bench_uncontended(c: &mut Criterion, url: &str) {
    let mut raw = Raw::new(url);
    let client = LockClient::new(url).unwrap();
    let mut group = c.benchmark_group("uncontended");
    group.throughput(Throughput::Elements(1));
    group.bench_function("raw_set_nx_px+evalsha_cad", |b| b.iter(|| raw.pair()));
    group.bench_function("leasehold_lock+unlock", |b| {
        b.iter(|| leasehold_pair(&client))
    });
    group.finish();
}

/// Alternates blocks of raw and leasehold pairs and reports the median of the
/// per-block throughput ratios.
fn ratio(url: &str) {
    let mut raw = Raw::new(url);
    let client = LockClient::new(url).unwrap();
    const BLOCK: u32 = 2_000;
    const ROUNDS: usize = 7;
    let time = |f: &mut dyn FnMut()| {
        let t = Instant::now();
        for _ in 0..BLOCK {
            f();
        }
        t.elapsed()
    };
    let (mut ratios, mut raw_rates, mut lh_rates) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        let r = time(&mut || raw.pair());
        let l = time(&mut || leasehold_pair(&client));
        let rate = |d: Duration| f64::from(BLOCK) / d.as_secs_f64();
        raw_rates.push(rate(r));
        lh_rates.push(rate(l));
        ratios.push(rate(l) / rate(r));
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    println!(
        "uncontended lock+unlock: raw floor {:.0} pairs/s, leasehold {:.0} pairs/s, ratio {:.2} (median of {ROUNDS} interleaved blocks of {BLOCK})",
        median(&mut raw_rates),
        median(&mut lh_rates),
        median(&mut ratios)
    );
}

fn main() {
    let server = support::RedisServer::start();
    let url = server.url();
    let mut c = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .configure_from_args();
    bench_uncontended(&mut c, &url);
    c.final_summary();
    ratio(&url);
}
