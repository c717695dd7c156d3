//! The protocol's unit tests: script sources, ACL rules, names and
//! places the scripts and Rust agree on.

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
