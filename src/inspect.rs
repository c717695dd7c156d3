//! `LockClient::inspect` and `list`, for people on call: one lock's holders
//! (owner, hold count, mode), lease left, waiters (line, fair queue, waiting
//! writers) and fencing counter, each owner turned into its client by that
//! client's registration (see `renewal::registration`); and the locks a
//! `SCAN` of every primary finds. Reads only, never part of the lock path:
//! the key's shape (anything but a lock is refused), one pipeline on the
//! lock's node, one `HGETALL` per client named.

use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::time::Duration;

use redis::Value;

use crate::error::{Error, Result};
use crate::names::client_key;
use crate::raw::{Raw, Read};

/// What Redis knows of one lock now (see [`LockClient::inspect`]).
///
/// [`LockClient::inspect`]: crate::LockClient::inspect
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockInfo {
    /// The lock name as given.
    pub name: String,
    /// The Redis key (prefix + name).
    pub key: String,
    /// What holds it now: nothing, an exclusive lock (plain, fenced or
    /// fair — one layout), or a read/write lock.
    pub kind: LockKind,
    /// Every holder, with its hold count and mode.
    pub holders: Vec<Holder>,
    /// The lock's remaining lease; `None` when free (or without expiry).
    pub ttl: Option<Duration>,
    /// The waiters Redis knows of, in their order per queue.
    pub waiters: Vec<Waiter>,
    /// The last fencing token handed out, when the lock was ever fenced.
    pub fence: Option<u64>,
}

/// What a lock is held as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LockKind {
    /// Nobody holds it.
    Free,
    /// A plain, fenced or fair lock (Redisson's `RLock` layout).
    Exclusive,
    /// A read/write lock (its hash has a `mode`).
    ReadWrite,
    /// A scheduled job's lock (ShedLock's layout, see
    /// [`Job`](crate::Job)): its one holder's owner is the run's value,
    /// `ADDED:<time>@<host>:<uuid>`.
    Job,
}

/// One holder of a lock.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Holder {
    /// The owner as Redis stores it (`<client-uuid>:<n>`).
    pub owner: String,
    /// The client it belongs to, when that client registered (leasehold
    /// clients do while active; Redisson's do not).
    pub client: Option<ClientInfo>,
    /// The thread (or owned guard) number within its client.
    pub thread: Option<u64>,
    /// Reentrant holds.
    pub holds: u64,
    /// Exclusive, read or write.
    pub mode: HoldMode,
}

/// How a holder holds a lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum HoldMode {
    /// A plain, fenced or fair hold.
    Exclusive,
    /// A read hold of a read/write lock.
    Read,
    /// A write hold of a read/write lock.
    Write,
}

/// One waiter Redis knows of.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Waiter {
    /// The owner as Redis stores it.
    pub owner: String,
    /// Its client, when registered.
    pub client: Option<ClientInfo>,
    /// The thread number within its client.
    pub thread: Option<u64>,
    /// Which queue it stands in.
    pub queue: WaitQueue,
}

/// The queues Redis keeps waiters in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum WaitQueue {
    /// A plain lock's line of waiting leasehold clients (one place per
    /// client; its other threads wait in-process behind it).
    Line,
    /// The fair queue (leasehold's and Redisson's waiters).
    Fair,
    /// A read/write lock's waiting writers.
    Writers,
}

/// Who a client is, from its registration.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClientInfo {
    /// The client's id (the first part of its owners).
    pub id: String,
    /// Its host's name.
    pub host: String,
    /// Its process id.
    pub pid: Option<u32>,
    /// Its `client_name`, if it set one.
    pub name: Option<String>,
    /// The leasehold version it runs.
    pub version: String,
    /// When it started (ms since the Unix epoch).
    pub started_ms: Option<u64>,
}

impl fmt::Display for ClientInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(name) = &self.name {
            write!(f, "{name} on ")?;
        }
        write!(f, "{}", self.host)?;
        if let Some(pid) = self.pid {
            write!(f, ", pid {pid}")?;
        }
        Ok(())
    }
}

/// `<uuid>:<n>` → (uuid, n).
fn split_owner(owner: &str) -> (&str, Option<u64>) {
    match owner.rsplit_once(':') {
        Some((id, n)) => (id, n.parse().ok()),
        None => (owner, None),
    }
}

fn bytes(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        Value::Int(n) => Some(n.to_string()),
        _ => None,
    }
}

/// A `HGETALL` reply (RESP2 array or RESP3 map) as pairs.
fn pairs(v: &Value) -> Vec<(String, String)> {
    match v {
        Value::Map(items) => items
            .iter()
            .filter_map(|(k, v)| Some((bytes(k)?, bytes(v)?)))
            .collect(),
        Value::Array(items) => items
            .chunks(2)
            .filter_map(|kv| Some((bytes(kv.first()?)?, bytes(kv.get(1)?)?)))
            .collect(),
        _ => Vec::new(),
    }
}

/// Keys one `SCAN` call looks at (its `COUNT`).
const SCAN_COUNT: usize = 200;

/// [`LockClient::list`](crate::LockClient::list): a `SCAN` for hashes and
/// strings on every primary, each read as [`inspect`] does; kept are those
/// shaped like a lock (`protocol::admin::Shape`) or a job's lock (ShedLock's
/// value), not application hashes, counters or leasehold's companion hashes
/// (client registrations, fair waiter marks).
pub(crate) fn list(raw: &Raw, pattern: &str, limit: usize) -> Result<Vec<LockInfo>> {
    let prefix = raw.key_prefix();
    let matching = format!("{prefix}{pattern}");
    // Hashes (every lock kind of Redisson's layouts) and strings (a
    // scheduled job's lock, ShedLock's; other strings are left out below).
    let found = raw.read_every_primary(&matching, |con| {
        let mut keys = Vec::new();
        for ty in ["hash", "string"] {
            let (mut cursor, mut seen) = (0u64, 0);
            loop {
                let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
                    .arg(cursor)
                    .arg("MATCH")
                    .arg(&matching)
                    .arg("COUNT")
                    .arg(SCAN_COUNT)
                    .arg("TYPE")
                    .arg(ty)
                    .query(con)?;
                keys.extend(batch);
                (cursor, seen) = (next, seen + SCAN_COUNT);
                if cursor == 0 || seen >= limit {
                    break;
                }
            }
        }
        Ok(keys)
    })?;
    let names: BTreeSet<&str> = found
        .iter()
        .flatten()
        .filter_map(|key| key.strip_prefix(prefix))
        .collect();
    // Each client's registration is read once for the whole list.
    let (mut locks, mut clients) = (Vec::new(), Clients::new());
    for name in names {
        let key = raw.key(name);
        match read(raw, name, &key) {
            Ok(mut info) if info.kind != LockKind::Free => {
                name_clients(raw, &mut info, &mut clients)?;
                locks.push(info);
            }
            Ok(_) | Err(Error::NotALock { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(locks)
}

/// Reads lock `name` (key `key`) as [`LockInfo`].
pub(crate) fn inspect(raw: &Raw, name: &str, key: &str) -> Result<LockInfo> {
    let mut info = read(raw, name, key)?;
    name_clients(raw, &mut info, &mut Clients::new())?;
    Ok(info)
}

/// Clients' registrations read so far, by client id (`None`: none found).
type Clients = HashMap<String, Option<ClientInfo>>;

/// Reads lock `name` (key `key`) in one script, at one moment: anything but
/// a lock, nothing or a job's lock is [`Error::NotALock`]; owners not yet
/// turned into clients.
fn read(raw: &Raw, name: &str, key: &str) -> Result<LockInfo> {
    let replies = match raw.read_lock(key)? {
        Read::Lock(replies) => replies,
        Read::String(value, ttl) => return job(name, key, value, ttl),
        Read::Other(what) => {
            let key = key.to_owned();
            return Err(Error::NotALock { key, what });
        }
    };
    let get = |i: usize| replies.get(i).cloned().unwrap_or(Value::Nil);
    let hash = pairs(&get(0));
    let ttl = match get(1) {
        Value::Int(ms) if ms > 0 => Some(Duration::from_millis(ms as u64)),
        _ => None,
    };
    let kind = if hash.is_empty() {
        LockKind::Free
    } else if hash.iter().any(|(k, _)| k == "mode") {
        LockKind::ReadWrite
    } else {
        LockKind::Exclusive
    };
    let mut holders: Vec<Holder> = hash
        .iter()
        .filter(|(k, _)| k != "mode")
        .map(|(field, count)| {
            let (owner, mode) = match (field.strip_suffix(":write"), kind) {
                (Some(owner), _) => (owner.to_owned(), HoldMode::Write),
                (None, LockKind::ReadWrite) => (field.clone(), HoldMode::Read),
                (None, _) => (field.clone(), HoldMode::Exclusive),
            };
            Holder {
                thread: split_owner(&owner).1,
                owner,
                client: None,
                holds: count.parse().unwrap_or(0),
                mode,
            }
        })
        .collect();
    holders.sort_by(|a, b| a.owner.cmp(&b.owner));
    // The queues waiters stand in, in reply order after the hash and TTL.
    let queues = [WaitQueue::Line, WaitQueue::Fair, WaitQueue::Writers];
    let mut waiters = Vec::new();
    for (reply, queue) in queues.into_iter().enumerate() {
        let Value::Array(entries) = get(reply + 2) else {
            continue;
        };
        for entry in entries.iter().filter_map(bytes) {
            // A line's element is `<until>|<owner>#<n>…`; a waiting writer
            // its write field `<owner>:write`.
            let place = match queue {
                WaitQueue::Line => crate::protocol::element_place(&entry),
                _ => &entry,
            };
            let owner = place.split('#').next().unwrap_or(place);
            let owner = owner.strip_suffix(":write").unwrap_or(owner).to_owned();
            waiters.push(Waiter {
                thread: split_owner(&owner).1,
                owner,
                client: None,
                queue,
            });
        }
    }
    let fence = bytes(&get(5)).and_then(|t| t.parse().ok());
    Ok(LockInfo {
        name: name.to_owned(),
        key: key.to_owned(),
        kind,
        holders,
        ttl,
        waiters,
        fence,
    })
}

/// The scheduled job's lock at `key`, a string holding `value` for `ttl`
/// ms more; [`Error::NotALock`] for a string of another shape.
fn job(name: &str, key: &str, value: String, ttl: i64) -> Result<LockInfo> {
    if crate::protocol::job::value_host(&value).is_none() {
        let what = "a string that is no job's lock (ShedLock's ADDED:<time>@<host>:<uuid>)";
        return Err(Error::NotALock {
            key: key.to_owned(),
            what: what.to_owned(),
        });
    }
    Ok(LockInfo {
        name: name.to_owned(),
        key: key.to_owned(),
        kind: LockKind::Job,
        holders: vec![Holder {
            owner: value,
            client: None,
            thread: None,
            holds: 1,
            mode: HoldMode::Exclusive,
        }],
        ttl: u64::try_from(ttl).ok().map(Duration::from_millis),
        waiters: Vec::new(),
        fence: None,
    })
}

/// Turns every holder's and waiter's owner into its client, from the
/// clients' registrations: one `HGETALL` per client not in `clients` yet
/// (which keeps what it read).
fn name_clients(raw: &Raw, info: &mut LockInfo, clients: &mut Clients) -> Result<()> {
    if info.kind == LockKind::Job {
        return Ok(()); // its owner is a ShedLock value, naming its host
    }
    let owners = info.holders.iter().map(|h| &h.owner);
    let owners = owners.chain(info.waiters.iter().map(|w| &w.owner));
    let ids: BTreeSet<&str> = owners.map(|owner| split_owner(owner).0).collect();
    for id in ids {
        if clients.contains_key(id) {
            continue;
        }
        let ckey = client_key(raw.key_prefix(), id);
        let reply: Value = raw.on_node(&ckey, |con| redis::cmd("HGETALL").arg(&ckey).query(con))?;
        let fields: HashMap<String, String> = pairs(&reply).into_iter().collect();
        let info = (!fields.is_empty()).then(|| ClientInfo {
            id: id.to_owned(),
            host: fields.get("host").cloned().unwrap_or_default(),
            pid: fields.get("pid").and_then(|p| p.parse().ok()),
            name: fields.get("name").cloned(),
            version: fields.get("version").cloned().unwrap_or_default(),
            started_ms: fields.get("started").and_then(|p| p.parse().ok()),
        });
        clients.insert(id.to_owned(), info);
    }
    let client_of = |owner: &str| clients.get(split_owner(owner).0).cloned().flatten();
    for h in &mut info.holders {
        h.client = client_of(&h.owner);
    }
    for w in &mut info.waiters {
        w.client = client_of(&w.owner);
    }
    Ok(())
}
