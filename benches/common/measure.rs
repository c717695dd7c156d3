//! Measuring helpers of the `workloads` bench: the raw floor's scripts, the
//! clock, percentiles, and client commands counted from `INFO commandstats`.

use std::collections::HashMap;
use std::time::{SystemTime, UNIX_EPOCH};

pub(crate) const COMPARE_AND_DELETE: &str = r#"
if redis.call('get', KEYS[1]) == ARGV[1] then
    return redis.call('del', KEYS[1])
end
return 0
"#;

/// Commands a client sends itself; everything else in `INFO commandstats`
/// during a run was called from inside a script.
pub(crate) const CLIENT_COMMANDS: &[&str] = &[
    "evalsha",
    "eval",
    "set",
    "subscribe",
    "unsubscribe",
    "psubscribe",
    "punsubscribe",
    "ping",
    "script|load",
];

pub(crate) fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

pub(crate) fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i]
}

pub(crate) fn con(url: &str) -> redis::Connection {
    redis::Client::open(url).unwrap().get_connection().unwrap()
}

/// Per command: (calls, microseconds) from `INFO commandstats`.
pub(crate) fn commandstats(url: &str) -> HashMap<String, (u64, u64)> {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut con(url))
        .unwrap();
    info.lines()
        .filter_map(|line| {
            let (name, stats) = line.strip_prefix("cmdstat_")?.split_once(':')?;
            let field = |key: &str| {
                stats
                    .split(',')
                    .find_map(|kv| kv.strip_prefix(key)?.parse::<u64>().ok())
            };
            Some((name.to_owned(), (field("calls=")?, field("usec=")?)))
        })
        .collect()
}

/// The server process's CPU time so far, µs (`INFO cpu`: user + system, the
/// main thread and its I/O — everything Redis spends, network included).
pub(crate) fn redis_cpu_us(url: &str) -> f64 {
    let info: String = redis::cmd("INFO").arg("cpu").query(&mut con(url)).unwrap();
    let field = |key: &str| {
        info.lines()
            .find_map(|l| l.strip_prefix(key)?.trim().parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (field("used_cpu_user:") + field("used_cpu_sys:")) * 1e6
}

/// Between two snapshots, leaving out the bench's own `INFO` calls:
/// (client-sent commands, all commands incl. script calls, microseconds
/// Redis spent in the client-sent ones — a script's time includes the calls
/// inside it, so only those are summed). `client_sets`: the clients send
/// `SET` themselves (the raw floor); leasehold's clients never do, so a
/// `SET` then ran inside a script.
pub(crate) fn command_delta(
    before: &HashMap<String, (u64, u64)>,
    after: &HashMap<String, (u64, u64)>,
    client_sets: bool,
) -> (u64, u64, u64) {
    let (mut client, mut all, mut usec) = (0, 0, 0);
    for (name, (n, us)) in after {
        if name == "info" {
            continue;
        }
        let (n0, us0) = before.get(name).copied().unwrap_or((0, 0));
        all += n - n0;
        if CLIENT_COMMANDS.contains(&name.as_str()) && (client_sets || name != "set") {
            client += n - n0;
            usec += us - us0;
        }
    }
    (client, all, usec)
}
