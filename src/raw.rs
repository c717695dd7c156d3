//! The Redis protocol of one lock, with no threads: acquire, release and
//! renew as Lua scripts, wire-compatible with Redisson's `RLock`.
//!
//! Layout (the same as Redisson's, so Java and Rust services can guard one
//! resource):
//! - the lock key is a hash `{ "<client-uuid>:<thread-n>": hold_count }` with
//!   a `PEXPIRE` of the lease;
//! - when the count reaches zero the key is deleted and `0` is published on
//!   `redisson_lock__channel:{<key>}` (the braces keep the channel in the
//!   key's cluster slot).
//!
//! Every owner check happens inside the scripts; names and owners travel only
//! as `KEYS[]`/`ARGV[]`, never inside Lua source.

use std::time::Duration;

use redis::{ConnectionLike, RedisResult, Script};

/// The message published when a lock is freed (Redisson's `UNLOCK_MESSAGE`).
pub(crate) const UNLOCK_MESSAGE: &str = "0";

/// Acquire: free, or already ours → count + 1, set the lease, return nil.
/// Held by someone else → return its PTTL (-1 when it has no expiry).
const ACQUIRE: &str = r#"
if (redis.call('exists', KEYS[1]) == 0) or (redis.call('hexists', KEYS[1], ARGV[2]) == 1) then
    redis.call('hincrby', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    return nil
end
return redis.call('pttl', KEYS[1])
"#;

/// Release: not ours → nil. Ours → count − 1; still > 0 → refresh the lease,
/// return 0; at 0 → delete, publish the unlock message, return 1.
const RELEASE: &str = r#"
if redis.call('hexists', KEYS[1], ARGV[3]) == 0 then
    return nil
end
local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1)
if counter > 0 then
    redis.call('pexpire', KEYS[1], ARGV[2])
    return 0
end
redis.call('del', KEYS[1])
redis.call('publish', KEYS[2], ARGV[1])
return 1
"#;

/// Renew: extends the lease only while our owner field is there; 1 if
/// renewed, 0 if the lease is no longer ours. Sent in pipelined batches by the
/// renewal thread (see `renewal.rs`), hence a plain source string.
pub(crate) const RENEW: &str = r#"
if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
    redis.call('pexpire', KEYS[1], ARGV[1])
    return 1
end
return 0
"#;

/// What an acquire attempt found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Acquire {
    /// We hold it now (first hold or one more reentrant hold).
    Acquired,
    /// Someone else holds it; `ttl` is its remaining lease, `None` when the
    /// key has no expiry (not written by a lease lock).
    HeldElsewhere { ttl: Option<Duration> },
}

/// What a release did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Release {
    /// The hold count reached zero: the key is gone and waiters were told.
    Freed,
    /// One reentrant hold was given back; others of the same owner remain.
    StillHeld,
    /// Our owner field was not there: nothing was changed.
    NotHeld,
}

/// The scripts, hashed once per client.
pub(crate) struct Scripts {
    acquire: Script,
    release: Script,
}

impl Scripts {
    pub(crate) fn new() -> Self {
        Scripts {
            acquire: Script::new(ACQUIRE),
            release: Script::new(RELEASE),
        }
    }

    /// One `EVALSHA` (plus `SCRIPT LOAD` and a retry only when the server's
    /// script cache was flushed).
    pub(crate) fn acquire(
        &self,
        con: &mut dyn ConnectionLike,
        key: &str,
        owner: &str,
        lease: Duration,
    ) -> RedisResult<Acquire> {
        let ttl: Option<i64> = self
            .acquire
            .key(key)
            .arg(millis(lease))
            .arg(owner)
            .invoke(con)?;
        Ok(match ttl {
            None => Acquire::Acquired,
            Some(ms) if ms >= 0 => Acquire::HeldElsewhere {
                ttl: Some(Duration::from_millis(ms as u64)),
            },
            Some(_) => Acquire::HeldElsewhere { ttl: None },
        })
    }

    /// One `EVALSHA`; `lease` is what a remaining reentrant hold keeps.
    pub(crate) fn release(
        &self,
        con: &mut dyn ConnectionLike,
        key: &str,
        channel: &str,
        owner: &str,
        lease: Duration,
    ) -> RedisResult<Release> {
        let freed: Option<i64> = self
            .release
            .key(key)
            .key(channel)
            .arg(UNLOCK_MESSAGE)
            .arg(millis(lease))
            .arg(owner)
            .invoke(con)?;
        Ok(match freed {
            None => Release::NotHeld,
            Some(0) => Release::StillHeld,
            Some(_) => Release::Freed,
        })
    }
}

/// The unlock channel of a lock key (Redisson's `redisson_lock__channel:{name}`).
pub(crate) fn channel_name(key: &str) -> String {
    format!("redisson_lock__channel:{{{key}}}")
}

/// Milliseconds for `PEXPIRE`, at least 1 (0 would delete the key at once).
fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channel_is_redisson_compatible() {
        assert_eq!(
            channel_name("order:pay"),
            "redisson_lock__channel:{order:pay}"
        );
    }

    #[test]
    fn millis_never_zero() {
        assert_eq!(millis(Duration::from_micros(10)), 1);
        assert_eq!(millis(Duration::from_secs(30)), 30_000);
        assert_eq!(millis(Duration::MAX), u64::MAX);
    }
}
