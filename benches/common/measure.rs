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

pub(crate) fn commandstats(url: &str) -> HashMap<String, u64> {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut con(url))
        .unwrap();
    crate::support::parse_command_calls(&info)
}

/// (client-sent, all incl. script calls) commands between two snapshots,
/// leaving out the `INFO` calls of the bench itself.
pub(crate) fn command_delta(
    before: &HashMap<String, u64>,
    after: &HashMap<String, u64>,
) -> (u64, u64) {
    let mut client = 0;
    let mut all = 0;
    for (name, n) in after {
        if name == "info" {
            continue;
        }
        let d = n - before.get(name).copied().unwrap_or(0);
        all += d;
        if CLIENT_COMMANDS.contains(&name.as_str()) {
            client += d;
        }
    }
    (client, all)
}
