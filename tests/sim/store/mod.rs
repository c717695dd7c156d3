//! The simulator's Redis: an in-memory model of the commands leasehold's
//! scripts call, over a virtual clock. Each command keeps Redis's semantics
//! where the scripts can tell (replies, types, `WRONGTYPE`, a key that
//! expired is gone, an emptied hash/list/sorted set is deleted, a
//! non-positive `PEXPIRE` deletes); `sim::differential` checks it against
//! a real `redis-server` on random command sequences (the differential
//! test). The commands, by type:
//!
//! - keys: `DEL`, `EXISTS` (each name counted, repeats too), `TYPE`,
//!   `PEXPIRE` (`NX`/`XX`/`GT`/`LT` not used: refused), `PTTL`;
//! - strings: `GET`, `SET` (`NX`, `XX`, `PX`, `EX`, `KEEPTTL`), `PSETEX`,
//!   `INCRBY`, `DECRBY` (a value that is not an integer: an error);
//! - hashes: `HGET`, `HSET` (several pairs), `HDEL`, `HEXISTS`, `HINCRBY`,
//!   `HKEYS`, `HLEN`, `HGETALL`;
//! - lists: `LINDEX`, `LPOP` (no count), `LPUSH`, `RPUSH`, `LREM`,
//!   `LRANGE`, `LLEN`, `LPOS` (no options), `LSET`;
//! - sorted sets: `ZADD` (`NX`/`XX`), `ZINCRBY`, `ZREM`, `ZSCORE`, `ZRANGE` (by rank,
//!   `WITHSCORES`), `ZRANGEBYSCORE` (`(`, `-inf`/`+inf`, `WITHSCORES`,
//!   `LIMIT`), `ZREMRANGEBYSCORE`, `ZCARD`;
//! - server: `TIME` (the virtual clock), `PUBLISH`/`SPUBLISH` (recorded; the
//!   reply counts the channel's subscribers), `PUBSUB NUMSUB` /
//!   `SHARDNUMSUB` (subscribers the simulation declares).
//!
//! Anything else is an error reply naming the command, so a script that
//! starts calling a new command fails the simulation until it is modelled.

use std::collections::{BTreeMap, HashMap, VecDeque};

/// A reply, as RESP2 has them.
#[derive(Clone, Debug, PartialEq)]
pub enum Reply {
    Int(i64),
    Bulk(Vec<u8>),
    Nil,
    Status(String),
    Error(String),
    Array(Vec<Reply>),
}

impl Reply {
    fn bulk(s: impl AsRef<[u8]>) -> Reply {
        Reply::Bulk(s.as_ref().to_vec())
    }
    fn opt(v: Option<&Vec<u8>>) -> Reply {
        v.map_or(Reply::Nil, |v| Reply::Bulk(v.clone()))
    }
}

pub const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";
const NOT_INT: &str = "ERR value is not an integer or out of range";
const HASH_NOT_INT: &str = "ERR hash value is not an integer";
const SYNTAX: &str = "ERR syntax error";
const NOT_FLOAT: &str = "ERR min or max is not a float";

/// A hash's fields in the order they were first set.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Fields(Vec<(Vec<u8>, Vec<u8>)>);

impl Fields {
    pub fn get(&self, field: &[u8]) -> Option<&Vec<u8>> {
        self.0.iter().find(|(f, _)| f == field).map(|(_, v)| v)
    }
    pub fn contains_key(&self, field: &[u8]) -> bool {
        self.get(field).is_some()
    }
    /// Sets `field`; the old value, if any.
    pub fn insert(&mut self, field: Vec<u8>, value: Vec<u8>) -> Option<Vec<u8>> {
        match self.0.iter_mut().find(|(f, _)| *f == field) {
            Some((_, v)) => Some(std::mem::replace(v, value)),
            None => {
                self.0.push((field, value));
                None
            }
        }
    }
    pub fn remove(&mut self, field: &[u8]) -> Option<Vec<u8>> {
        let i = self.0.iter().position(|(f, _)| f == field)?;
        Some(self.0.remove(i).1)
    }
    pub fn keys(&self) -> impl Iterator<Item = &Vec<u8>> {
        self.0.iter().map(|(f, _)| f)
    }
    pub fn iter(&self) -> impl Iterator<Item = (&Vec<u8>, &Vec<u8>)> {
        self.0.iter().map(|(f, v)| (f, v))
    }
    pub fn len(&self) -> usize {
        self.0.len()
    }
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// A value of one key.
#[derive(Clone, Debug, PartialEq)]
pub enum Val {
    Str(Vec<u8>),
    /// In insertion order, as a small hash (a listpack) keeps its fields.
    Hash(Fields),
    List(VecDeque<Vec<u8>>),
    /// member → score; ordered by (score, member) when read.
    ZSet(BTreeMap<Vec<u8>, f64>),
}

impl Val {
    fn type_name(&self) -> &'static str {
        match self {
            Val::Str(_) => "string",
            Val::Hash(_) => "hash",
            Val::List(_) => "list",
            Val::ZSet(_) => "zset",
        }
    }
    fn is_empty(&self) -> bool {
        match self {
            Val::Str(_) => false,
            Val::Hash(h) => h.is_empty(),
            Val::List(l) => l.is_empty(),
            Val::ZSet(z) => z.is_empty(),
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Entry {
    pub val: Val,
    /// Virtual ms at which the key is gone.
    pub expires_at: Option<u64>,
}

/// The model server: keys, the virtual clock (ms), what was published, and
/// how many subscribers each channel has (the simulation declares them).
#[derive(Clone, Debug, Default)]
pub struct Store {
    keys: HashMap<Vec<u8>, Entry>,
    /// The virtual clock in microseconds (`TIME`; expiries use its ms).
    pub now_us: u64,
    pub published: Vec<(Vec<u8>, Vec<u8>)>,
    pub subscribers: HashMap<Vec<u8>, i64>,
}

mod collections;

type R = Result<Reply, String>;

/// At least `min` arguments for command `name`, or Redis's error.
fn need(name: &str, a: &[Vec<u8>], min: usize) -> Result<(), String> {
    if a.len() < min {
        return Err(format!(
            "ERR wrong number of arguments for '{name}' command"
        ));
    }
    Ok(())
}

fn int(arg: &[u8]) -> Result<i64, String> {
    std::str::from_utf8(arg)
        .ok()
        .and_then(|s| s.parse::<i64>().ok())
        .ok_or_else(|| NOT_INT.to_owned())
}

fn float(arg: &[u8], err: &str) -> Result<f64, String> {
    let s = std::str::from_utf8(arg).map_err(|_| err.to_owned())?;
    let v = match s.to_ascii_lowercase().as_str() {
        "inf" | "+inf" => f64::INFINITY,
        "-inf" => f64::NEG_INFINITY,
        t => t.parse::<f64>().map_err(|_| err.to_owned())?,
    };
    if v.is_nan() {
        return Err(err.to_owned());
    }
    Ok(v)
}

/// A score as Redis writes it: the shortest form that reads back the same.
pub fn score_text(v: f64) -> String {
    if v == f64::INFINITY {
        "inf".into()
    } else if v == f64::NEG_INFINITY {
        "-inf".into()
    } else if v == v.trunc() && v.abs() < 1e17 {
        format!("{}", v as i64)
    } else {
        let s = format!("{v}");
        if s.contains('e') || s.len() <= 17 {
            s
        } else {
            format!("{v:e}")
        }
    }
}

fn hash(v: &mut Val) -> Option<&mut Fields> {
    match v {
        Val::Hash(h) => Some(h),
        _ => None,
    }
}

fn list(v: &mut Val) -> Option<&mut VecDeque<Vec<u8>>> {
    match v {
        Val::List(l) => Some(l),
        _ => None,
    }
}

fn zset(v: &mut Val) -> Option<&mut BTreeMap<Vec<u8>, f64>> {
    match v {
        Val::ZSet(z) => Some(z),
        _ => None,
    }
}

fn string(v: &mut Val) -> Option<&mut Vec<u8>> {
    match v {
        Val::Str(s) => Some(s),
        _ => None,
    }
}

fn lower(arg: &[u8]) -> String {
    String::from_utf8_lossy(arg).to_ascii_lowercase()
}

impl Store {
    /// The virtual clock in ms.
    pub fn now_ms(&self) -> u64 {
        self.now_us / 1000
    }

    /// Moves the virtual clock forward by `ms`.
    pub fn advance(&mut self, ms: u64) {
        self.now_us += ms * 1000;
    }

    /// The live keys and their entries (expired ones dropped first), sorted.
    pub fn dump(&mut self) -> Vec<(Vec<u8>, Entry)> {
        self.expire_all();
        let mut v: Vec<_> = self
            .keys
            .iter()
            .map(|(k, e)| (k.clone(), e.clone()))
            .collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    }

    /// Every live key and its entry, as they are (no copies, in no order).
    pub fn live(&mut self) -> impl Iterator<Item = (&Vec<u8>, &Entry)> {
        self.expire_all();
        self.keys.iter()
    }

    /// The entry of `key`, if live.
    pub fn entry(&mut self, key: &[u8]) -> Option<&Entry> {
        self.expire(key);
        self.keys.get(key)
    }

    fn expire_all(&mut self) {
        let now = self.now_ms();
        self.keys
            .retain(|_, e| e.expires_at.is_none_or(|t| t > now));
    }

    fn expire(&mut self, key: &[u8]) {
        let now = self.now_ms();
        if self
            .keys
            .get(key)
            .is_some_and(|e| e.expires_at.is_some_and(|t| t <= now))
        {
            self.keys.remove(key);
        }
    }

    fn get(&mut self, key: &[u8]) -> Option<&mut Entry> {
        self.expire(key);
        self.keys.get_mut(key)
    }

    /// The value of `key` if it is of the type `pick` accepts; `Ok(None)`
    /// when missing, `Err(WRONGTYPE)` when of another type.
    fn typed<T>(
        &mut self,
        key: &[u8],
        pick: fn(&mut Val) -> Option<&mut T>,
    ) -> Result<Option<&mut T>, String> {
        match self.get(key) {
            None => Ok(None),
            Some(e) => pick(&mut e.val)
                .map(Some)
                .ok_or_else(|| WRONGTYPE.to_owned()),
        }
    }

    /// The value of `key` of that type, created empty (no expiry) if missing.
    fn typed_or<T>(
        &mut self,
        key: &[u8],
        empty: Val,
        pick: fn(&mut Val) -> Option<&mut T>,
    ) -> Result<&mut T, String> {
        self.expire(key);
        let e = self.keys.entry(key.to_vec()).or_insert(Entry {
            val: empty,
            expires_at: None,
        });
        pick(&mut e.val).ok_or_else(|| WRONGTYPE.to_owned())
    }

    /// Deletes `key` if its collection became empty.
    fn drop_empty(&mut self, key: &[u8]) {
        if self.keys.get(key).is_some_and(|e| e.val.is_empty()) {
            self.keys.remove(key);
        }
    }

    /// Runs one command (`args[0]` its name) and returns its reply; an
    /// error reply is `Reply::Error`.
    pub fn call(&mut self, args: &[Vec<u8>]) -> Reply {
        match self.run(args) {
            Ok(r) => r,
            Err(e) => Reply::Error(e),
        }
    }

    fn run(&mut self, args: &[Vec<u8>]) -> R {
        let Some(name) = args.first() else {
            return Err("ERR empty command".into());
        };
        let name = lower(name);
        let a = &args[1..];
        let arity = |min: usize| need(&name, a, min);
        match name.as_str() {
            "del" => {
                arity(1)?;
                let mut n = 0;
                for k in a {
                    self.expire(k);
                    n += i64::from(self.keys.remove(k).is_some());
                }
                Ok(Reply::Int(n))
            }
            "exists" => {
                arity(1)?;
                let mut n = 0;
                for k in a {
                    n += i64::from(self.get(k).is_some());
                }
                Ok(Reply::Int(n))
            }
            "type" => {
                arity(1)?;
                let t = self.get(&a[0]).map_or("none", |e| e.val.type_name());
                Ok(Reply::Status(t.into()))
            }
            "pexpire" => {
                arity(2)?;
                if a.len() > 2 {
                    return Err(format!("ERR Unsupported option {}", lower(&a[2])));
                }
                let ms = int(&a[1])?;
                let now = self.now_ms();
                match self.get(&a[0]) {
                    None => Ok(Reply::Int(0)),
                    Some(_) if ms <= 0 => {
                        self.keys.remove(&a[0]);
                        Ok(Reply::Int(1))
                    }
                    Some(e) => {
                        e.expires_at = Some(now + ms as u64);
                        Ok(Reply::Int(1))
                    }
                }
            }
            "pttl" => {
                arity(1)?;
                let now = self.now_ms();
                Ok(Reply::Int(match self.get(&a[0]) {
                    None => -2,
                    Some(Entry {
                        expires_at: None, ..
                    }) => -1,
                    Some(Entry {
                        expires_at: Some(t),
                        ..
                    }) => (*t - now) as i64,
                }))
            }
            "get" => {
                arity(1)?;
                Ok(Reply::opt(self.typed(&a[0], string)?.map(|s| &*s)))
            }
            "set" | "psetex" => self.set(&name, a),
            "incrby" | "decrby" => {
                arity(2)?;
                let by = int(&a[1])?;
                let by = if name == "decrby" { -by } else { by };
                let s = self.typed_or(&a[0], Val::Str(b"0".to_vec()), string)?;
                let n = int(s)?
                    .checked_add(by)
                    .ok_or_else(|| "ERR increment or decrement would overflow".to_owned())?;
                *s = n.to_string().into_bytes();
                Ok(Reply::Int(n))
            }
            "hget" => {
                arity(2)?;
                Ok(Reply::opt(
                    self.typed(&a[0], hash)?.and_then(|h| h.get(&a[1])),
                ))
            }
            "hset" => {
                if a.len() < 3 || a.len().is_multiple_of(2) {
                    return Err("ERR wrong number of arguments for 'hset' command".into());
                }
                let h = self.typed_or(&a[0], Val::Hash(Fields::default()), hash)?;
                let mut n = 0;
                for kv in a[1..].chunks(2) {
                    n += i64::from(h.insert(kv[0].clone(), kv[1].clone()).is_none());
                }
                Ok(Reply::Int(n))
            }
            "hdel" => {
                arity(2)?;
                let Some(h) = self.typed(&a[0], hash)? else {
                    return Ok(Reply::Int(0));
                };
                let n = a[1..].iter().filter(|f| h.remove(f).is_some()).count();
                self.drop_empty(&a[0]);
                Ok(Reply::Int(n as i64))
            }
            "hexists" => {
                arity(2)?;
                let found = self
                    .typed(&a[0], hash)?
                    .is_some_and(|h| h.contains_key(&a[1]));
                Ok(Reply::Int(i64::from(found)))
            }
            "hincrby" => {
                arity(3)?;
                let by = int(&a[2])?;
                let h = self.typed_or(&a[0], Val::Hash(Fields::default()), hash)?;
                let old = match h.get(&a[1]) {
                    None => 0,
                    Some(v) => int(v).map_err(|_| HASH_NOT_INT.to_owned())?,
                };
                let n = old
                    .checked_add(by)
                    .ok_or_else(|| "ERR increment or decrement would overflow".to_owned())?;
                h.insert(a[1].clone(), n.to_string().into_bytes());
                Ok(Reply::Int(n))
            }
            "hkeys" | "hgetall" | "hlen" => {
                arity(1)?;
                let h = self.typed(&a[0], hash)?.cloned().unwrap_or_default();
                Ok(match name.as_str() {
                    "hlen" => Reply::Int(h.len() as i64),
                    "hkeys" => Reply::Array(h.keys().map(Reply::bulk).collect()),
                    _ => Reply::Array(
                        h.iter()
                            .flat_map(|(k, v)| [Reply::bulk(k), Reply::bulk(v)])
                            .collect(),
                    ),
                })
            }
            "lindex" | "lpop" | "lpush" | "rpush" | "lrem" | "lrange" | "llen" | "lpos"
            | "lset" => self.list_command(&name, a),
            "zadd" | "zincrby" | "zrem" | "zscore" | "zcard" | "zrange" | "zrangebyscore"
            | "zremrangebyscore" => self.zset_command(&name, a),
            "time" => Ok(Reply::Array(vec![
                Reply::bulk((self.now_us / 1_000_000).to_string()),
                Reply::bulk((self.now_us % 1_000_000).to_string()),
            ])),
            "publish" | "spublish" => {
                arity(2)?;
                self.published.push((a[0].clone(), a[1].clone()));
                Ok(Reply::Int(
                    self.subscribers.get(&a[0]).copied().unwrap_or(0),
                ))
            }
            "pubsub" => {
                arity(1)?;
                match lower(&a[0]).as_str() {
                    "numsub" | "shardnumsub" => Ok(Reply::Array(
                        a[1..]
                            .iter()
                            .flat_map(|c| {
                                let n = self.subscribers.get(c).copied().unwrap_or(0);
                                [Reply::bulk(c), Reply::Int(n)]
                            })
                            .collect(),
                    )),
                    other => Err(format!("ERR PUBSUB {other} is not modelled")),
                }
            }
            other => Err(format!("ERR unknown command '{other}' (not modelled)")),
        }
    }

    fn set(&mut self, name: &str, a: &[Vec<u8>]) -> R {
        let wrong = || format!("ERR wrong number of arguments for '{name}' command");
        let (key, val, mut px, mut nx, mut xx, mut keepttl) = if name == "psetex" {
            if a.len() != 3 {
                return Err(wrong());
            }
            let ms = int(&a[1])?;
            (&a[0], &a[2], Some(ms), false, false, false)
        } else {
            if a.len() < 2 {
                return Err(wrong());
            }
            (&a[0], &a[1], None, false, false, false)
        };
        let mut i = if name == "psetex" { 3 } else { 2 };
        while i < a.len() {
            match lower(&a[i]).as_str() {
                "nx" if !xx => nx = true,
                "xx" if !nx => xx = true,
                "keepttl" if px.is_none() => keepttl = true,
                o @ ("px" | "ex") if px.is_none() && !keepttl && i + 1 < a.len() => {
                    let n = int(&a[i + 1])?;
                    px = Some(if o == "ex" { n.saturating_mul(1000) } else { n });
                    i += 1;
                }
                _ => return Err(SYNTAX.into()),
            }
            i += 1;
        }
        if let Some(ms) = px {
            if ms <= 0 {
                return Err(format!("ERR invalid expire time in '{name}' command"));
            }
        }
        self.expire(key);
        let exists = self.keys.contains_key(key);
        if (nx && exists) || (xx && !exists) {
            return Ok(Reply::Nil);
        }
        let kept = if keepttl {
            self.keys.get(key).and_then(|e| e.expires_at)
        } else {
            None
        };
        let now = self.now_ms();
        self.keys.insert(
            key.clone(),
            Entry {
                val: Val::Str(val.clone()),
                expires_at: px.map(|ms| now + ms as u64).or(kept),
            },
        );
        Ok(Reply::Status("OK".into()))
    }
}
