//! R1, the async face against the best Rust peer in that peer's own shape
//! (built with the tests package's `peers` feature): a thread that enters
//! its own current-thread tokio runtime for each call (`block_on`), as
//! rslock's users on threads run it. rslock's pair (`LockManager::lock` +
//! `unlock`: `SET NX PX`, then a compare-and-delete script, on the `redis`
//! crate's multiplexed connection) beside leasehold's async pair and its
//! blocking pair, in alternating blocks on one server, each with what
//! Redis spent on it (`INFO cpu`) — where the time of a pair goes. And
//! the ceiling of any client that keeps Redisson's layout (a hash with a
//! hold count, a line of waiters beside it, the unlock message): the least
//! two scripts of that layout can do uncontended (`EXISTS` + `HSET` +
//! `PEXPIRE`; `HDEL` + `LPOP` + `PUBLISH`), sent as rslock sends (the
//! `redis` crate's multiplexed connection, same runtime) — against
//! rslock's `SET NX PX`, a native command.

use std::time::{Duration, Instant};

use leasehold::LockClient;

use crate::measure::redis_cpu_us;

/// One side of R1: pairs/s (median block), Redis CPU µs per pair.
pub(crate) struct Side {
    pub(crate) rate: f64,
    pub(crate) redis_us: f64,
}

pub(crate) struct Peer {
    pub(crate) rslock: Side,
    pub(crate) layout: Side,
    pub(crate) lh_async: Side,
    pub(crate) lh_blocking: Side,
    /// Medians of the per-block ratios to rslock's rate.
    pub(crate) async_ratio: f64,
    pub(crate) blocking_ratio: f64,
    pub(crate) layout_ratio: f64,
}

/// The least a lock in Redisson's layout can send: acquire when neither
/// the lock nor a line exists, release and tell whoever listens.
const LAYOUT_ACQUIRE: &str = r#"
if redis.call('exists', KEYS[1], KEYS[2]) == 0 then
    redis.call('hset', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    return nil
end
return redis.call('pttl', KEYS[1])
"#;
const LAYOUT_RELEASE: &str = r#"
if redis.call('hdel', KEYS[1], ARGV[1]) == 0 then
    return nil
end
if not redis.call('lpop', KEYS[2]) then
    redis.call('publish', KEYS[3], '0')
end
return 1
"#;

/// R1: blocks of 1,000 pairs of each, in turn, for `secs` (5 rounds at
/// least).
pub(crate) fn r1(url: &str, secs: f64) -> Peer {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let manager = rslock::LockManager::new(vec![url.to_owned()]);
    let client = LockClient::new(url).unwrap();
    let tasks = client.to_async();
    let mut layout = rt
        .block_on(
            redis::Client::open(url)
                .unwrap()
                .get_multiplexed_async_connection(),
        )
        .unwrap();
    let (acquire, release) = (
        redis::Script::new(LAYOUT_ACQUIRE),
        redis::Script::new(LAYOUT_RELEASE),
    );
    let owner = "00000000-0000-4000-8000-000000000000:1";
    const BLOCK: usize = 1_000;
    const TTL: Duration = Duration::from_secs(30);
    // Each block: pairs/s and Redis's CPU per pair.
    let block = |run: &mut dyn FnMut()| {
        let cpu = redis_cpu_us(url);
        let t = Instant::now();
        for _ in 0..BLOCK {
            run();
        }
        let rate = BLOCK as f64 / t.elapsed().as_secs_f64();
        (rate, (redis_cpu_us(url) - cpu) / BLOCK as f64)
    };
    let mut rounds: Vec<[(f64, f64); 4]> = Vec::new();
    let until = Instant::now() + Duration::from_secs_f64(secs);
    while rounds.len() < 5 || Instant::now() < until {
        let peer = block(&mut || {
            rt.block_on(async {
                let lock = manager.lock("r1-rslock", TTL).await.unwrap();
                manager.unlock(&lock).await;
            })
        });
        let asynch = block(&mut || {
            rt.block_on(async {
                let guard = tasks.lock("r1-async").await.unwrap();
                guard.unlock().await.unwrap();
            })
        });
        let blocking = block(&mut || client.lock("r1-blocking").unwrap().unlock().unwrap());
        let floor = block(&mut || {
            rt.block_on(async {
                let (key, line, channel) = ("r1-layout", "r1-layout:line", "r1-layout:channel");
                let mut call = acquire.key(key);
                call.key(line).arg(30_000).arg(owner);
                let held: Option<i64> = call.invoke_async(&mut layout).await.unwrap();
                assert!(held.is_none(), "the layout's floor: the key was free");
                let mut call = release.key(key);
                call.key(line).key(channel).arg(owner);
                let freed: i64 = call.invoke_async(&mut layout).await.unwrap();
                assert_eq!(freed, 1);
            })
        });
        rounds.push([peer, asynch, blocking, floor]);
    }
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let side = |i: usize| Side {
        rate: median(rounds.iter().map(|r| r[i].0).collect()),
        redis_us: median(rounds.iter().map(|r| r[i].1).collect()),
    };
    let ratio = |i: usize| median(rounds.iter().map(|r| r[i].0 / r[0].0).collect());
    Peer {
        async_ratio: ratio(1),
        blocking_ratio: ratio(2),
        layout_ratio: ratio(3),
        rslock: side(0),
        layout: side(3),
        lh_async: side(1),
        lh_blocking: side(2),
    }
}

/// A row of the table: (figure, rslock, leasehold, ratio, target, met).
type Row = (String, String, String, String, &'static str, Option<bool>);

/// R1's rows for the table.
pub(crate) fn rows(p: &Peer) -> Vec<Row> {
    let cpu = |s: &Side| format!("{:.1}", s.redis_us);
    vec![
        (
            "R1 async pair, a thread's own current-thread runtime per call (floor: rslock's pair)"
                .into(),
            format!("{:.0}", p.rslock.rate),
            format!("{:.0}", p.lh_async.rate),
            format!("{:.2}", p.async_ratio),
            "≥ 1.0",
            Some(p.async_ratio >= 1.0),
        ),
        (
            "R1 blocking pair (floor: rslock's pair, same blocks)".into(),
            format!("{:.0}", p.rslock.rate),
            format!("{:.0}", p.lh_blocking.rate),
            format!("{:.2}", p.blocking_ratio),
            "",
            None,
        ),
        (
            "R1 Redis CPU µs per pair: rslock / leasehold async (blocking)".into(),
            cpu(&p.rslock),
            format!("{} ({})", cpu(&p.lh_async), cpu(&p.lh_blocking)),
            format!("{:.2}", p.lh_async.redis_us / p.rslock.redis_us),
            "",
            None,
        ),
        (
            "R1 ceiling of Redisson's layout: its least scripts on rslock's connection (floor: rslock's pair; Redis CPU µs per pair in brackets)".into(),
            format!("{:.0} ({})", p.rslock.rate, cpu(&p.rslock)),
            format!("{:.0} ({})", p.layout.rate, cpu(&p.layout)),
            format!("{:.2}", p.layout_ratio),
            "",
            None,
        ),
    ]
}
