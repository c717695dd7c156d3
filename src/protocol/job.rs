//! A scheduled job's lock in ShedLock's Redis layout: the key
//! (`<prefix>:<env>:<name>`), the value (`ADDED:<ISO-8601>@<host>:<uuid>`),
//! the acquire (`SET NX PX` inside a script that also counts the run or the
//! skip), the owner-checked end (the rest of `lock_at_least_for` as the
//! key's expiry, or the key deleted — ShedLock's `safeUpdate` scripts) and
//! the job's run history beside it. Pure: scripts, names, messages.

use std::sync::LazyLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis::{RedisResult, Value};

use super::{millis, unexpected, Call, Lua, PubSub};

/// ShedLock's default key prefix (`InternalRedisLockProvider.DEFAULT_KEY_PREFIX`).
pub(crate) const DEFAULT_PREFIX: &str = "job-lock";

/// ShedLock's default environment (`InternalRedisLockProvider.ENV_DEFAULT`).
pub(crate) const DEFAULT_ENV: &str = "default";

/// Take the job's lock: ShedLock's `SET <key> <value> NX PX <lock_at_most_for>`,
/// and in the same call the run history (`KEYS[2]`): the run (when by the
/// server's clock, on which host, its value) or the skip counted. 1 when
/// taken; when busy, the holder's value (0 when the key is no string — not
/// a job's lock); -1, untouched, when the history key is no hash.
const ACQUIRE: &str = r#"
local history = redis.call('type', KEYS[2]).ok
if history ~= 'none' and history ~= 'hash' then
    return -1
end
if redis.call('set', KEYS[1], ARGV[1], 'nx', 'px', ARGV[2]) then
    local t = redis.call('time')
    local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    redis.call('hset', KEYS[2], 'last_started', now, 'last_host', ARGV[3],
        'last_value', ARGV[1], 'last_ended', '', 'last_duration', '')
    redis.call('hincrby', KEYS[2], 'runs', 1)
    return 1
end
redis.call('hincrby', KEYS[2], 'skipped', 1)
if redis.call('type', KEYS[1]).ok == 'string' then
    return redis.call('get', KEYS[1])
end
return 0
"#;

/// End the job's hold, owner-checked (ShedLock's `safeUpdate`): with
/// `ARGV[2]` > 0 ms of `lock_at_least_for` left, that becomes the key's
/// expiry; else the key is deleted. The history gets the run's end and
/// length (server's clock) when it is still this run's, and a loss counted
/// when the key was no longer ours — unless `ARGV[3]` is `u` (the undo of
/// a call whose reply was lost: the lock only). 1 when it was ours, 0 when
/// not.
const RELEASE: &str = r#"
local ours = redis.call('type', KEYS[1]).ok == 'string'
    and redis.call('get', KEYS[1]) == ARGV[1]
if ours then
    if tonumber(ARGV[2]) > 0 then
        redis.call('pexpire', KEYS[1], ARGV[2])
    else
        redis.call('del', KEYS[1])
    end
end
if ARGV[3] == 'u' or redis.call('type', KEYS[2]).ok ~= 'hash' then
    return ours and 1 or 0
end
if not ours then
    redis.call('hincrby', KEYS[2], 'lost', 1)
end
if redis.call('hget', KEYS[2], 'last_value') == ARGV[1] then
    local t = redis.call('time')
    local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    local started = tonumber(redis.call('hget', KEYS[2], 'last_started')) or now
    redis.call('hset', KEYS[2], 'last_ended', now, 'last_duration', now - started)
end
if ours then
    return 1
end
return 0
"#;

/// The job scripts (no pub/sub: nobody waits on a job's lock).
pub(crate) struct JobScripts {
    acquire: Lua,
    release: Lua,
}

/// The scripts, made once.
pub(crate) fn scripts() -> &'static JobScripts {
    static SCRIPTS: LazyLock<JobScripts> = LazyLock::new(|| JobScripts {
        acquire: PubSub::Classic.lua(ACQUIRE),
        release: PubSub::Classic.lua(RELEASE),
    });
    &SCRIPTS
}

/// The scripts as sent, for the protocol simulator.
#[cfg(feature = "simulation")]
pub(crate) fn simulated() -> [(&'static str, &'static str); 2] {
    [("job acquire", ACQUIRE), ("job release", RELEASE)]
}

impl JobScripts {
    /// The acquire of `key` with `value` for `at_most`, its run history in
    /// `history`, by `host`.
    pub(crate) fn acquire_call(
        &'static self,
        key: &str,
        history: &str,
        value: &str,
        at_most: Duration,
        host: &str,
    ) -> Call {
        (self.acquire).call(2, (key, history, value, millis(at_most), host))
    }

    /// The owner-checked end of `value`'s hold of `key`, keeping it `keep`
    /// longer (zero: deleted); `undo`: of a call whose reply was lost (the
    /// history is left alone).
    pub(crate) fn release_call(
        &'static self,
        key: &str,
        history: &str,
        value: &str,
        keep: Duration,
        undo: bool,
    ) -> Call {
        let keep = if keep.is_zero() { 0 } else { millis(keep) };
        let mode = if undo { "u" } else { "" };
        (self.release).call(2, (key, history, value, keep, mode))
    }
}

/// What an acquire's reply says.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Acquired {
    /// Taken.
    Taken,
    /// Held by the value given (another run's, of any process or library).
    Busy(String),
    /// The key holds something that is no job's lock.
    NotAJobLock,
    /// The history key holds something else: nothing was done.
    BadHistory,
}

/// Reads an acquire's reply.
pub(crate) fn acquire_reply(reply: Value) -> RedisResult<Acquired> {
    match reply {
        Value::Int(1) => Ok(Acquired::Taken),
        Value::Int(0) => Ok(Acquired::NotAJobLock),
        Value::Int(-1) => Ok(Acquired::BadHistory),
        Value::BulkString(v) => Ok(Acquired::Busy(String::from_utf8_lossy(&v).into_owned())),
        other => Err(unexpected("job acquire", &other)),
    }
}

/// Reads a release's reply: whether the hold was still ours.
pub(crate) fn release_reply(reply: Value) -> RedisResult<bool> {
    match reply {
        Value::Int(n) => Ok(n == 1),
        other => Err(unexpected("job release", &other)),
    }
}

/// The key of job `name`: ShedLock's `<prefix>:<env>:<name>` (after the
/// client's own key prefix, as every key of the client).
pub(crate) fn job_key(client_prefix: &str, prefix: &str, env: &str, name: &str) -> String {
    format!("{client_prefix}{prefix}:{env}:{name}")
}

/// The run history of the job whose key is `key`, in its cluster slot.
pub(crate) fn history_key(key: &str) -> String {
    crate::names::suffix_name(key, "leasehold_job_history")
}

/// A run's value, as ShedLock writes it: `ADDED:<now, ISO-8601 with
/// milliseconds>@<host>:<uuid>`.
pub(crate) fn value(now: SystemTime, host: &str, id: &uuid::Uuid) -> String {
    format!("ADDED:{}@{host}:{id}", iso_millis(now))
}

/// The host of a run's value (`ADDED:<time>@<host>:<uuid>`), when it is
/// one; a value of another shape is shown whole by its callers.
pub(crate) fn value_host(value: &str) -> Option<&str> {
    let rest = value.strip_prefix("ADDED:")?;
    let (_, at) = rest.split_once('@')?;
    // The uuid is the last 36 characters after the last ':'.
    let (host, id) = at.rsplit_once(':')?;
    (id.len() == 36).then_some(host)
}

/// `now` as Java's `Instant` with three fractional digits prints it in UTC
/// (ShedLock's `Utils.toIsoString`): `2018-12-07T12:30:37.819Z`.
pub(crate) fn iso_millis(now: SystemTime) -> String {
    let since = now.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = since.as_secs();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days as i64);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60,
        since.subsec_millis()
    )
}

/// The calendar date `days` after 1970-01-01 (Howard Hinnant's algorithm).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_print_as_shedlocks_iso_instant_with_milliseconds() {
        let at = |ms: u64| iso_millis(UNIX_EPOCH + Duration::from_millis(ms));
        assert_eq!(at(0), "1970-01-01T00:00:00.000Z");
        // 2018-12-07T12:30:37.819Z, ShedLock's own example.
        assert_eq!(at(1_544_185_837_819), "2018-12-07T12:30:37.819Z");
        // A leap day, and the end of a year.
        assert_eq!(at(1_709_208_000_005), "2024-02-29T12:00:00.005Z");
        assert_eq!(at(1_798_761_599_999), "2026-12-31T23:59:59.999Z");
    }

    #[test]
    fn a_value_names_its_host_and_other_shapes_do_not() {
        let id = uuid::Uuid::nil();
        let v = value(UNIX_EPOCH, "web-1:x", &id);
        assert_eq!(
            v,
            "ADDED:1970-01-01T00:00:00.000Z@web-1:x:00000000-0000-0000-0000-000000000000"
        );
        assert_eq!(value_host(&v), Some("web-1:x"));
        assert_eq!(value_host("some other lock"), None);
        assert_eq!(
            job_key("app:", "job-lock", "default", "report"),
            "app:job-lock:default:report"
        );
        assert_eq!(
            history_key("job-lock:default:report"),
            "{job-lock:default:report}:leasehold_job_history"
        );
    }
}
