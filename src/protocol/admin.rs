//! What an operator sends, with no threads: what a key is (a lock of any
//! kind, nothing, or something else — [`Shape`]), a lock's whole state read
//! at one moment ([`Read`]), and the forced release of a lock of any kind
//! (Redisson's `forceUnlock`), which tells that kind's waiters and refuses
//! to touch anything that is not a lock.

use redis::{ConnectionLike, RedisResult, Value};

use super::plain::companion_fn;
use super::{items, unexpected, Lua, PubSub, Scripts};
use crate::names::{channel_name, line_key, queue_key, rw_channel, token_key, writers_key};

/// The Lua functions `lock_owner(f)` — whether hash field `f` names a
/// lock owner (`<client-uuid>:<n>`, `<client-uuid>:<n>:write` — leasehold's
/// and Redisson's, whose `<n>` is a thread id — or leasehold's Redlock owner
/// `<client-uuid>:redlock-<n>`) — and `shape(key)`: `{'lock'}` when `key` is
/// a lock of any kind — a hash whose every field is a lock owner holding a
/// hold count, or a read/write lock's `mode` (`read`, `write`); `{'none'}`
/// when there is no key; and otherwise what it is: `{'type', <type>}` for a
/// key that is no hash, `{'field', <field>}` for a field that is no lock
/// owner, `{'count', <field>, <value>}` for an owner without a hold count;
/// and `not_a_lock(key)`: `shape(key)` behind the marker `'n'`, the reply
/// with which an acquire refuses a key that is not a lock
/// ([`shape_after_marker`] reads it). The one definition of a lock's
/// shape: the forced release and the operators' reads ([`SHAPE`]) call it,
/// and every kind's acquire (its owner check on the fields it reads
/// anyway, `shape` only once a key was found not to be a lock).
macro_rules! shape_fn {
    () => {
        r#"
-- A UUID and a colon, written out: built with `string.rep` it cost every
-- acquire about 0.5 µs of Redis's time on each call, used or not.
local owner_id = '^%x%x%x%x%x%x%x%x%-%x%x%x%x%-%x%x%x%x%-%x%x%x%x%-%x%x%x%x%x%x%x%x%x%x%x%x:'
local function lock_owner(f)
    return string.match(f, owner_id .. '%d+$') or string.match(f, owner_id .. '%d+:write$')
        or string.match(f, owner_id .. 'redlock%-%d+$')
end
local function shape(key)
    local t = redis.call('type', key)['ok']
    if t == 'none' then
        return {'none'}
    end
    if t ~= 'hash' then
        return {'type', t}
    end
    local fields = redis.call('hgetall', key)
    for i = 1, #fields, 2 do
        local f, v = fields[i], fields[i + 1]
        if f == 'mode' then
            if v ~= 'read' and v ~= 'write' then
                return {'count', f, v}
            end
        elseif not lock_owner(f) then
            return {'field', f}
        elseif not string.match(v, '^%d+$') then
            return {'count', f, v}
        end
    end
    return {'lock'}
end
local function not_a_lock(key)
    local s = shape(key)
    table.insert(s, 1, 'n')
    return s
end
"#
    };
}
pub(crate) use shape_fn;

/// What a key is, as the operators' calls see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Shape {
    /// No key: no lock held (waiters may still stand in its queues).
    None,
    /// A lock of some kind.
    Lock,
    /// Something else; what it is, in words (for [`Error::NotALock`]).
    ///
    /// [`Error::NotALock`]: crate::Error::NotALock
    Other(String),
}

/// What a key is: KEYS the key. See [`shape_fn!`].
pub(super) const SHAPE: &str = concat!(shape_fn!(), "return shape(KEYS[1])\n");

/// What an operator sees of a lock, in one script (one round trip, one
/// moment): KEYS lock, line of waiting clients, fair queue, waiting
/// writers, token counter. A lock (or no key): `{'lock', <HGETALL>,
/// <PTTL>, <the line>, <the fair queue>, <the waiting writers>, <the
/// token>}`; a string (a job's lock, or not): `{'string', <value>,
/// <PTTL>}`; anything else: its `shape`.
pub(super) const READ: &str = concat!(
    shape_fn!(),
    r#"
local what = shape(KEYS[1])
if what[1] == 'type' and what[2] == 'string' then
    return {'string', redis.call('get', KEYS[1]), redis.call('pttl', KEYS[1])}
end
if what[1] ~= 'lock' and what[1] ~= 'none' then
    return what
end
return {'lock', redis.call('hgetall', KEYS[1]), redis.call('pttl', KEYS[1]),
    redis.call('lrange', KEYS[2], 0, -1), redis.call('lrange', KEYS[3], 0, -1),
    redis.call('zrange', KEYS[4], 0, -1), redis.call('get', KEYS[5])}
"#
);

/// A lock's state as [`READ`] reads it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Read {
    /// A lock, or no key (nobody holds it; waiters may stand in line):
    /// the replies of `HGETALL`, `PTTL`, the line's `LRANGE`, the fair
    /// queue's, the waiting writers' `ZRANGE` and the token counter's
    /// `GET`, in that order.
    Lock(Vec<Value>),
    /// A string (a scheduled job's lock, or another string): its value
    /// and its `PTTL`.
    String(String, i64),
    /// Not a lock: what it is, in words.
    Other(String),
}

/// A value in what [`Shape::Other`] says, shortened to something a person
/// reads (a field of an application hash may be anything).
fn quoted(v: &Value) -> String {
    let text = match v {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        Value::SimpleString(s) => s.clone(),
        other => format!("{other:?}"),
    };
    let mut short: String = text.chars().take(60).collect();
    if short.len() < text.len() {
        short.push('…');
    }
    format!("{short:?}")
}

/// Reads a `shape(key)` reply.
fn shape_of(reply: &Value) -> RedisResult<Shape> {
    shape_in(items(reply), reply)
}

/// What an acquire's reply says when it is `not_a_lock(key)`'s (see
/// [`shape_fn!`]): the words of `shape(key)` after the marker `n`; `None`
/// for any other reply.
pub(crate) fn shape_after_marker(reply: &Value) -> Option<String> {
    let [Value::BulkString(n), words @ ..] = items(reply) else {
        return None;
    };
    (n == b"n").then(|| match shape_in(words, reply) {
        Ok(Shape::Other(what)) => what,
        // A key that changed between the acquire's check and its shape (it
        // cannot: one script) reads as a hash of that shape.
        Ok(Shape::Lock | Shape::None) | Err(_) => "not a lock".to_owned(),
    })
}

/// The words of a shape (`items`, of `reply`).
fn shape_in(items: &[Value], reply: &Value) -> RedisResult<Shape> {
    let word = |i: usize| match items.get(i) {
        Some(Value::BulkString(b)) => String::from_utf8_lossy(b).into_owned(),
        Some(Value::SimpleString(s)) => s.clone(),
        _ => String::new(),
    };
    Ok(match word(0).as_str() {
        "none" => Shape::None,
        "lock" => Shape::Lock,
        "type" => Shape::Other(format!("a {}", word(1))),
        "field" => Shape::Other(format!(
            "a hash with the field {}, which is no lock owner",
            items.get(1).map_or_else(String::new, quoted)
        )),
        "count" => Shape::Other(format!(
            "a hash whose field {} holds {}, which is no hold count",
            items.get(1).map_or_else(String::new, quoted),
            items.get(2).map_or_else(String::new, quoted)
        )),
        _ => return Err(unexpected("shape", reply)),
    })
}

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
///
/// Anything not shaped like a lock (see [`shape_fn!`]) is refused: its
/// `shape` is returned and nothing is changed.
pub(super) const FORCE_UNLOCK: &str = concat!(
    companion_fn!(),
    shape_fn!(),
    r#"
local what = shape(KEYS[1])
if what[1] ~= 'lock' and what[1] ~= 'none' then
    return what
end
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
-- The line's elements: `<until>|<client id>:<n>#…`.
for _, el in ipairs(redis.call('lrange', KEYS[5], 0, -1)) do
    local client = string.match(el, '|([^:]*):')
    if client then
        redis.call('publish', grants .. client, '0')
    end
end
redis.call('publish', KEYS[2], '0')
return 1
"#
);

/// What a forced release did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Forced {
    /// The lock was deleted and its waiters told.
    Freed,
    /// There was no lock.
    NotHeld,
    /// The key is not a lock (what it is): nothing was changed.
    NotALock(String),
}

/// The operator's scripts.
pub(crate) struct AdminScripts {
    force_unlock: Lua,
    shape: Lua,
    read: Lua,
}

impl AdminScripts {
    pub(crate) fn new(pubsub: PubSub) -> Self {
        AdminScripts {
            force_unlock: pubsub.lua(FORCE_UNLOCK),
            shape: pubsub.lua(SHAPE),
            read: pubsub.lua(READ),
        }
    }
}

impl Scripts {
    /// Deletes lock `key` of any kind and wakes its waiters (an operator's
    /// tool) — unless `key` is not a lock.
    pub(crate) fn force_unlock(
        &self,
        con: &mut dyn ConnectionLike,
        key: &str,
    ) -> RedisResult<Forced> {
        let keys = (key, channel_name(key), rw_channel(key));
        let reply =
            (self.admin.force_unlock).query(con, 5, (keys, queue_key(key), line_key(key)))?;
        Ok(match reply {
            Value::Int(1) => Forced::Freed,
            Value::Int(_) => Forced::NotHeld,
            other => match shape_of(&other)? {
                Shape::Other(what) => Forced::NotALock(what),
                _ => return Err(unexpected("force unlock", &other)),
            },
        })
    }

    /// What `key` is: a lock, nothing, or something else (an operator's
    /// read; one script, read only).
    pub(crate) fn shape(&self, con: &mut dyn ConnectionLike, key: &str) -> RedisResult<Shape> {
        shape_of(&self.admin.shape.query(con, 1, key)?)
    }

    /// Everything an operator sees of lock `key`, at one moment (one
    /// script, read only): see [`READ`].
    pub(crate) fn read(&self, con: &mut dyn ConnectionLike, key: &str) -> RedisResult<Read> {
        let keys = (key, line_key(key), queue_key(key), writers_key(key));
        let reply: Value = self.admin.read.query(con, 5, (keys, token_key(key)))?;
        let mut parts = items(&reply).iter();
        let read = match parts.next() {
            Some(Value::BulkString(w)) if w == b"lock" => Read::Lock(parts.cloned().collect()),
            Some(Value::BulkString(w)) if w == b"string" => match (parts.next(), parts.next()) {
                (Some(Value::BulkString(v)), Some(Value::Int(ttl))) => {
                    Read::String(String::from_utf8_lossy(v).into_owned(), *ttl)
                }
                _ => return Err(unexpected("read", &reply)),
            },
            _ => match shape_of(&reply)? {
                Shape::Other(what) => Read::Other(what),
                _ => return Err(unexpected("read", &reply)),
            },
        };
        Ok(read)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn what_a_key_is_reads_as_words() {
        let reply = |items: &[&str]| Value::Array(items.iter().map(|s| bulk(s)).collect());
        assert_eq!(shape_of(&reply(&["lock"])).unwrap(), Shape::Lock);
        assert_eq!(shape_of(&reply(&["none"])).unwrap(), Shape::None);
        assert_eq!(
            shape_of(&reply(&["type", "string"])).unwrap(),
            Shape::Other("a string".into())
        );
        let Shape::Other(what) = shape_of(&reply(&["field", "email"])).unwrap() else {
            panic!()
        };
        assert!(
            what.contains("\"email\"") && what.contains("no lock owner"),
            "{what}"
        );
        let long = "x".repeat(500);
        let Shape::Other(what) = shape_of(&reply(&["count", &long, "y"])).unwrap() else {
            panic!()
        };
        assert!(what.len() < 200, "{what}");
        assert!(shape_of(&Value::Int(1)).is_err());
        // A short reply is read, not indexed past its end.
        assert!(matches!(shape_of(&reply(&["field"])), Ok(Shape::Other(_))));
    }
}
