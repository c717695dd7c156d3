//! Names in Redis: every key and channel of Redisson's lock layouts (plain,
//! fenced, fair, read/write) and its expirable semaphore, derived from the lock key, plus the short client
//! id shown in logs. Pure string functions, no I/O.
//!
//! Companion keys carry the lock key's hash tag (`{<key>}`, or the key's own
//! tag when it has braces), so every key and channel of one lock lands in the
//! lock key's Redis Cluster slot — as Redisson's `prefixName`/`suffixName`
//! make them.

use std::fmt;

/// A companion name of a lock key, as Redisson's `prefixName` makes it:
/// `<prefix>:{<key>}`, or `<prefix>:<key>` when the key has braces of its
/// own, so that its own hash tag decides the slot of both.
pub(crate) fn prefix_name(prefix: &str, key: &str) -> String {
    let mut s = String::with_capacity(prefix.len() + key.len() + 3);
    s.push_str(prefix);
    s.push(':');
    push_tagged(&mut s, key);
    s
}

/// A companion key of a lock key as Redisson's `suffixName` makes it:
/// `{<key>}:<suffix>`, or `<key>:<suffix>` when the key has braces.
pub(crate) fn suffix_name(key: &str, suffix: &str) -> String {
    let mut s = String::with_capacity(key.len() + suffix.len() + 3);
    push_tagged(&mut s, key);
    s.push(':');
    s.push_str(suffix);
    s
}

/// `{<key>}`, or the key itself when it has braces.
pub(crate) fn push_tagged(s: &mut String, key: &str) {
    if key.contains('{') {
        s.push_str(key);
    } else {
        s.push('{');
        s.push_str(key);
        s.push('}');
    }
}

/// A companion name of a lock key as [`prefix_name`] makes it, with a
/// suffix — written where it goes (a command's argument: no `String` of its
/// own; the lock path names five of them per call) or made a `String`
/// (`to_string`). The names of the plain lock's path are these.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Companion<'k> {
    prefix: &'static str,
    key: &'k str,
    suffix: &'static str,
}

impl fmt::Display for Companion<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for part in self.parts() {
            f.write_str(part)?;
        }
        Ok(())
    }
}

impl Companion<'_> {
    /// The name's parts in order (what [`Display`](fmt::Display) writes).
    fn parts(&self) -> [&str; 6] {
        let (open, close) = if self.key.contains('{') {
            ("", "")
        } else {
            ("{", "}")
        };
        [self.prefix, ":", open, self.key, close, self.suffix]
    }
}

impl redis::ToRedisArgs for Companion<'_> {
    /// The parts written straight into the command (no formatting machinery:
    /// the lock path names six companions per lock + unlock pair).
    fn write_redis_args<W: ?Sized + redis::RedisWrite>(&self, out: &mut W) {
        use std::io::Write;
        let mut arg = out.writer_for_next_arg();
        for part in self.parts() {
            // Into the command's own buffer: it cannot fail.
            let _ = arg.write_all(part.as_bytes());
        }
    }
}

/// The unlock channel of a lock key (Redisson's `redisson_lock__channel:{name}`).
pub(crate) fn channel_name(key: &str) -> Companion<'_> {
    Companion {
        prefix: "redisson_lock__channel",
        key,
        suffix: "",
    }
}

/// The fencing-token counter of a lock key (Redisson's
/// `redisson_lock_token:{name}`).
pub(crate) fn token_key(key: &str) -> Companion<'_> {
    Companion {
        prefix: "redisson_lock_token",
        key,
        suffix: "",
    }
}

/// The queue list of a fair lock key.
pub(crate) fn queue_key(key: &str) -> String {
    prefix_name("redisson_lock_queue", key)
}

/// The timeout zset of a fair lock key.
pub(crate) fn timeout_key(key: &str) -> String {
    prefix_name("redisson_lock_timeout", key)
}

/// Which fair-queue entries are leasehold waiters, and their places:
/// `leasehold_fair:{<key>}`.
pub(crate) fn fair_marks_key(key: &str) -> String {
    prefix_name("leasehold_fair", key)
}

/// The channel on which fair waiter `owner` is woken when it is next.
pub(crate) fn waiter_channel(key: &str, owner: &str) -> String {
    format!("{}:{owner}", channel_name(key))
}

/// The read/write lock's channel, `redisson_rwlock:{<key>}`.
pub(crate) fn rw_channel(key: &str) -> String {
    prefix_name("redisson_rwlock", key)
}

/// The prefix of `owner`'s read timeout keys:
/// `{<key>}:<owner>:rwlock_timeout` (`:<n>` is appended per hold).
pub(crate) fn timeout_prefix(key: &str, owner: &str) -> String {
    format!("{}:rwlock_timeout", suffix_name(key, owner))
}

/// The set of waiting writers, `{<key>}:rwlock_write_waiters`.
pub(crate) fn writers_key(key: &str) -> String {
    suffix_name(key, "rwlock_write_waiters")
}

/// The hash field of `owner`'s write holds.
pub(crate) fn write_field(owner: &str) -> String {
    format!("{owner}:write")
}

/// The line of waiting leasehold clients of a plain lock key (a list of
/// elements `<until>|<place>`, one per waiting client, oldest first:
/// `protocol::line`): `leasehold_line:{<key>}`.
pub(crate) fn line_key(key: &str) -> Companion<'_> {
    line_named(key, "")
}

/// The run of direct grants made while other libraries' waiters were
/// subscribed, or `y` while the lock is left to them: `<line>:yield`.
pub(crate) fn line_yield_key(key: &str) -> Companion<'_> {
    line_named(key, ":yield")
}

/// The line of a lock key, and its companions (`suffix`).
fn line_named<'k>(key: &'k str, suffix: &'static str) -> Companion<'k> {
    Companion {
        prefix: "leasehold_line",
        key,
        suffix,
    }
}

/// The start of every grant channel of a plain lock key,
/// `leasehold_grant:{<key>}:`; a client's own is this plus its id (see
/// [`grant_channel`]). A release that gives the lock to a waiting client
/// publishes on that client's channel only.
pub(crate) fn grant_prefix(key: &str) -> String {
    format!("{}:", prefix_name("leasehold_grant", key))
}

/// The channel on which client `id` hears that a release gave it lock
/// `key`.
pub(crate) fn grant_channel(key: &str, id: &str) -> String {
    format!("{}{id}", grant_prefix(key))
}

/// Every command the lock path sends, directly or inside its scripts, as
/// ACL rules (space-separated, as `ACL SETUSER` takes them).
const ACL_COMMANDS: &str = "+evalsha +script|load +ping +type \
    +subscribe +unsubscribe +publish +pubsub|numsub +time \
    +exists +get +set +psetex +del +pexpire +pttl \
    +hexists +hget +hgetall +hset +hdel +hincrby +hlen +hkeys \
    +lindex +llen +lpop +lrange +lpush +rpush +lrem +lpos +lset \
    +zadd +zrem +zrange +zrangebyscore +zremrangebyscore +zcard +zscore +zcount \
    +incrby +decrby";

/// What a cluster adds: its table, redirects, sharded pub/sub (Redis ≥ 7).
const ACL_CLUSTER: &str =
    "+cluster|slots +asking +spublish +ssubscribe +sunsubscribe +pubsub|shardnumsub";

/// The keys and channel of a semaphore whose counter is `key`: Redisson's
/// `RPermitExpirableSemaphore` layout — the counter of available permits
/// `<key>`, the lease table `{<key>}:timeout` (a sorted set of permit ids
/// scored by expiry, epoch ms) and the channel `redisson_sc:{<key>}` — plus
/// leasehold's line of waiting acquisitions `leasehold_sline:{<key>}` (a
/// list of places) and its hash `<line>:places` (each place → until when it
/// lives, ms by the server's clock, and the permit ids its waiter will be
/// granted). Companions follow Redisson's brace rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SemaphoreKeys {
    pub(crate) counter: String,
    pub(crate) timeout: String,
    pub(crate) channel: String,
    pub(crate) line: String,
    pub(crate) places: String,
}

impl SemaphoreKeys {
    pub(crate) fn of(key: &str) -> Self {
        let line = prefix_name(SEMAPHORE_LINE, key);
        SemaphoreKeys {
            counter: key.to_owned(),
            timeout: suffix_name(key, "timeout"),
            channel: prefix_name("redisson_sc", key),
            places: format!("{line}:places"),
            line,
        }
    }

    /// The channel on which client `id` hears that a release granted one of
    /// its waiting acquisitions its permits:
    /// `leasehold_sgrant:{<key>}:<id>` (the scripts derive it from the line
    /// key; a test checks that both agree).
    pub(crate) fn grant_channel(&self, id: &str) -> String {
        let tail = &self.line[SEMAPHORE_LINE.len()..];
        format!("{SEMAPHORE_GRANT}{tail}:{id}")
    }
}

/// Lowercase hex of `bytes` (Redisson's form of a permit id).
pub(crate) fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

/// What a semaphore's line and grant channels are named after.
pub(crate) const SEMAPHORE_LINE: &str = "leasehold_sline";
pub(crate) const SEMAPHORE_GRANT: &str = "leasehold_sgrant";
/// What the channel leasehold's waiters of a semaphore subscribe beside
/// Redisson's is named after (see [`semaphore_waiters`]).
pub(crate) const SEMAPHORE_WAITERS: &str = "leasehold_swait";

/// The channel every leasehold client waiting on a semaphore subscribes
/// beside its Redisson channel `channel` (`redisson_sc:{<key>}`), and that
/// nobody publishes on: `leasehold_swait:{<key>}`. `PUBSUB NUMSUB` of both
/// tells a release how many of Redisson's channel's subscribers are not
/// leasehold's — Redisson's waiters, to leave their share to. The scripts
/// derive it the same way (a test checks that both agree). `None` for a
/// channel that is no semaphore's.
pub(crate) fn semaphore_waiters(channel: &str) -> Option<String> {
    channel
        .strip_prefix("redisson_sc")
        .map(|tail| format!("{SEMAPHORE_WAITERS}{tail}"))
}

/// [`LockClient::acl_rules`](crate::LockClient::acl_rules) under
/// `key_prefix`: the commands, the keys of each layout and the channels,
/// both forms of each companion name (`{<key>}`, and the key's own hash tag
/// when it has braces); `replicas`: `WAIT` too; `cluster`: [`ACL_CLUSTER`].
pub(crate) fn acl_rules(key_prefix: &str, replicas: bool, cluster: bool) -> Vec<String> {
    let p = key_prefix;
    let mut rules: Vec<String> = ACL_COMMANDS.split_whitespace().map(str::to_owned).collect();
    if replicas {
        rules.push("+wait".into());
    }
    if cluster {
        rules.extend(ACL_CLUSTER.split_whitespace().map(str::to_owned));
    }
    // Lock keys; read/write companions `{<key>}:…` (own tag: `<key>:…`).
    // Without a prefix, `~*` is every key (and Redis refuses a key pattern
    // after it).
    rules.push(format!("~{p}*"));
    let keys = !p.is_empty();
    if keys {
        rules.push(format!("~{{{p}*"));
    }
    // Channels from none: see `resetchannels` on `LockClient::acl_rules`.
    rules.push("resetchannels".into());
    let mut companion = |kind: char, name: &str| {
        rules.push(format!("{kind}{name}:{{{p}*"));
        if !p.is_empty() {
            rules.push(format!("{kind}{name}:{p}*"));
        }
    };
    for key in [
        "redisson_lock__channel", // named among a release script's keys
        "redisson_lock_token",
        "leasehold_line",
        "redisson_lock_queue",
        "redisson_lock_timeout",
        "leasehold_fair",
        "redisson_rwlock",
        "redisson_sc", // named among a semaphore script's keys
        SEMAPHORE_LINE,
    ] {
        if keys {
            companion('~', key);
        }
    }
    for channel in [
        "redisson_lock__channel",
        "leasehold_grant",
        "redisson_rwlock",
        "redisson_sc",
        SEMAPHORE_GRANT,
        SEMAPHORE_WAITERS,
    ] {
        companion('&', channel);
    }
    rules
}

/// The registration key of client `id` under `key_prefix`:
/// `<prefix>leasehold_client:<id>` (see `renewal::registration`). Under the
/// prefix, so a prefix-limited ACL user may write it.
pub(crate) fn client_key(key_prefix: &str, id: &str) -> String {
    format!("{key_prefix}leasehold_client:{id}")
}

/// A new client id: random, as a version 4 UUID is, but marked version 8
/// (RFC 9562's "custom"): the owners of leasehold's holds
/// (`<id>:<n>`) are told from Redisson's (random version 4 ids) by the
/// version digit, the 15th character — see the scripts' `ours()`.
pub(crate) fn new_client_id() -> uuid::Uuid {
    uuid::Builder::from_custom_bytes(uuid::Uuid::new_v4().into_bytes()).into_uuid()
}

/// The first 8 hex digits of a client id: enough to tell clients apart in
/// logs, not enough to forge an owner.
pub(crate) fn short_id(id: &uuid::Uuid) -> String {
    id.simple().to_string()[..8].to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_ids_are_random_and_carry_version_8_at_the_15th_character() {
        let (a, b) = (new_client_id(), new_client_id());
        assert_ne!(a, b);
        for id in [a, b] {
            assert_eq!(id.get_version_num(), 8);
            let owner = format!("{id}:7");
            assert_eq!(owner.as_bytes()[14], b'8', "{owner}");
        }
        // Redisson's (`UUID.randomUUID()`) say 4 there.
        assert_eq!(format!("{}:1", uuid::Uuid::new_v4()).as_bytes()[14], b'4');
    }

    #[test]
    fn plain_and_fenced_names_are_redissons() {
        assert_eq!(
            channel_name("order:pay").to_string(),
            "redisson_lock__channel:{order:pay}"
        );
        assert_eq!(
            token_key("order:pay").to_string(),
            "redisson_lock_token:{order:pay}"
        );
        // A name with its own hash tag keeps it (Redisson's prefixName).
        assert_eq!(
            channel_name("{user:7}:cart").to_string(),
            "redisson_lock__channel:{user:7}:cart"
        );
        assert_eq!(token_key("a{t}b").to_string(), "redisson_lock_token:a{t}b");
        assert_eq!(queue_key("q"), "redisson_lock_queue:{q}");
        assert_eq!(timeout_key("q"), "redisson_lock_timeout:{q}");
        assert_eq!(waiter_channel("q", "u:1"), "redisson_lock__channel:{q}:u:1");
    }

    #[test]
    fn a_companion_as_a_command_argument_is_its_name() {
        use redis::ToRedisArgs;
        for name in [
            channel_name("order:pay"),
            line_key("{user:7}:cart"),
            line_yield_key("a{t}b"),
            token_key(""),
        ] {
            assert_eq!(name.to_redis_args(), vec![name.to_string().into_bytes()]);
        }
        assert_eq!(line_key("job").to_string(), "leasehold_line:{job}");
    }

    #[test]
    fn read_write_names_are_redissons() {
        assert_eq!(rw_channel("doc"), "redisson_rwlock:{doc}");
        assert_eq!(timeout_prefix("doc", "u:7"), "{doc}:u:7:rwlock_timeout");
        assert_eq!(writers_key("doc"), "{doc}:rwlock_write_waiters");
        assert_eq!(write_field("u:7"), "u:7:write");
        // A key with its own hash tag keeps it.
        assert_eq!(
            timeout_prefix("app:{doc}", "u:7"),
            "app:{doc}:u:7:rwlock_timeout"
        );
        assert_eq!(rw_channel("app:{doc}"), "redisson_rwlock:app:{doc}");
    }

    #[test]
    fn line_names_share_the_lock_keys_slot() {
        assert_eq!(line_key("job").to_string(), "leasehold_line:{job}");
        assert_eq!(
            line_yield_key("a{t}b").to_string(),
            "leasehold_line:a{t}b:yield"
        );
        assert_eq!(grant_channel("job", "9f1c"), "leasehold_grant:{job}:9f1c");
    }

    /// `*`-only glob, as Redis matches ACL key and channel patterns here.
    fn glob(pattern: &str, s: &str) -> bool {
        match pattern.split_once('*') {
            None => pattern == s,
            Some((head, rest)) => {
                s.starts_with(head)
                    && (0..=s.len() - head.len()).any(|i| {
                        s.is_char_boundary(head.len() + i) && glob(rest, &s[head.len() + i..])
                    })
            }
        }
    }

    #[test]
    fn the_acl_rules_name_no_key_pattern_after_every_key() {
        // Redis refuses `ACL SETUSER … ~* ~{*`: "Adding a pattern after the
        // * pattern is not valid".
        for cluster in [false, true] {
            let rules = acl_rules("", true, cluster);
            let keys: Vec<&String> = rules.iter().filter(|r| r.starts_with('~')).collect();
            assert_eq!(keys, ["~*"], "{rules:?}");
        }
    }

    #[test]
    fn the_acl_rules_cover_every_key_and_channel_of_every_kind() {
        for (prefix, name) in [
            ("billing:", "inv:7"),
            ("billing:", "{user:1}:cart"),
            ("", "job"),
        ] {
            let rules = acl_rules(prefix, false, false);
            let covered = |kind: char, s: &str| {
                rules
                    .iter()
                    .any(|r| r.starts_with(kind) && glob(&r[1..], s))
            };
            let key = format!("{prefix}{name}");
            let keys = [
                key.clone(),
                token_key(&key).to_string(),
                channel_name(&key).to_string(),
                line_key(&key).to_string(),
                line_yield_key(&key).to_string(),
                queue_key(&key),
                timeout_key(&key),
                fair_marks_key(&key),
                rw_channel(&key),
                format!("{}:1", timeout_prefix(&key, "u:1")),
                writers_key(&key),
            ];
            let sem = SemaphoreKeys::of(&key);
            let keys = keys.iter().chain([
                &sem.counter,
                &sem.timeout,
                &sem.channel,
                &sem.line,
                &sem.places,
            ]);
            for k in keys {
                assert!(covered('~', k), "key {k:?} not covered by {rules:?}");
            }
            for c in [
                channel_name(&key).to_string(),
                waiter_channel(&key, "u:1"),
                grant_channel(&key, "9f1c"),
                rw_channel(&key),
                sem.channel.clone(),
                sem.grant_channel("9f1c"),
            ] {
                assert!(covered('&', &c), "channel {c:?} not covered");
            }
            // And nothing outside the prefix.
            if !prefix.is_empty() {
                assert!(!covered('~', "other:x"));
                assert!(!covered('~', &channel_name("other:x").to_string()));
            }
        }
    }

    #[test]
    fn a_companion_as_an_argument_is_its_name_short_or_long() {
        for key in ["k", "{tagged}k", &"x".repeat(300)] {
            for name in [channel_name(key), line_key(key), line_yield_key(key)] {
                let args = redis::ToRedisArgs::to_redis_args(&name);
                assert_eq!(args, vec![name.to_string().into_bytes()]);
            }
        }
    }
}
