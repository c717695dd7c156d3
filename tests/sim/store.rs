//! The simulator's Redis: an in-memory model of the commands leasehold's
//! scripts call, over a virtual clock. Each command keeps Redis's semantics
//! where the scripts can tell (replies, types, `WRONGTYPE`, a key that
//! expired is gone, an emptied hash/list/sorted set is deleted, a
//! non-positive `PEXPIRE` deletes); `tests/simulation.rs` checks it against
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
//!   `LRANGE`, `LLEN`;
//! - sorted sets: `ZADD` (`NX`/`XX`), `ZREM`, `ZSCORE`, `ZRANGE` (by rank,
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

type R = Result<Reply, String>;

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

/// A score bound of `ZRANGEBYSCORE`/`ZREMRANGEBYSCORE`: value, exclusive.
fn bound(arg: &[u8]) -> Result<(f64, bool), String> {
    match arg.strip_prefix(b"(") {
        Some(rest) => Ok((float(rest, NOT_FLOAT)?, true)),
        None => Ok((float(arg, NOT_FLOAT)?, false)),
    }
}

fn in_range(v: f64, min: (f64, bool), max: (f64, bool)) -> bool {
    let above = if min.1 { v > min.0 } else { v >= min.0 };
    let below = if max.1 { v < max.0 } else { v <= max.0 };
    above && below
}

/// Redis's rank range: negative from the end, clamped.
fn ranks(start: i64, stop: i64, len: usize) -> Option<(usize, usize)> {
    let len = len as i64;
    let start = if start < 0 {
        (len + start).max(0)
    } else {
        start
    };
    let stop = if stop < 0 {
        len + stop
    } else {
        stop.min(len - 1)
    };
    (start <= stop && start < len).then_some((start as usize, stop as usize))
}

fn sorted(z: &BTreeMap<Vec<u8>, f64>) -> Vec<(&Vec<u8>, f64)> {
    let mut v: Vec<_> = z.iter().map(|(m, s)| (m, *s)).collect();
    v.sort_by(|a, b| a.1.total_cmp(&b.1).then_with(|| a.0.cmp(b.0)));
    v
}

fn with_scores(items: &[(&Vec<u8>, f64)], scores: bool) -> Reply {
    let mut out = Vec::new();
    for (m, s) in items {
        out.push(Reply::bulk(m));
        if scores {
            out.push(Reply::bulk(score_text(*s)));
        }
    }
    Reply::Array(out)
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
        let arity = |min: usize| {
            if a.len() < min {
                Err(format!(
                    "ERR wrong number of arguments for '{name}' command"
                ))
            } else {
                Ok(())
            }
        };
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
            "lindex" => {
                arity(2)?;
                let Some(l) = self.typed(&a[0], list)? else {
                    return Ok(Reply::Nil);
                };
                let i = int(&a[1])?;
                let i = if i < 0 { l.len() as i64 + i } else { i };
                Ok(Reply::opt(usize::try_from(i).ok().and_then(|i| l.get(i))))
            }
            "lpop" => {
                arity(1)?;
                if a.len() > 1 {
                    return Err("ERR LPOP with a count is not modelled".into());
                }
                let Some(l) = self.typed(&a[0], list)? else {
                    return Ok(Reply::Nil);
                };
                let v = l.pop_front();
                self.drop_empty(&a[0]);
                Ok(v.map_or(Reply::Nil, Reply::Bulk))
            }
            "lpush" | "rpush" => {
                arity(2)?;
                let l = self.typed_or(&a[0], Val::List(VecDeque::new()), list)?;
                for v in &a[1..] {
                    if name == "lpush" {
                        l.push_front(v.clone());
                    } else {
                        l.push_back(v.clone());
                    }
                }
                Ok(Reply::Int(l.len() as i64))
            }
            "lrem" => {
                arity(3)?;
                let count = int(&a[1])?;
                let Some(l) = self.typed(&a[0], list)? else {
                    return Ok(Reply::Int(0));
                };
                let limit = if count == 0 {
                    usize::MAX
                } else {
                    count.unsigned_abs() as usize
                };
                let mut removed = 0;
                let items: Vec<_> = l.drain(..).collect();
                let mut keep: VecDeque<Vec<u8>> = VecDeque::new();
                if count >= 0 {
                    for v in items {
                        if removed < limit && v == a[2] {
                            removed += 1;
                        } else {
                            keep.push_back(v);
                        }
                    }
                } else {
                    for v in items.into_iter().rev() {
                        if removed < limit && v == a[2] {
                            removed += 1;
                        } else {
                            keep.push_front(v);
                        }
                    }
                }
                *l = keep;
                self.drop_empty(&a[0]);
                Ok(Reply::Int(removed as i64))
            }
            "lrange" => {
                arity(3)?;
                let (start, stop) = (int(&a[1])?, int(&a[2])?);
                let Some(l) = self.typed(&a[0], list)? else {
                    return Ok(Reply::Array(vec![]));
                };
                Ok(Reply::Array(match ranks(start, stop, l.len()) {
                    Some((s, e)) => l.range(s..=e).map(Reply::bulk).collect(),
                    None => vec![],
                }))
            }
            "llen" => {
                arity(1)?;
                Ok(Reply::Int(
                    self.typed(&a[0], list)?.map_or(0, |l| l.len() as i64),
                ))
            }
            "zadd" => self.zadd(a),
            "zrem" => {
                arity(2)?;
                let Some(z) = self.typed(&a[0], zset)? else {
                    return Ok(Reply::Int(0));
                };
                let n = a[1..].iter().filter(|m| z.remove(*m).is_some()).count();
                self.drop_empty(&a[0]);
                Ok(Reply::Int(n as i64))
            }
            "zscore" => {
                arity(2)?;
                let s = self.typed(&a[0], zset)?.and_then(|z| z.get(&a[1]).copied());
                Ok(s.map_or(Reply::Nil, |s| Reply::bulk(score_text(s))))
            }
            "zcard" => {
                arity(1)?;
                Ok(Reply::Int(
                    self.typed(&a[0], zset)?.map_or(0, |z| z.len() as i64),
                ))
            }
            "zrange" => {
                arity(3)?;
                let (start, stop) = (int(&a[1])?, int(&a[2])?);
                let scores = match a.get(3).map(|o| lower(o)) {
                    None => false,
                    Some(o) if o == "withscores" && a.len() == 4 => true,
                    Some(_) => return Err(SYNTAX.into()),
                };
                let Some(z) = self.typed(&a[0], zset)? else {
                    return Ok(Reply::Array(vec![]));
                };
                let items = sorted(z);
                Ok(match ranks(start, stop, items.len()) {
                    Some((s, e)) => with_scores(&items[s..=e], scores),
                    None => Reply::Array(vec![]),
                })
            }
            "zrangebyscore" | "zremrangebyscore" => {
                arity(3)?;
                let (min, max) = (bound(&a[1])?, bound(&a[2])?);
                let mut scores = false;
                let mut limit: Option<(i64, i64)> = None;
                let mut i = 3;
                while i < a.len() {
                    match lower(&a[i]).as_str() {
                        "withscores" if name == "zrangebyscore" => scores = true,
                        "limit" if name == "zrangebyscore" && i + 2 < a.len() => {
                            limit = Some((int(&a[i + 1])?, int(&a[i + 2])?));
                            i += 2;
                        }
                        _ => return Err(SYNTAX.into()),
                    }
                    i += 1;
                }
                let Some(z) = self.typed(&a[0], zset)? else {
                    return Ok(if name == "zrangebyscore" {
                        Reply::Array(vec![])
                    } else {
                        Reply::Int(0)
                    });
                };
                let items: Vec<_> = sorted(z)
                    .into_iter()
                    .filter(|(_, s)| in_range(*s, min, max))
                    .collect();
                if name == "zremrangebyscore" {
                    let gone: Vec<Vec<u8>> = items.iter().map(|(m, _)| (*m).clone()).collect();
                    for m in &gone {
                        z.remove(m);
                    }
                    self.drop_empty(&a[0]);
                    return Ok(Reply::Int(gone.len() as i64));
                }
                let items = match limit {
                    None => items,
                    Some((off, _)) if off < 0 => vec![],
                    Some((off, count)) => {
                        let it = items.into_iter().skip(off as usize);
                        if count < 0 {
                            it.collect()
                        } else {
                            it.take(count as usize).collect()
                        }
                    }
                };
                Ok(with_scores(&items, scores))
            }
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

    fn zadd(&mut self, a: &[Vec<u8>]) -> R {
        if a.len() < 3 {
            return Err("ERR wrong number of arguments for 'zadd' command".into());
        }
        let (mut nx, mut xx, mut i) = (false, false, 1);
        loop {
            match lower(&a[i]).as_str() {
                "nx" => nx = true,
                "xx" => xx = true,
                _ => break,
            }
            i += 1;
            if i >= a.len() {
                return Err(SYNTAX.into());
            }
        }
        if nx && xx {
            return Err("ERR XX and NX options at the same time are not compatible".into());
        }
        let pairs = &a[i..];
        if pairs.is_empty() || !pairs.len().is_multiple_of(2) {
            return Err(SYNTAX.into());
        }
        let mut parsed = Vec::new();
        for p in pairs.chunks(2) {
            parsed.push((
                float(&p[0], "ERR value is not a valid float")?,
                p[1].clone(),
            ));
        }
        if xx && self.typed(&a[0], zset)?.is_none() {
            return Ok(Reply::Int(0));
        }
        let z = self.typed_or(&a[0], Val::ZSet(BTreeMap::new()), zset)?;
        let mut added = 0;
        for (score, member) in parsed {
            let present = z.contains_key(&member);
            if (nx && present) || (xx && !present) {
                continue;
            }
            added += i64::from(!present);
            z.insert(member, score);
        }
        self.drop_empty(&a[0]);
        Ok(Reply::Int(added))
    }
}
