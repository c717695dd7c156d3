//! The renewal of a lease, as the renewal thread sends it in pipelined
//! batches: the script ([`RENEW`]), one call of it per lease
//! ([`renew_call`]), what its answer means ([`renewed`]), and the command
//! that loads it at the head of every batch ([`load`]).

use std::sync::LazyLock;
use std::time::Duration;

use redis::{Cmd, Script, ToRedisArgs, Value};

use super::millis;

/// Renew: extends the lease only while our owner field is there; 1 if
/// renewed, 0 if the lease is no longer ours. A renewal only lengthens:
/// another guard of the owner (a re-entry with an explicit lease) may count
/// on a longer one.
///
/// A read hold of a read/write lock passes its timeout key prefix as
/// `KEYS[2]`: its own timeout keys are extended (not other readers' — a
/// crashed reader's hold must run out), it is lost when none of them is left,
/// and the hash's expiry is only ever lengthened. With `ARGV[3] == "k"`
/// (keep: a read hold with an explicit lease, `ARGV[1]` what is left of it)
/// the timeout keys are only checked, not extended, and the hash is kept
/// alive at least that long — another client (Redisson ≥ 4.4's read
/// renewal) may have set it shorter.
///
/// Semaphore permits (`ARGV[3] == "p"`): `KEYS[1]` is the lease table,
/// `ARGV[2]` the permits' ids (16 bytes each); all of them get the lease
/// `ARGV[1]` from now (the server's clock) while every one is still there
/// and has not expired — an expired permit is never revived (any script may
/// have counted it back already); otherwise 0.
///
/// A scheduled job's lock (`ARGV[3] == "j"`, ShedLock's layout): `KEYS[1]`
/// is a string whose value is the run's (`ARGV[2]`); while it is, its
/// expiry is lengthened to at least `ARGV[1]` (ShedLock's keep-alive
/// extension, owner-checked); otherwise 0.
pub(crate) const RENEW: &str = concat!(
    super::keep_fn!(),
    r#"
if ARGV[3] == 'j' then
    if redis.call('type', KEYS[1]).ok ~= 'string' or redis.call('get', KEYS[1]) ~= ARGV[2] then
        return 0
    end
    return ttl_at_least(KEYS[1], ARGV[1])
end
if ARGV[3] == 'p' then
    local clock = redis.call('time')
    local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
    for i = 1, #ARGV[2] - 15, 16 do
        local score = redis.call('zscore', KEYS[1], string.sub(ARGV[2], i, i + 15))
        if not score or tonumber(score) <= now then
            return 0
        end
    end
    for i = 1, #ARGV[2] - 15, 16 do
        redis.call('zadd', KEYS[1], 'xx', now + tonumber(ARGV[1]), string.sub(ARGV[2], i, i + 15))
    end
    return 1
end
if redis.call('hexists', KEYS[1], ARGV[2]) == 0 then
    return 0
end
if KEYS[2] then
    local alive = 0
    for i = tonumber(redis.call('hget', KEYS[1], ARGV[2])), 1, -1 do
        if ARGV[3] == 'k' then
            if redis.call('pttl', KEYS[2] .. ':' .. i) > 0 then
                alive = alive + 1
            end
        else
            alive = alive + ttl_at_least(KEYS[2] .. ':' .. i, ARGV[1])
        end
    end
    if alive == 0 then
        return 0
    end
    local ttl = redis.call('pttl', KEYS[1])
    redis.call('pexpire', KEYS[1], math.max(ttl, tonumber(ARGV[1])))
    return 1
end
ttl_at_least(KEYS[1], ARGV[1])
return 1
"#
);

/// The SHA1 of [`RENEW`], hashed once.
static RENEW_SHA: LazyLock<String> = LazyLock::new(|| Script::new(RENEW).get_hash().to_owned());

/// `SCRIPT LOAD` of [`RENEW`], for the head of a batch (a pipeline does not
/// reload a flushed script cache by itself).
pub(crate) fn load() -> Cmd {
    let mut cmd = redis::cmd("SCRIPT");
    cmd.arg("LOAD").arg(RENEW);
    cmd
}

/// The renewal of `owner`'s lease on `key` to `lease` from now. A read hold
/// passes its timeout key prefix (`timeouts`); a read hold with an explicit
/// lease passes what is left of it (`keep`): its timeout keys are only
/// checked and the shared hash kept alive that long.
pub(crate) fn renew_call(
    key: &str,
    owner: &str,
    lease: Duration,
    timeouts: Option<&str>,
    keep: Option<Duration>,
) -> Cmd {
    let numkeys = 1 + usize::from(timeouts.is_some());
    let ms = millis(keep.unwrap_or(lease));
    evalsha(numkeys, (key, timeouts, ms, owner, keep.map(|_| "k")))
}

/// The renewal of semaphore permits `ids` (16 bytes each) in the lease
/// table `timeouts` to `lease` from now.
pub(crate) fn renew_permits_call(timeouts: &str, ids: &[u8], lease: Duration) -> Cmd {
    evalsha(1, (timeouts, millis(lease), ids, "p"))
}

/// The renewal of a scheduled job's lock `key` held with `value` to
/// `lease` from now.
pub(crate) fn renew_job_call(key: &str, value: &str, lease: Duration) -> Cmd {
    evalsha(1, (key, millis(lease), value, "j"))
}

/// `EVALSHA` of [`RENEW`] on `numkeys` keys.
fn evalsha(numkeys: usize, keys_and_args: impl ToRedisArgs) -> Cmd {
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(RENEW_SHA.as_str()).arg(numkeys).arg(keys_and_args);
    cmd
}

/// Whether a renewal's answer says the lease is still ours.
pub(crate) fn renewed(answer: &Value) -> bool {
    matches!(answer, Value::Int(1))
}
