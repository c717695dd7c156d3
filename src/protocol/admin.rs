//! What an operator sends, with no threads: the forced release of a lock of
//! any kind (Redisson's `forceUnlock`), which tells that kind's waiters.

use redis::{ConnectionLike, RedisResult, Script};

use super::plain::companion_fn;
use super::PubSub;
use crate::names::{channel_name, line_key, queue_key, rw_channel};

/// Force unlock: KEYS lock, unlock channel, read/write channel, fair queue,
/// line of waiting clients. Deletes the lock whoever holds it; 0 when there
/// was none. Then wakes its waiters as that kind's release does: a
/// read/write lock (the hash has a `mode`) wakes every waiter (`1`), any
/// other publishes `0` on the unlock channel (Redisson's waiters, and
/// leasehold's of a Redisson holder), on the own channel of the fair
/// queue's first waiter, and on the grant channel of every client waiting
/// in line (the first live place takes it; it is rare, and the line holds a
/// place per client). A holder's guard learns of it at its next renewal
/// (its owner is gone).
pub(super) const FORCE_UNLOCK: &str = concat!(
    companion_fn!(),
    r#"
local mode = redis.call('hget', KEYS[1], 'mode')
if redis.call('del', KEYS[1]) == 0 then
    return 0
end
if mode then
    redis.call('publish', KEYS[3], '1')
    return 1
end
local next = redis.call('lindex', KEYS[4], 0)
if next then
    redis.call('publish', KEYS[2] .. ':' .. next, '0')
end
local grants = companion('leasehold_grant') .. ':'
for _, place in ipairs(redis.call('lrange', KEYS[5], 0, -1)) do
    local client = string.match(place, '^(.*):')
    if client then
        redis.call('publish', grants .. client, '0')
    end
end
redis.call('publish', KEYS[2], '0')
return 1
"#
);

/// The operator's scripts.
pub(crate) struct AdminScripts {
    force_unlock: Script,
}

impl AdminScripts {
    pub(crate) fn new(pubsub: PubSub) -> Self {
        AdminScripts {
            force_unlock: pubsub.script(FORCE_UNLOCK),
        }
    }

    /// Deletes lock `key` of any kind and wakes its waiters; false when
    /// there was no lock.
    pub(crate) fn force_unlock(
        &self,
        con: &mut dyn ConnectionLike,
        key: &str,
    ) -> RedisResult<bool> {
        let freed: i64 = self
            .force_unlock
            .key(key)
            .key(channel_name(key))
            .key(rw_channel(key))
            .key(queue_key(key))
            .key(line_key(key))
            .invoke(con)?;
        Ok(freed == 1)
    }
}
