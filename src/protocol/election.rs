//! An election's record of when a term began, beside its lock (the
//! lock itself is a fenced plain lock): written by the new leader only
//! over an older term's, so a leader paused between winning and writing
//! cannot overwrite a newer term's record. Pure: the script and names.

use std::sync::LazyLock;

use super::{Call, Lua, PubSub};

/// `KEYS[1]` the record (a hash of `term`, `since_ms`); `ARGV` the term and
/// when it began (ms since the epoch, the leader's clock). 1 when written,
/// 0 when a newer term's record is there.
const RECORD: &str = r#"
local seen = tonumber(redis.call('hget', KEYS[1], 'term') or '0') or 0
if tonumber(ARGV[1]) <= seen then
    return 0
end
redis.call('hset', KEYS[1], 'term', ARGV[1], 'since_ms', ARGV[2])
return 1
"#;

/// The record of the election whose lock is `lock_key`, in its slot.
pub(crate) fn record_key(lock_key: &str) -> String {
    crate::names::suffix_name(lock_key, "leasehold_leader")
}

/// The call that records term `term`, begun at `since_ms`, in `record`.
pub(crate) fn record_call(record: &str, term: u64, since_ms: u64) -> Call {
    static SCRIPT: LazyLock<Lua> = LazyLock::new(|| PubSub::Classic.lua(RECORD));
    LazyLock::force(&SCRIPT).call(1, (record, term, since_ms))
}
