//! What each lock kind sends to Redis: Lua scripts and their replies, with no
//! threads, pools or waiting. [`Scripts`] is the one dispatch on [`Kind`]:
//! one acquire, one release, one "leave my waiting place" for every kind, each
//! answered in one shape ([`Attempt`], [`Released`]) so that the layers above
//! never match on the kind to read a reply.
//!
//! - `plain` — Redisson's `RLock` (and its fenced variant);
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
pub(crate) mod fair;
pub(crate) mod plain;
pub(crate) mod renew;
pub(crate) mod rwlock;
pub(crate) mod semaphore;

use std::borrow::Cow;
use std::time::Duration;

use redis::{
    Cmd, ConnectionLike, ErrorKind, FromRedisValue, RedisResult, Script, ServerErrorKind, Value,
};

use crate::names::{channel_name, rw_channel, waiter_channel, write_field};
use crate::options::Kind;

pub(crate) use plain::{parse_grant, Fence, Successor, ACQUIRE, GRANT_LEASE, RELEASE};
pub(crate) use rwlock::READ_KEEPALIVE;

/// One acquire attempt of any kind.
pub(crate) struct Request<'a> {
    pub(crate) kind: Kind,
    pub(crate) key: &'a str,
    /// The client's owner id (`<uuid>:<n>`), not the hash field.
    pub(crate) owner: &'a str,
    pub(crate) lease: Duration,
    /// Plain: no guard of this owner is alive in its client, so a count Redis
    /// still shows for it is stale (see `plain::ACQUIRE`).
    pub(crate) fresh: bool,
    /// Plain and fair: whether (and how) to deal in fencing tokens.
    pub(crate) fence: Fence,
    /// Plain: the waiter's place in the line of waiting clients (see
    /// [`place_of`]), taken or confirmed when the lock is held elsewhere;
    /// fair: the mark of its queue entry. `None` for a single try (plain:
    /// no place; fair: no grant).
    pub(crate) place: Option<&'a str>,
}

impl Request<'_> {
    /// The same request owning its strings (to send from another thread).
    pub(crate) fn to_owned(&self) -> OwnedRequest {
        OwnedRequest {
            kind: self.kind,
            key: self.key.to_owned(),
            owner: self.owner.to_owned(),
            lease: self.lease,
            fresh: self.fresh,
            fence: self.fence,
            place: self.place.map(str::to_owned),
        }
    }
}

/// A [`Request`] that owns its strings.
#[derive(Debug, Clone)]
pub(crate) struct OwnedRequest {
    kind: Kind,
    key: String,
    owner: String,
    lease: Duration,
    pub(crate) fresh: bool,
    fence: Fence,
    place: Option<String>,
}

impl OwnedRequest {
    /// The request it holds.
    pub(crate) fn request(&self) -> Request<'_> {
        Request {
            kind: self.kind,
            key: &self.key,
            owner: &self.owner,
            lease: self.lease,
            fresh: self.fresh,
            fence: self.fence,
            place: self.place.as_deref(),
        }
    }
}

/// What an acquire attempt found, for every kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
    },
    /// Read/write: the owner reads and asked to write, which would wait for
    /// itself.
    Upgrade,
}

/// One release of any kind.
pub(crate) struct Release<'a> {
    pub(crate) kind: Kind,
    pub(crate) key: &'a str,
    /// The hash field of the hold (see [`hold_field`]).
    pub(crate) field: &'a str,
    /// What remaining reentrant holds keep (plain, fair).
    pub(crate) lease: Duration,
    /// No other guard of this owner (hold field) is alive in the client: a
    /// count Redis shows beyond this hold is stale, and all of it goes.
    pub(crate) last: bool,
    /// Plain: a thread of this client the lock may pass to directly.
    pub(crate) successor: Option<Successor<'a>>,
}

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
        Kind::Plain => channel_name(key),
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
/// for `lease`: that lease, but at most [`GRANT_LEASE`] — short, so a
/// granted waiter that died or stalled costs the others no more than its
/// own lease, and never a whole watchdog lease (its renewal lengthens it).
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
        Kind::Plain => plain::PLACE_LEASE,
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
    let (a, b, c) = (plain::PLACE_LEASE, fair::QUEUE_LEASE, rwlock::WRITER_INTENT);
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
    /// The script `source` as this mode runs it. The sources are written
    /// once, for classic pub/sub; the sharded variant is derived from them
    /// (every `'publish'` becomes `'spublish'`, every `'numsub'` becomes
    /// `'shardnumsub'`; a unit test checks that nothing else publishes).
    pub(crate) fn script(self, source: &str) -> Script {
        match self {
            PubSub::Classic => Script::new(source),
            PubSub::Sharded => Script::new(&Self::sharded(source)),
        }
    }

    fn sharded(source: &str) -> String {
        source
            .replace("'publish'", "'spublish'")
            .replace("'numsub'", "'shardnumsub'")
    }
}

/// Every kind's scripts, hashed once per client.
pub(crate) struct Scripts {
    plain: plain::PlainScripts,
    fair: fair::FairScripts,
    rw: rwlock::RwScripts,
    admin: admin::AdminScripts,
    semaphore: semaphore::SemaphoreScripts,
}

impl Scripts {
    pub(crate) fn new(pubsub: PubSub) -> Self {
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

    /// Deletes lock `key` of any kind and wakes its waiters (an operator's
    /// tool) — unless the key is not a lock.
    pub(crate) fn force_unlock(
        &self,
        con: &mut dyn ConnectionLike,
        key: &str,
    ) -> RedisResult<admin::Forced> {
        self.admin.force_unlock(con, key)
    }

    /// What `key` is: a lock, nothing, or something else (an operator's
    /// read).
    pub(crate) fn shape(
        &self,
        con: &mut dyn ConnectionLike,
        key: &str,
    ) -> RedisResult<admin::Shape> {
        self.admin.shape(con, key)
    }

    /// One acquire script (one `EVALSHA`, plus `SCRIPT LOAD` and a retry
    /// only when the server's script cache was flushed).
    pub(crate) fn acquire(
        &self,
        con: &mut dyn ConnectionLike,
        req: &Request<'_>,
    ) -> RedisResult<Attempt> {
        let (key, owner, lease) = (req.key, req.owner, req.lease);
        Ok(match req.kind {
            Kind::Plain => match self
                .plain
                .acquire(con, key, owner, lease, req.fresh, req.fence, req.place)?
            {
                plain::Acquire::Acquired { fence } => Attempt::Acquired { minted: fence },
                plain::Acquire::HeldElsewhere { ttl, foreign } => {
                    Attempt::Wait { hint: ttl, foreign }
                }
            },
            Kind::Fair => {
                match self.fair.acquire(
                    con,
                    key,
                    owner,
                    lease,
                    req.fence != Fence::None,
                    req.place,
                )? {
                    fair::FairAcquire::Acquired(minted) => Attempt::Acquired {
                        minted: minted.flatten(),
                    },
                    fair::FairAcquire::Queued(wait) => Attempt::Wait {
                        hint: wait,
                        foreign: false,
                    },
                }
            }
            Kind::Read | Kind::Write => {
                let reply = if req.kind == Kind::Write {
                    self.rw.write(con, key, owner, lease)?
                } else {
                    self.rw.read(con, key, owner, lease)?
                };
                match reply {
                    rwlock::RwAcquire::Acquired => Attempt::Acquired { minted: None },
                    rwlock::RwAcquire::Wait(hint) => Attempt::Wait {
                        hint,
                        foreign: false,
                    },
                    rwlock::RwAcquire::Upgrade => Attempt::Upgrade,
                }
            }
        })
    }

    /// One release script.
    pub(crate) fn release(
        &self,
        con: &mut dyn ConnectionLike,
        rel: &Release<'_>,
    ) -> RedisResult<Released> {
        let counted = |freed: Option<bool>| match freed {
            Some(true) => Released::Freed,
            Some(false) => Released::StillHeld,
            None => Released::NotHeld,
        };
        Ok(match rel.kind {
            Kind::Plain => {
                self.plain
                    .release(con, rel.key, rel.field, rel.lease, rel.last, rel.successor)?
            }
            Kind::Fair => counted(
                self.fair
                    .release(con, rel.key, rel.field, rel.lease, rel.last)?,
            ),
            Kind::Read => counted(self.rw.read_release(con, rel.key, rel.field, rel.last)?),
            Kind::Write => counted(self.rw.write_release(con, rel.key, rel.field, rel.last)?),
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

/// `EVALSHA <hash> <numkeys>`, to be followed by keys and arguments: built in
/// one buffer (the crate's `ScriptInvocation` copies every argument twice).
fn evalsha(script: &Script, numkeys: usize) -> Cmd {
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(script.get_hash()).arg(numkeys);
    cmd
}

/// Runs an `EVALSHA`; when the server does not know the script (restarted,
/// `SCRIPT FLUSH`) loads it and sends the command once more.
fn run<T: FromRedisValue>(
    con: &mut dyn ConnectionLike,
    script: &Script,
    cmd: &Cmd,
) -> RedisResult<T> {
    match cmd.query(con) {
        Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
            script.prepare_invoke().load(con)?;
            cmd.query(con)
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
mod tests {
    use super::*;

    #[test]
    fn millis_never_zero() {
        assert_eq!(millis(Duration::from_micros(10)), 1);
        assert_eq!(millis(Duration::from_secs(30)), 30_000);
        assert_eq!(millis(Duration::MAX), u64::MAX);
    }

    /// Every script source the lock path sends.
    fn all_sources() -> Vec<&'static str> {
        vec![
            plain::ACQUIRE,
            plain::ACQUIRE_FENCED,
            plain::RELEASE,
            plain::LEAVE,
            renew::RENEW,
            fair::PURGE,
            fair::ACQUIRE,
            fair::RELEASE,
            fair::CANCEL,
            rwlock::NOW,
            rwlock::READ_ACQUIRE,
            rwlock::WRITE_ACQUIRE,
            rwlock::READ_RELEASE,
            rwlock::WRITE_RELEASE,
            rwlock::CANCEL_WRITER,
            admin::FORCE_UNLOCK,
            admin::SHAPE,
            semaphore::ACQUIRE,
            semaphore::RELEASE,
            semaphore::LEAVE,
            semaphore::SET_PERMITS,
            semaphore::ADD_PERMITS,
            semaphore::AVAILABLE,
            semaphore::INSPECT,
        ]
    }

    /// Every key a script touches is one of its `KEYS` (Redis's scripting
    /// contract; Redis Functions and Dragonfly's default mode enforce it):
    /// no key command's key is built with `..` in Lua, directly or through
    /// a local, and fencing tokens are minted only from a declared key. Lua
    /// names channels only. The exceptions are Redisson's read/write
    /// layout: a read hold's timeout keys
    /// `{<key>}:<owner>:rwlock_timeout:<n>` are numbered by the hold count
    /// in Redis, so no caller can name them beforehand (Redisson's own
    /// scripts build them the same way).
    #[test]
    fn every_key_a_script_touches_is_declared_but_redissons_read_timeouts() {
        let redissons = [rwlock::READ_ACQUIRE, rwlock::READ_RELEASE, renew::RENEW];
        for source in all_sources() {
            let code: Vec<&str> = source
                .lines()
                .map(|l| l.split("--").next().unwrap_or(""))
                .collect();
            // Locals bound to a concatenation.
            let concatenated: Vec<&str> = code
                .iter()
                .filter_map(|l| l.trim().strip_prefix("local "))
                .filter_map(|l| l.split_once('='))
                .filter(|(_, value)| value.contains(".."))
                .map(|(name, _)| name.trim())
                .collect();
            let code = code.join("\n");
            let mut built = Vec::new();
            for call in code.split("redis.call('").skip(1) {
                let (cmd, rest) = call.split_once('\'').unwrap();
                if matches!(cmd, "publish" | "spublish" | "pubsub" | "time") {
                    continue;
                }
                let Some(args) = rest.trim_start().strip_prefix(',') else {
                    continue;
                };
                let key = args.split([',', ')']).next().unwrap().trim();
                if key.contains("..") || concatenated.contains(&key) {
                    built.push(format!("{cmd} {key}"));
                }
            }
            for minted in code.split("mint(").skip(1) {
                if !minted.starts_with("KEYS[") && !minted.starts_with("key)") {
                    built.push(format!("mint({}", &minted[..minted.len().min(20)]));
                }
            }
            assert_eq!(
                !built.is_empty(),
                redissons.contains(&source),
                "keys built in Lua: {built:?} in\n{source}"
            );
        }
    }

    /// The commands a script calls: `redis.call('cmd'` (with the
    /// subcommand for `pubsub`), as ACL rules.
    fn called(source: &str) -> Vec<String> {
        source
            .split("redis.call('")
            .skip(1)
            .map(|rest| {
                let cmd = &rest[..rest.find('\'').unwrap()];
                if cmd == "pubsub" {
                    let sub = rest.split('\'').nth(2).unwrap();
                    format!("+{cmd}|{sub}")
                } else {
                    format!("+{cmd}")
                }
            })
            .collect()
    }

    #[test]
    fn the_acl_rules_grant_every_command_of_every_script() {
        let classic = crate::names::acl_rules("p:", false, false);
        let cluster = crate::names::acl_rules("p:", false, true);
        for source in all_sources() {
            for cmd in called(source) {
                assert!(classic.contains(&cmd), "{cmd} of {source}");
            }
            for cmd in called(&PubSub::sharded(source)) {
                assert!(cluster.contains(&cmd), "sharded: {cmd} of {source}");
            }
        }
    }

    #[test]
    fn sharded_scripts_publish_and_count_only_sharded() {
        let sources = all_sources();
        let mut published = 0;
        for source in sources {
            let sharded = PubSub::sharded(source);
            published += sharded.matches("'spublish'").count();
            // No other way to publish or count subscribers is left behind.
            let lower = sharded.to_lowercase();
            assert_eq!(
                lower.matches("publish").count(),
                lower.matches("spublish").count(),
                "{source}"
            );
            assert_eq!(
                lower.matches("numsub").count(),
                lower.matches("shardnumsub").count(),
                "{source}"
            );
        }
        assert!(published >= 8, "every release publishes: {published}");
    }

    #[test]
    fn a_place_names_the_lease_its_grant_sets_never_longer_than_the_waiters() {
        let second = Duration::from_secs(1);
        assert_eq!(place_of("u:1", 7, second, true), "u:1#7@1000/1000f");
        assert_eq!(place_of("u:1", 8, second * 30, false), "u:1#8@3000/3000");
        let short = Duration::from_millis(50);
        assert_eq!(place_of("u:1", 9, short, false), "u:1#9@50/300");
        assert_eq!(grant_lease(second), second);
        assert_eq!(grant_lease(second * 30), GRANT_LEASE);
        assert_eq!(place_lease(Kind::Plain, second), Some(second));
        assert_eq!(place_lease(Kind::Write, short), Some(SHORTEST_PLACE));
        assert_eq!(
            place_lease(Kind::Fair, second * 30),
            Some(fair::QUEUE_LEASE)
        );
        assert_eq!(place_lease(Kind::Read, second), None);
        assert_eq!(waiting_place(Kind::Write, second * 3), Some(second));
        for kind in [Kind::Plain, Kind::Fair, Kind::Write] {
            let longest = place_lease(kind, Duration::MAX).unwrap();
            assert!(longest <= LONGEST_PLACE, "{kind:?}");
        }
    }

    #[test]
    fn messages_are_grants_wake_alls_or_unlocks() {
        assert_eq!(Message::of(b"u:1#7@3000/3000"), Message::Grant);
        assert_eq!(Message::of(b"u:1#7@3000/3000f 12"), Message::Grant);
        assert_eq!(Message::of(b"1"), Message::WakeAll);
        assert_eq!(Message::of(b"0"), Message::Unlock);
        assert_eq!(Message::of(b""), Message::Unlock);
    }

    #[test]
    fn a_write_hold_has_its_own_field() {
        assert_eq!(hold_field(Kind::Write, "u:1"), "u:1:write");
        assert_eq!(hold_field(Kind::Read, "u:1"), "u:1");
        assert_eq!(hold_field(Kind::Plain, "u:1"), "u:1");
        for kind in [Kind::Plain, Kind::Fair, Kind::Read, Kind::Write] {
            assert_eq!(owner_of_field(kind, &hold_field(kind, "u:1")), "u:1");
        }
    }
}
