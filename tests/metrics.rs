//! The counters (feature `metrics`) through a recorder of this test's own,
//! as an application installs Prometheus's: every hold's attempts,
//! acquisitions, busy ends, losses and held time by kind, and a scheduled
//! job's by its name.

mod support;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use leasehold::LockClient;
use metrics::{
    Counter, CounterFn, Gauge, Histogram, HistogramFn, Key, KeyName, Metadata, Recorder,
    SharedString, Unit,
};
use support::RedisServer;

/// Every counter and histogram by `name{label=value,…}`.
#[derive(Default)]
struct Recorded {
    counters: Mutex<HashMap<String, Arc<Count>>>,
    histograms: Mutex<HashMap<String, Arc<Samples>>>,
}

#[derive(Default)]
struct Count(AtomicU64);

impl CounterFn for Count {
    fn increment(&self, n: u64) {
        self.0.fetch_add(n, Ordering::SeqCst);
    }
    fn absolute(&self, n: u64) {
        self.0.store(n, Ordering::SeqCst);
    }
}

#[derive(Default)]
struct Samples(Mutex<Vec<f64>>);

impl HistogramFn for Samples {
    fn record(&self, v: f64) {
        self.0.lock().unwrap().push(v);
    }
}

fn id(key: &Key) -> String {
    let labels: Vec<String> = key
        .labels()
        .map(|l| format!("{}={}", l.key(), l.value()))
        .collect();
    format!("{}{{{}}}", key.name(), labels.join(","))
}

struct Rec(Arc<Recorded>);

impl Recorder for Rec {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        let mut all = self.0.counters.lock().unwrap();
        Counter::from_arc(Arc::clone(all.entry(id(key)).or_default()))
    }
    fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::noop()
    }
    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        let mut all = self.0.histograms.lock().unwrap();
        Histogram::from_arc(Arc::clone(all.entry(id(key)).or_default()))
    }
}

impl Recorded {
    fn count(&self, id: &str) -> u64 {
        let all = self.counters.lock().unwrap();
        all.get(id).map_or(0, |c| c.0.load(Ordering::SeqCst))
    }
    fn samples(&self, id: &str) -> Vec<f64> {
        let all = self.histograms.lock().unwrap();
        all.get(id)
            .map_or(Vec::new(), |h| h.0.lock().unwrap().clone())
    }
}

#[test]
fn holds_and_jobs_are_counted_for_a_dashboard() {
    let recorded = Arc::new(Recorded::default());
    metrics::set_global_recorder(Rec(Arc::clone(&recorded))).unwrap();
    let server = RedisServer::start();
    let client = LockClient::builder(&server.url())
        .socket_timeout(Duration::from_millis(800))
        .connect()
        .unwrap();
    let other = LockClient::connect(&server.url()).unwrap();

    let held = client.lock("a").unwrap();
    std::thread::sleep(Duration::from_millis(50));
    assert!(other.try_lock("a").unwrap().is_none());
    drop(held);
    let fair = client.fair_lock("f").unwrap();
    drop(fair);
    assert_eq!(
        recorded.count("leasehold_lock_attempts_total{kind=plain}"),
        2
    );
    assert_eq!(
        recorded.count("leasehold_lock_acquired_total{kind=plain}"),
        1
    );
    assert_eq!(recorded.count("leasehold_lock_busy_total{kind=plain}"), 1);
    assert_eq!(
        recorded.count("leasehold_lock_acquired_total{kind=fair}"),
        1
    );
    let plain = recorded.samples("leasehold_lock_held_seconds{kind=plain}");
    assert!(plain.len() == 1 && plain[0] >= 0.05, "{plain:?}");

    // A Redlock (one node here): its acquisitions and held time too, not
    // only its losses.
    let redlock = leasehold::Redlock::new(&[server.url()]).unwrap();
    let first = redlock.lock("r").unwrap();
    assert!(redlock.try_lock("r").unwrap().is_none());
    std::thread::sleep(Duration::from_millis(30));
    first.unlock().unwrap();
    drop(redlock.lock("r").unwrap());
    assert_eq!(
        recorded.count("leasehold_lock_attempts_total{kind=redlock}"),
        3
    );
    assert_eq!(
        recorded.count("leasehold_lock_acquired_total{kind=redlock}"),
        2
    );
    assert_eq!(recorded.count("leasehold_lock_busy_total{kind=redlock}"), 1);
    let held = recorded.samples("leasehold_lock_held_seconds{kind=redlock}");
    assert!(held.len() == 2 && held[0] >= 0.03, "{held:?}");

    let sem = client.semaphore("s");
    sem.set_permits(1).unwrap();
    drop(sem.acquire().unwrap());
    assert_eq!(
        recorded.count("leasehold_lock_acquired_total{kind=permits}"),
        1
    );

    // A lease lost: removed by hand, found by the renewal.
    let lost = client.lock_owned("gone").unwrap();
    let mut con = server.connection();
    let _: () = redis::Commands::del(&mut con, "gone").unwrap();
    let short = client.job("j").lock_at_most_for(Duration::from_secs(2));
    let job = short.try_lock().unwrap().expect("free");
    let _: () = redis::Commands::del(&mut con, "job-lock:default:j").unwrap();
    assert!(job.lost().wait_timeout(Duration::from_secs(10)).is_some());
    assert!(job.unlock().is_err());
    drop(lost);
    assert_eq!(recorded.count("leasehold_lock_lost_total{kind=job}"), 1);
    assert_eq!(recorded.count("leasehold_job_lost_total{job=j}"), 1);

    // A job: run, skipped, and its held time.
    let report = client.job("report");
    let ran = report.run(|| {
        assert!(other.job("report").run(|| ()).unwrap().is_skipped());
        std::thread::sleep(Duration::from_millis(30));
    });
    assert!(ran.unwrap().ran().is_some());
    assert_eq!(
        recorded.count("leasehold_job_attempts_total{job=report}"),
        2
    );
    assert_eq!(
        recorded.count("leasehold_job_acquired_total{job=report}"),
        1
    );
    assert_eq!(recorded.count("leasehold_job_skipped_total{job=report}"), 1);
    let held = recorded.samples("leasehold_job_held_seconds{job=report}");
    assert!(held.len() == 1 && held[0] >= 0.03, "{held:?}");
}
