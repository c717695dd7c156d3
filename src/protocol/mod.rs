//! What each lock kind sends to Redis: Lua scripts and their replies, with no
//! threads, pools or waiting. [`Scripts`] is the one dispatch on [`Kind`]:
//! one acquire, one release, one "leave my waiting place" for every kind, each
//! answered in one shape ([`Attempt`], [`Released`]) so that the layers above
//! never match on the kind to read a reply.
//!
//! - `plain` — Redisson's `RLock` (and its fenced variant);
//! - `line` — the plain lock's line of waiting clients in Lua: leases and
//!   the helpers its acquire and release share;
//! - `renew` — a lease's renewal, as the renewal thread batches it;
//! - `fair` — Redisson's `RedissonFairLock` layout, with expiring places;
//! - `rwlock` — Redisson's `RReadWriteLock` layout, writers first;
//! - `semaphore` — Redisson's `RPermitExpirableSemaphore` layout, with a
//!   line of waiting acquisitions and grants;
//! - `admin` — what a key is (a lock's shape), and an operator's forced
//!   release of any kind.
//!
//! Every owner check happens inside the scripts; names and owners travel only
//! as `KEYS[]`/`ARGV[]`, never inside Lua source.

pub(crate) mod admin;
pub(crate) mod election;
pub(crate) mod fair;
pub(crate) mod job;
pub(crate) mod line;
mod packed;
pub(crate) mod plain;
pub(crate) mod renew;
pub(crate) mod rwlock;
pub(crate) mod semaphore;

use std::borrow::Cow;
use std::sync::LazyLock;
use std::time::Duration;

use redis::{
    ConnectionLike, ErrorKind, FromRedisValue, RedisResult, Script, ServerErrorKind, ToRedisArgs,
    Value,
};

use crate::names::{channel_name, rw_channel, waiter_channel, write_field};
use crate::options::Kind;
use packed::Packed;

pub(crate) use line::{element, element_place, GRANT_LEASE};
pub(crate) use packed::decimal;
pub(crate) use plain::{parse_grant, Fence, Successor, ACQUIRE, RELEASE};
pub(crate) use rwlock::READ_KEEPALIVE;

/// One acquire attempt of any kind.
pub(crate) struct Request<'a> {
    pub(crate) kind: Kind,
    pub(crate) key: &'a str,
    /// The client's owner id (`<uuid>:<n>`), not the hash field.
    pub(crate) owner: &'a str,
    pub(crate) lease: Duration,
    /// Plain, fair: how many guards of this owner are alive in its client
    /// (0: a first hold — a count Redis still shows for it is stale; see
    /// `plain::ACQUIRE`).
    pub(crate) alive: u32,
    /// Plain and fair: whether (and how) to deal in fencing tokens.
    pub(crate) fence: Fence,
    /// Plain: the waiter's place in the line of waiting clients (see
    /// [`place_of`]), taken when the lock is held elsewhere — or, once
    /// taken, its element (see [`element`]), confirmed where it stands;
    /// fair: the mark of its queue entry. `None` for a single try (plain:
    /// no place; fair: no grant).
    pub(crate) place: Option<&'a str>,
}

impl Request<'_> {
    /// A first hold: no guard of the owner is alive in its client.
    pub(crate) fn fresh(&self) -> bool {
        self.alive == 0
    }
}

/// What an acquire attempt found, for every kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Attempt {
    /// Held now; the fencing token minted by this attempt (a fenced first
    /// hold), `None` otherwise (also for a fenced reentrant hold, which keeps
    /// the token of the outer one).
    Acquired { minted: Option<u64> },
    /// Someone else holds it (or, fair: is ahead in line); wait at most
    /// `hint` before trying again (`None`: no expiry known). `foreign`
    /// (plain): the holder is another library's client, whose release only
    /// publishes the unlock message.
    Wait {
        hint: Option<Duration>,
        foreign: bool,
        /// Plain, fair: the waiter's place was new in the line or queue
        /// (the reply's `j` flag; why it matters: `waiting` in
        /// `plain::ACQUIRE`).
        joined: bool,
        /// Plain: until when the waiter's place now lives (ms by the
        /// server's clock): its element in the line is `<until>|<place>`,
        /// which its next attempt names to confirm it (see [`element`]).
        until: Option<u64>,
    },
    /// Read/write: the owner reads and asked to write, which would wait for
    /// itself.
    Upgrade,
    /// The key is not a lock (an application's hash or string): what it is,
    /// in words. Nothing was changed.
    NotALock(String),
}

/// One release of any kind.
pub(crate) struct Release<'a> {
    pub(crate) kind: Kind,
    pub(crate) key: &'a str,
    /// The hash field of the hold (see [`hold_field`]).
    pub(crate) field: &'a str,
    /// What the owner's remaining reentrant holds keep, when this is not
    /// its last (see [`Keep`]).
    pub(crate) keep: Keep,
    /// No other guard of this owner (hold field) is alive in the client: a
    /// count Redis shows beyond this hold is stale, and all of it goes.
    pub(crate) last: bool,
    /// Plain: a thread of this client the lock may pass to directly.
    pub(crate) successor: Option<Successor<'a>>,
}

/// The lease Redis keeps for an owner's remaining reentrant holds after one
/// of them is released: each of those guards counts on its own lease, and
/// Redis must keep the hold at least as long as the longest of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Keep {
    /// Only explicit leases remain, the longest with this much left: the
    /// hold's expiry is set to it (a released longer lease stays no longer
    /// than a guard still counts on).
    Exactly(Duration),
    /// A watchdog lease remains (its renewal may be in flight, setting the
    /// expiry later than this client knows yet): the expiry is never
    /// shortened, only lengthened to this much.
    AtLeast(Duration),
}

impl Keep {
    /// Nothing more than what Redis keeps already (the undo of one
    /// reentrant count: the holds it leaves are as they were).
    pub(crate) const UNCHANGED: Keep = Keep::AtLeast(Duration::ZERO);

    /// As the scripts read it (see [`keep_fn!`]): `=<ms>` or `><ms>`.
    /// Rounded up to the millisecond, and one more: Redis counts expiries
    /// from its clock's last whole millisecond, so a hold it keeps `n` ms
    /// may end up to 1 ms sooner — never before a guard's view of it.
    pub(crate) fn arg(self) -> KeepArg {
        let ms = |d: Duration| u64::try_from(d.as_micros().div_ceil(1000) + 1).unwrap_or(u64::MAX);
        match self {
            Keep::UNCHANGED => KeepArg('>', 0),
            Keep::Exactly(d) => KeepArg('=', ms(d)),
            Keep::AtLeast(d) => KeepArg('>', ms(d)),
        }
    }
}

/// A [`Keep`] as the scripts read it (`=<ms>` or `><ms>`), written into the
/// command where it goes (no `String` of its own on every release).
#[derive(Debug, Clone, Copy)]
pub(crate) struct KeepArg(char, u64);

impl std::fmt::Display for KeepArg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}{}", self.0, self.1)
    }
}

impl redis::ToRedisArgs for KeepArg {
    fn write_redis_args<W: ?Sized + redis::RedisWrite>(&self, out: &mut W) {
        use std::io::Write;
        // Into the command's own buffer: it cannot fail.
        let _ = write!(out.writer_for_next_arg(), "{self}");
    }
}

/// The Lua helper `keep(key, spec)`: sets `key`'s expiry as a [`Keep`]
/// (`spec`, from [`Keep::arg`]) says — exactly `=<ms>` from now, or at
/// least `><ms>` (never shortened) — and `ttl_at_least(key, ms)`: the
/// expiry of `key` lengthened to `ms` from now, never shortened (an
/// acquire's re-entry and a renewal: another guard of the owner may count
/// on a longer lease). Both leave a missing key missing.
macro_rules! keep_fn {
    () => {
        r#"
local function ttl_at_least(key, ms)
    local ttl = redis.call('pttl', key)
    if ttl == -2 then
        return 0
    end
    if ttl < tonumber(ms) then
        return redis.call('pexpire', key, ms)
    end
    return 1
end
local function keep(key, spec)
    local ms = tonumber(string.sub(spec, 2))
    if string.sub(spec, 1, 1) == '>' then
        return ttl_at_least(key, ms)
    end
    return redis.call('pexpire', key, ms)
end
"#
    };
}
pub(crate) use keep_fn;

/// What a release did, for every kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Released {
    /// The last hold was given back: the lock is free and waiters were told.
    Freed,
    /// One reentrant hold was given back; others of the same owner remain.
    StillHeld,
    /// Plain: the lock passed directly to the successor named in the
    /// release, with a fencing token minted for it when it asked for one.
    HandedOver { fence: Option<u64> },
    /// Plain: freed and published with a successor named, because other
    /// clients were waiting: the successor should let them go first.
    FreedForOthers,
    /// Plain: freed and given to the first waiting client in line (set to
    /// its owner with a short lease, told on its grant channel).
    Granted,
    /// Our field was not there: nothing was changed.
    NotHeld,
}

/// The hash field a hold of `owner` occupies: `<owner>:write` for a write
/// hold, the owner itself otherwise.
pub(crate) fn hold_field(kind: Kind, owner: &str) -> Cow<'_, str> {
    match kind {
        Kind::Write => Cow::Owned(write_field(owner)),
        _ => Cow::Borrowed(owner),
    }
}

/// The owner of a hold whose hash field is `field` (see [`hold_field`]).
pub(crate) fn owner_of_field(kind: Kind, field: &str) -> &str {
    match kind {
        Kind::Write => field.strip_suffix(":write").unwrap_or(field),
        _ => field,
    }
}

/// The channel on which a waiter of `kind` hears that it may try again: the
/// lock's unlock channel, or (fair) the waiter's own.
pub(crate) fn wait_channel(kind: Kind, key: &str, owner: &str) -> String {
    match kind {
        Kind::Plain => channel_name(key).to_string(),
        Kind::Fair => waiter_channel(key, owner),
        Kind::Read | Kind::Write => rw_channel(key),
    }
}

/// The place of `owner`'s wait number `n` in a plain lock's line of waiting
/// clients (and the mark of a fair waiter's queue entry):
/// `<owner>#<n>@<grant ms>/<place ms>`, and `f` at the end when the waiter
/// wants a fencing token (the release that grants it the lock mints one). A
/// grant names the place, so a grant meant for an earlier wait of the same
/// owner is never taken for this one. `<grant ms>` is the lease a release
/// that grants it the lock sets ([`grant_lease`] of the waiter's lease),
/// `<place ms>` how long its place in the line lives unconfirmed
/// ([`place_lease`]): the scripts read both from the place.
pub(crate) fn place_of(owner: &str, n: u64, lease: Duration, fenced: bool) -> String {
    let grant = millis(grant_lease(lease));
    let place = place_lease(Kind::Plain, lease).map_or(grant, millis);
    format!(
        "{owner}#{n}@{grant}/{place}{}",
        if fenced { "f" } else { "" }
    )
}

/// The lease a release sets when it grants the lock to a waiter that asked
/// for `lease`: that lease, but at most [`GRANT_LEASE`] (why: there).
pub(crate) fn grant_lease(lease: Duration) -> Duration {
    lease.min(GRANT_LEASE)
}

/// How long a waiting place of `kind` (the line of waiting clients, the
/// fair queue, the waiting writers) lives unless its waiter, whose lease is
/// `lease`, confirms it: the kind's place lease, but never longer than that
/// lease — a stalled waiter first in line keeps a free lock from the others
/// no longer than it could keep the lock itself — and never shorter than
/// [`SHORTEST_PLACE`], so a waiter with a very short lease confirms its
/// place every 100 ms at most, not in a busy loop. `None` for a reader (it
/// leaves no place).
pub(crate) fn place_lease(kind: Kind, lease: Duration) -> Option<Duration> {
    let longest = match kind {
        Kind::Fair => fair::QUEUE_LEASE,
        Kind::Write => rwlock::WRITER_INTENT,
        Kind::Plain => line::PLACE_LEASE,
        Kind::Read => return None,
    };
    Some(lease.clamp(SHORTEST_PLACE, longest))
}

/// The shortest a waiting place lives unconfirmed (see [`place_lease`]).
pub(crate) const SHORTEST_PLACE: Duration = Duration::from_millis(300);

/// Whether a refused attempt of `kind` leaves a place in Redis that
/// expires unless confirmed at least every returned interval (by attempting
/// again; a third of its [`place_lease`]) and should be left on giving up.
pub(crate) fn waiting_place(kind: Kind, lease: Duration) -> Option<Duration> {
    place_lease(kind, lease).map(|d| d / 3)
}

/// The longest any waiting place lives unconfirmed (the line's, the fair
/// queue's, the waiting writers').
pub(crate) const LONGEST_PLACE: Duration = {
    let (a, b, c) = (line::PLACE_LEASE, fair::QUEUE_LEASE, rwlock::WRITER_INTENT);
    let ab = if a.as_millis() > b.as_millis() { a } else { b };
    if ab.as_millis() > c.as_millis() {
        ab
    } else {
        c
    }
};

/// How the scripts publish, and how waiters listen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PubSub {
    /// `PUBLISH` / `SUBSCRIBE` (a single server, Sentinel, a cluster before
    /// Redis 7 or with sharded pub/sub turned off).
    Classic,
    /// `SPUBLISH` / `SSUBSCRIBE` (a Redis 7 cluster, as Redisson ≥ 3.22 does
    /// there): a message goes to the node of the channel's slot only, and
    /// `PUBSUB SHARDNUMSUB` counts the waiters there.
    Sharded,
}

impl PubSub {
    /// The script `source` as this mode runs it, keeping the source. The
    /// sources are written once, for classic pub/sub; the sharded variant is
    /// derived from them (every `'publish'` becomes `'spublish'`, every
    /// `'numsub'` becomes `'shardnumsub'`; a unit test checks that nothing
    /// else publishes).
    pub(crate) fn lua(self, source: &str) -> Lua {
        let source = match self {
            PubSub::Classic => source.to_owned(),
            PubSub::Sharded => source
                .replace("'publish'", "'spublish'")
                .replace("'numsub'", "'shardnumsub'"),
        };
        Lua {
            script: Script::new(&source),
            source,
        }
    }
}

/// Every kind's scripts, hashed once per process (one set per pub/sub mode,
/// [`Scripts::of`]): a call of them borrows nothing of a client's.
pub(crate) struct Scripts {
    plain: plain::PlainScripts,
    fair: fair::FairScripts,
    rw: rwlock::RwScripts,
    admin: admin::AdminScripts,
    semaphore: semaphore::SemaphoreScripts,
}

/// Every script as the library sends it to a server with classic pub/sub,
/// by name: what the protocol simulator (`tests/sim`) runs.
#[cfg(feature = "simulation")]
pub fn simulated() -> Vec<(&'static str, &'static str)> {
    let all = Scripts::of(PubSub::Classic);
    let (p, f, rw, s) = (&all.plain, &all.fair, &all.rw, &all.semaphore);
    vec![
        ("plain acquire", &p.acquire.source),
        ("plain fenced acquire", &p.acquire_fenced.source),
        ("plain release", &p.release.source),
        ("plain leave", &p.leave.source),
        ("fair acquire", &f.acquire.source),
        ("fair release", &f.release.source),
        ("fair cancel", &f.cancel.source),
        ("read acquire", &rw.read_acquire.source),
        ("write acquire", &rw.write_acquire.source),
        ("read release", &rw.read_release.source),
        ("write release", &rw.write_release.source),
        ("cancel writer", &rw.cancel_writer.source),
        ("semaphore acquire", &s.acquire.source),
        ("semaphore release", &s.release.source),
        ("semaphore leave", &s.leave.source),
        ("semaphore set permits", &s.set_permits.source),
        ("renew", renew::RENEW),
        job::simulated()[0],
        job::simulated()[1],
    ]
}

impl Scripts {
    /// The scripts of `pubsub` mode.
    pub(crate) fn of(pubsub: PubSub) -> &'static Scripts {
        static CLASSIC: LazyLock<Scripts> = LazyLock::new(|| Scripts::new(PubSub::Classic));
        static SHARDED: LazyLock<Scripts> = LazyLock::new(|| Scripts::new(PubSub::Sharded));
        match pubsub {
            PubSub::Classic => &CLASSIC,
            PubSub::Sharded => &SHARDED,
        }
    }

    fn new(pubsub: PubSub) -> Self {
        Scripts {
            plain: plain::PlainScripts::new(pubsub),
            fair: fair::FairScripts::new(pubsub),
            rw: rwlock::RwScripts::new(pubsub),
            admin: admin::AdminScripts::new(pubsub),
            semaphore: semaphore::SemaphoreScripts::new(pubsub),
        }
    }

    /// The semaphore's scripts.
    pub(crate) fn semaphore(&self) -> &semaphore::SemaphoreScripts {
        &self.semaphore
    }

    /// The acquire call of `req` as data, for any transport (see
    /// `conn::transport`).
    pub(crate) fn acquire_call(&'static self, req: &Request<'_>) -> Call {
        match req.kind {
            Kind::Plain => self.plain.acquire_call(req),
            Kind::Fair => self.fair.acquire_call(req),
            Kind::Read => self.rw.read_call(req),
            Kind::Write => self.rw.write_call(req),
        }
    }

    /// What the reply to an [`acquire_call`](Self::acquire_call) of `kind`
    /// says. Taken: nil, or a token (`{token}`; `{-1}`, a fenced re-entry,
    /// keeps the outer hold's). Held elsewhere: the holder's PTTL (-1: no
    /// expiry), or (plain, fair) `{flags, PTTL}`: `f` when the holder is
    /// another library's (plain), `j` when the waiter's place was new —
    /// and (plain, a waiter's place taken or confirmed) `{flags, PTTL,
    /// until}`, its element's expiry. -3: a write attempt of a reader (an
    /// upgrade).
    pub(crate) fn acquire_reply(kind: Kind, reply: Value) -> RedisResult<Attempt> {
        if let Some(what) = admin::shape_after_marker(&reply) {
            return Ok(Attempt::NotALock(what));
        }
        let wait = |ms: i64, flags: &[u8], until: Option<&i64>| Attempt::Wait {
            hint: u64::try_from(ms).ok().map(Duration::from_millis),
            foreign: flags.contains(&b'f'),
            joined: flags.contains(&b'j'),
            until: until.and_then(|&u| u64::try_from(u).ok()),
        };
        Ok(match reply {
            Value::Nil => Attempt::Acquired { minted: None },
            Value::Int(-3) if kind == Kind::Write => Attempt::Upgrade,
            Value::Int(ms) => wait(ms, b"", None),
            Value::Array(items) if matches!(kind, Kind::Plain | Kind::Fair) => {
                match items.as_slice() {
                    [Value::BulkString(flags), Value::Int(ms)] => wait(*ms, flags, None),
                    [Value::BulkString(flags), Value::Int(ms), Value::Int(until)] => {
                        wait(*ms, flags, Some(until))
                    }
                    _ => Attempt::Acquired {
                        minted: items.first().and_then(token),
                    },
                }
            }
            other => return Err(unexpected(&format!("{kind:?} acquire"), &other)),
        })
    }

    /// The release call of `rel` as data (see
    /// [`acquire_call`](Self::acquire_call)).
    pub(crate) fn release_call(&'static self, rel: &Release<'_>) -> Call {
        match rel.kind {
            Kind::Plain => self.plain.release_call(rel),
            Kind::Fair => self.fair.release_call(rel),
            Kind::Read => self.rw.read_release_call(rel),
            Kind::Write => self.rw.write_release_call(rel),
        }
    }

    /// What the reply to a [`release_call`](Self::release_call) says (every
    /// kind's: nil, 0, 1; and the plain lock's 2 or `{2, token}`, 3, 4).
    pub(crate) fn release_reply(kind: Kind, reply: Value) -> RedisResult<Released> {
        Ok(match reply {
            Value::Nil => Released::NotHeld,
            Value::Int(0) => Released::StillHeld,
            Value::Int(2) => Released::HandedOver { fence: None },
            Value::Array(items) => Released::HandedOver {
                fence: items.get(1).and_then(token),
            },
            Value::Int(3) => Released::FreedForOthers,
            Value::Int(4) => Released::Granted,
            Value::Int(_) => Released::Freed,
            other => return Err(unexpected(&format!("{kind:?} release"), &other)),
        })
    }

    /// A waiter of `owner` gives up its place in Redis: the line (`place`),
    /// the fair queue, or the waiting writers; nothing for a reader. True
    /// when a plain lock was granted to `owner` meanwhile (release it).
    pub(crate) fn leave(
        &self,
        con: &mut dyn ConnectionLike,
        kind: Kind,
        key: &str,
        owner: &str,
        place: Option<&str>,
    ) -> RedisResult<bool> {
        match (kind, place) {
            (Kind::Plain, Some(place)) => self.plain.leave(con, key, owner, place),
            (Kind::Fair, _) => self.fair.cancel(con, key, owner),
            (Kind::Write, _) => self.rw.cancel_writer(con, key, owner).map(|()| false),
            _ => Ok(false),
        }
    }
}

/// Whether an acquire script's reply (any lock kind's) says it took a hold:
/// nil, or a token (`{token}`, `{-1}`); not a wait (a PTTL, `{'f', PTTL}`)
/// nor a refusal (`{'n', …}`). What a replica acknowledgement waits after.
pub(crate) fn took_lock(reply: &Value) -> bool {
    *reply == Value::Nil || matches!(items(reply).first(), Some(Value::Int(_)))
}

/// The items of an array reply; none for any other reply.
fn items(reply: &Value) -> &[Value] {
    match reply {
        Value::Array(items) => items,
        _ => &[],
    }
}

/// What a message on a lock's channels says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Message {
    /// A grant (on a client's grant channel or a fair waiter's own
    /// channel): it names a waiting place (see [`parse_grant`]), for the
    /// waiter of that place to take.
    Grant,
    /// A read/write lock's write unlock (`1`, Redisson's
    /// `READ_UNLOCK_MESSAGE`): every waiter may try.
    WakeAll,
    /// Any other message (`0`, an unlock): one waiter may try.
    Unlock,
}

impl Message {
    /// What `payload` says.
    pub(crate) fn of(payload: &[u8]) -> Message {
        if payload.contains(&b'#') {
            Message::Grant
        } else if payload == rwlock::WAKE_ALL.as_bytes() {
            Message::WakeAll
        } else {
            Message::Unlock
        }
    }
}

/// One script call as data — what every transport sends (see
/// `conn::transport`): its `EVALSHA`, the script to load when the server
/// does not know it, and with replica acknowledgement a `WAIT` after it on
/// the same connection. The reply is read by the kind's `…_reply`
/// function, whatever sent it.
pub(crate) struct Call {
    /// The script (for `SCRIPT LOAD` when the server does not know it).
    pub(crate) script: &'static Script,
    /// Its source, as loaded (`SCRIPT LOAD <source>`; the tokio
    /// transport's, the blocking connection loads `script`).
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub(crate) source: &'static str,
    /// `EVALSHA <hash> <numkeys> <keys…> <args…>`, as sent.
    pub(crate) cmd: Packed,
    /// `WAIT` on the same connection once the script took a hold.
    pub(crate) wait: Option<Wait>,
}

/// A `WAIT <replicas> <timeout>` after a script whose reply `took` says it
/// took a hold (replica acknowledgement: `WAIT` counts the writes made on
/// the connection it is sent on).
#[derive(Clone, Copy)]
pub(crate) struct Wait {
    pub(crate) replicas: u32,
    pub(crate) timeout: Duration,
    pub(crate) took: fn(&Value) -> bool,
}

/// What a [`Call`] got: the script's reply, and how many replicas
/// acknowledged its writes when a `WAIT` followed it.
pub(crate) struct Reply {
    pub(crate) value: Value,
    pub(crate) acked: Option<u32>,
}

/// A script and the source it was made of (what [`Call`]s of it carry).
pub(crate) struct Lua {
    pub(crate) script: Script,
    pub(crate) source: String,
}

impl Lua {
    /// `EVALSHA <hash> <numkeys> <keys…> <args…>` of this script, the first
    /// `numkeys` of `keys_and_args` its keys: written once, as sent (see
    /// `packed`), sized for the lock path's calls at once.
    fn cmd(&self, numkeys: usize, keys_and_args: impl ToRedisArgs) -> Packed {
        let hash = self.script.get_hash();
        Packed::new(512, ("EVALSHA", hash, numkeys, keys_and_args))
    }

    /// A call of this script (see [`cmd`](Self::cmd)) as data.
    pub(crate) fn call(&'static self, numkeys: usize, keys_and_args: impl ToRedisArgs) -> Call {
        Call {
            script: &self.script,
            source: &self.source,
            cmd: self.cmd(numkeys, keys_and_args),
            wait: None,
        }
    }

    /// Runs a call of this script on `con` (see [`run`]) and reads its reply.
    pub(crate) fn query<T: FromRedisValue>(
        &self,
        con: &mut dyn ConnectionLike,
        numkeys: usize,
        keys_and_args: impl ToRedisArgs,
    ) -> RedisResult<T> {
        run(con, &self.script, &self.cmd(numkeys, keys_and_args))
    }
}

impl Call {
    /// The same call followed by `wait` (replica acknowledgement).
    pub(crate) fn then_wait(self, wait: Option<Wait>) -> Call {
        Call { wait, ..self }
    }

    /// Runs it on `con` (see [`run`]), then its `WAIT` if it took a hold.
    pub(crate) fn run(&self, con: &mut dyn ConnectionLike) -> RedisResult<Reply> {
        let value: Value = run(con, self.script, &self.cmd)?;
        let acked = match self.wait {
            Some(w) if (w.took)(&value) => {
                let acked: i64 = redis::cmd("WAIT")
                    .arg(w.replicas)
                    .arg(millis(w.timeout))
                    .query(con)?;
                Some(u32::try_from(acked.max(0)).unwrap_or(u32::MAX))
            }
            _ => None,
        };
        Ok(Reply { value, acked })
    }
}

/// Runs an `EVALSHA`; when the server does not know the script (restarted,
/// `SCRIPT FLUSH`) loads it and sends the command once more.
fn run<T: FromRedisValue>(
    con: &mut dyn ConnectionLike,
    script: &Script,
    cmd: &Packed,
) -> RedisResult<T> {
    let query = |con: &mut dyn ConnectionLike| -> RedisResult<T> {
        let value = con.req_packed_command(cmd.bytes())?.extract_error()?;
        Ok(redis::from_redis_value(value)?)
    };
    match query(con) {
        Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
            script.prepare_invoke().load(con)?;
            query(con)
        }
        other => other,
    }
}

/// A token in a script reply (positive integer).
fn token(v: &Value) -> Option<u64> {
    match v {
        Value::Int(n) if *n > 0 => Some(*n as u64),
        _ => None,
    }
}

fn unexpected(what: &str, v: &Value) -> redis::RedisError {
    redis::RedisError::from((
        ErrorKind::Client,
        "unexpected reply from the lock script",
        format!("{what}: {v:?}"),
    ))
}

/// Milliseconds for `PEXPIRE`, at least 1 (0 would delete the key at once).
pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}

#[cfg(test)]
mod tests;
