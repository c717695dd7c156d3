//! The model's lists and sorted sets: `LINDEX`, `LPOP`, `LPUSH`, `RPUSH`,
//! `LREM`, `LRANGE`, `LLEN`, `LPOS`, `LSET`; `ZADD` (`NX`/`XX`), `ZINCRBY` (Redisson's fair
//! acquire), `ZREM`, `ZSCORE`, `ZCARD`,
//! `ZRANGE` (by rank, `WITHSCORES`), `ZRANGEBYSCORE` (`(`, `-inf`/`+inf`,
//! `WITHSCORES`, `LIMIT`), `ZREMRANGEBYSCORE` — with Redis's replies and
//! edges (see the opening comment of `store`).

use std::collections::BTreeMap;

use super::*;

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

impl Store {
    /// A list command (`name`, lower case) with its arguments.
    pub(super) fn list_command(&mut self, name: &str, a: &[Vec<u8>]) -> R {
        let arity = |min: usize| need(name, a, min);
        match name {
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
            "lpos" => {
                // The first index of an element (no RANK, COUNT or MAXLEN).
                arity(2)?;
                if a.len() > 2 {
                    return Err("ERR LPOS with options is not modelled".into());
                }
                let Some(l) = self.typed(&a[0], list)? else {
                    return Ok(Reply::Nil);
                };
                Ok(l.iter()
                    .position(|v| *v == a[1])
                    .map_or(Reply::Nil, |i| Reply::Int(i as i64)))
            }
            "lset" => {
                arity(3)?;
                let Some(l) = self.typed(&a[0], list)? else {
                    return Err("ERR no such key".into());
                };
                let i = int(&a[1])?;
                let i = if i < 0 { l.len() as i64 + i } else { i };
                match usize::try_from(i).ok().and_then(|i| l.get_mut(i)) {
                    Some(v) => {
                        *v = a[2].clone();
                        Ok(Reply::Status("OK".into()))
                    }
                    None => Err("ERR index out of range".into()),
                }
            }
            "llen" => {
                arity(1)?;
                Ok(Reply::Int(
                    self.typed(&a[0], list)?.map_or(0, |l| l.len() as i64),
                ))
            }
            other => Err(format!("ERR unknown command '{other}' (not modelled)")),
        }
    }

    /// A sorted-set command (`name`, lower case) with its arguments.
    pub(super) fn zset_command(&mut self, name: &str, a: &[Vec<u8>]) -> R {
        let arity = |min: usize| need(name, a, min);
        match name {
            "zadd" => self.zadd(a),
            "zincrby" => {
                if a.len() != 3 {
                    return Err("ERR wrong number of arguments for 'zincrby' command".into());
                }
                let by = float(&a[1], "ERR value is not a valid float")?;
                let z = self.typed_or(&a[0], Val::ZSet(BTreeMap::new()), zset)?;
                let score = z.get(&a[2]).copied().unwrap_or(0.0) + by;
                if score.is_nan() {
                    self.drop_empty(&a[0]);
                    return Err("ERR resulting score is not a number (NaN)".into());
                }
                z.insert(a[2].clone(), score);
                Ok(Reply::bulk(score_text(score)))
            }
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
            other => Err(format!("ERR unknown command '{other}' (not modelled)")),
        }
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
