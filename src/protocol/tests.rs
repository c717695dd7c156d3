//! The protocol's unit tests: script sources, ACL rules, names and
//! places the scripts and Rust agree on.

use super::*;

#[test]
fn millis_never_zero() {
    assert_eq!(millis(Duration::from_micros(10)), 1);
    assert_eq!(millis(Duration::from_secs(30)), 30_000);
    assert_eq!(millis(Duration::MAX), u64::MAX);
}

/// Every script as it is sent (fragments joined as the constructors join
/// them), named.
fn whole_scripts() -> Vec<(&'static str, String)> {
    let (mint, granted) = (plain::mint_fn!(), super::line::granted_fn!());
    let (purge, now) = (fair::PURGE, rwlock::NOW);
    vec![
        ("plain acquire", plain::ACQUIRE.to_owned()),
        ("plain fenced acquire", plain::ACQUIRE_FENCED.to_owned()),
        ("plain release", plain::RELEASE.to_owned()),
        ("plain leave", plain::LEAVE.to_owned()),
        ("renew", renew::RENEW.to_owned()),
        ("fair acquire", format!("{purge}{mint}{}", fair::ACQUIRE)),
        (
            "fair release",
            format!("{purge}{mint}{granted}{}", fair::RELEASE),
        ),
        ("fair cancel", fair::CANCEL.to_owned()),
        ("read acquire", format!("{now}{}", rwlock::READ_ACQUIRE)),
        ("write acquire", format!("{now}{}", rwlock::WRITE_ACQUIRE)),
        ("read release", format!("{now}{}", rwlock::READ_RELEASE)),
        ("write release", rwlock::WRITE_RELEASE.to_owned()),
        ("cancel writer", format!("{now}{}", rwlock::CANCEL_WRITER)),
        ("force unlock", admin::FORCE_UNLOCK.to_owned()),
        ("shape", admin::SHAPE.to_owned()),
        ("read", admin::READ.to_owned()),
        ("semaphore acquire", semaphore::ACQUIRE.to_owned()),
        ("semaphore release", semaphore::RELEASE.to_owned()),
        ("semaphore leave", semaphore::LEAVE.to_owned()),
        ("semaphore set", semaphore::SET_PERMITS.to_owned()),
        ("semaphore add", semaphore::ADD_PERMITS.to_owned()),
        ("semaphore available", semaphore::AVAILABLE.to_owned()),
        ("semaphore inspect", semaphore::INSPECT.to_owned()),
    ]
}

/// The arguments of each call of `callee` in `code` (`callee(` at a word
/// boundary, not its definition), split at top-level commas.
fn call_args(code: &str, callee: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(at) = code[from..].find(callee) {
        let start = from + at;
        from = start + callee.len();
        let before = code[..start].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '.') {
            continue;
        }
        if code[..start].trim_end().ends_with("function") {
            continue;
        }
        let rest = code[from..].trim_start();
        let Some(rest) = rest.strip_prefix('(') else {
            continue;
        };
        let (mut args, mut arg, mut depth, mut quote) = (Vec::new(), String::new(), 0, None);
        for c in rest.chars() {
            match (quote, c) {
                (Some(q), c) if c == q => quote = None,
                (Some(_), _) => {}
                (None, '\'' | '"') => quote = Some(c),
                (None, '(' | '[' | '{') => depth += 1,
                (None, ')') if depth == 0 => break,
                (None, ')' | ']' | '}') => depth -= 1,
                (None, ',') if depth == 0 => {
                    args.push(arg.trim().to_owned());
                    arg.clear();
                    continue;
                }
                _ => {}
            }
            arg.push(c);
        }
        args.push(arg.trim().to_owned());
        out.push(args);
    }
    out
}

/// The keys `code` touches whose names it does not take from `KEYS`: each
/// key argument of `redis.call` / `redis.pcall` must be `KEYS[n]`, or a
/// name bound only to such (a local, a function's parameter at every call
/// of the function) or to one of the `allowed` expressions, else it is
/// listed.
fn keys_built_in_lua(code: &str, allowed: &[&str]) -> Vec<String> {
    let code: String = code
        .lines()
        .map(|l| l.split("--").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n");
    let ident = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_alphanumeric() || c == '_');
    let is_key = |s: &str| {
        s.strip_prefix("KEYS[")
            .and_then(|r| r.strip_suffix(']'))
            .is_some_and(|n| n.chars().all(|c| c.is_ascii_digit()))
    };
    // Every binding of every name: `local a, b = x, y`, `a = x`, `for a in`
    // (bound to what no caller names), and parameters at each call.
    let mut bindings: Vec<(String, String)> = Vec::new();
    for line in code.lines().map(str::trim) {
        if let Some(rest) = line.strip_prefix("for ") {
            let names = rest.split([' ', '=']).next().unwrap_or("");
            let names = rest
                .split(" in ")
                .next()
                .filter(|_| rest.contains(" in "))
                .unwrap_or(names);
            for n in names.split(',') {
                bindings.push((n.trim().to_owned(), "<loop>".into()));
            }
            continue;
        }
        let body = line.strip_prefix("local ").unwrap_or(line);
        if body.starts_with("function") {
            continue;
        }
        let Some((names, values)) = body.split_once('=') else {
            continue;
        };
        if values.starts_with('=') || names.ends_with(['~', '<', '>', '=']) {
            continue;
        }
        let names: Vec<&str> = names.split(',').map(str::trim).collect();
        if !names.iter().all(|n| ident(n)) {
            continue;
        }
        let values = call_args(&format!("f({values})"), "f")
            .pop()
            .unwrap_or_default();
        for (i, n) in names.iter().enumerate() {
            let v = values.get(i).cloned().unwrap_or_else(|| "<none>".into());
            bindings.push(((*n).to_owned(), v));
        }
    }
    for def in code.split("function ").skip(1) {
        let Some((name, rest)) = def.split_once('(') else {
            continue;
        };
        let params: Vec<&str> = rest
            .split(')')
            .next()
            .unwrap_or("")
            .split(',')
            .map(str::trim)
            .collect();
        let calls = call_args(&code, name.trim());
        for (i, p) in params.iter().enumerate().filter(|(_, p)| ident(p)) {
            if calls.is_empty() {
                // Never called: it touches nothing.
                bindings.push(((*p).to_owned(), "KEYS[0]".into()));
            }
            for args in &calls {
                let v = args.get(i).cloned().unwrap_or_else(|| "<none>".into());
                bindings.push(((*p).to_owned(), v));
            }
        }
    }
    // A name is a key's when it is bound, and only to keys' names.
    let mut keys: std::collections::HashSet<String> =
        bindings.iter().map(|(n, _)| n.clone()).collect();
    loop {
        let before = keys.len();
        let bad: Vec<String> = bindings
            .iter()
            .filter(|(_, v)| {
                !is_key(v) && !keys.contains(v.as_str()) && !allowed.contains(&v.as_str())
            })
            .map(|(n, _)| n.clone())
            .collect();
        keys.retain(|n| !bad.contains(n));
        if keys.len() == before {
            break;
        }
    }
    let mut built = Vec::new();
    for callee in ["redis.call", "redis.pcall"] {
        for args in call_args(&code, callee) {
            let cmd = args[0].trim_matches(['\'', '"']).to_lowercase();
            let key_args = match cmd.as_str() {
                "publish" | "spublish" | "pubsub" | "time" | "ping" => 0,
                "exists" | "del" | "unlink" | "touch" | "mget" => args.len() - 1,
                _ => 1,
            };
            for key in args.iter().skip(1).take(key_args) {
                if !is_key(key) && !keys.contains(key.as_str()) && !allowed.contains(&key.as_str())
                {
                    built.push(format!("{cmd} {key}"));
                }
            }
        }
    }
    built
}

/// Every key a script touches is one of its `KEYS` (Redis's scripting
/// contract, which Dragonfly's default mode enforces; Redis itself does not
/// check): no key argument of a call is built in Lua, directly, through a
/// local or through a function's parameter. Lua names channels only. The
/// one exception is Redisson's read/write layout: a read hold's timeout
/// keys `{<key>}:<owner>:rwlock_timeout:<n>` are numbered by the hold count
/// in Redis, so no caller can name them beforehand (Redisson's own scripts
/// build them the same way) — exactly those expressions are allowed.
#[test]
fn every_key_a_script_touches_is_declared_but_redissons_read_timeouts() {
    let redissons = [
        ("read acquire", "KEYS[2] .. ':' .. n"),
        ("read release", "KEYS[3] .. ':' .. i"),
        ("read release", "KEYS[3] .. ':' .. (n + 1)"),
        (
            "read release",
            "KEYS[4] .. ':' .. field .. ':rwlock_timeout:' .. i",
        ),
        ("renew", "KEYS[2] .. ':' .. i"),
    ];
    for (name, source) in whole_scripts() {
        let allowed: Vec<&str> = redissons
            .iter()
            .filter(|(n, _)| *n == name)
            .map(|(_, expr)| *expr)
            .collect();
        let built = keys_built_in_lua(&source, &allowed);
        assert!(built.is_empty(), "{name}: keys built in Lua: {built:?}");
    }
    // The analysis finds what it must: each way of building a key.
    for (sneaky, what) in [
        ("redis.call('get', KEYS[1] .. ':x')", "directly"),
        (
            "local k = KEYS[1] .. ':x'\nredis.call('del', k)",
            "through a local",
        ),
        (
            "local a, b = KEYS[1], KEYS[2] .. 'x'\nredis.call('get', b)",
            "in a multiple local",
        ),
        (
            "local function f(k) return redis.call('get', k) end\nf(KEYS[1])\nf(ARGV[1])",
            "a parameter",
        ),
        (
            "redis.pcall( \"exists\", KEYS[1], ARGV[1])",
            "a later key of pcall",
        ),
        (
            "for _, p in ipairs(x) do redis.call('del', p) end",
            "a loop's name",
        ),
        (
            "redis.call('get', string.format('%s:x', KEYS[1]))",
            "a format",
        ),
    ] {
        assert!(
            !keys_built_in_lua(sneaky, &[]).is_empty(),
            "not found {what}: {sneaky}"
        );
    }
    assert!(
        whole_scripts()
            .iter()
            .filter(|(n, _)| ["read acquire", "read release", "renew"].contains(n))
            .all(|(_, s)| !keys_built_in_lua(s, &[]).is_empty()),
        "the exceptions are found too"
    );
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
    for (name, source) in whole_scripts() {
        for cmd in called(&source) {
            assert!(classic.contains(&cmd), "{cmd} of {name}");
        }
        for cmd in called(&PubSub::Sharded.lua(&source).source) {
            assert!(cluster.contains(&cmd), "sharded: {cmd} of {name}");
        }
    }
}

#[test]
fn sharded_scripts_publish_and_count_only_sharded() {
    let mut published = 0;
    for (name, source) in whole_scripts() {
        let sharded = PubSub::Sharded.lua(&source).source;
        published += sharded.matches("'spublish'").count();
        // No other way to publish or count subscribers is left behind.
        let lower = sharded.to_lowercase();
        assert_eq!(
            lower.matches("publish").count(),
            lower.matches("spublish").count(),
            "{name}"
        );
        assert_eq!(
            lower.matches("numsub").count(),
            lower.matches("shardnumsub").count(),
            "{name}"
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

/// What a release leaves the owner's other guards is rounded up: Redis
/// must keep the hold no shorter than a guard counts on (a millisecond
/// rounded down left a guard saying "held" for up to a millisecond after
/// its key had gone — seen under load by tests/reentry.rs).
#[test]
fn what_a_release_keeps_is_rounded_up_to_the_millisecond_and_one_more() {
    use std::time::Duration;
    assert_eq!(
        Keep::Exactly(Duration::from_micros(1_234_100))
            .arg()
            .to_string(),
        "=1236"
    );
    assert_eq!(
        Keep::Exactly(Duration::from_millis(1_500))
            .arg()
            .to_string(),
        "=1501"
    );
    assert_eq!(Keep::Exactly(Duration::ZERO).arg().to_string(), "=1");
    assert_eq!(
        Keep::AtLeast(Duration::from_micros(999)).arg().to_string(),
        ">2"
    );
    assert_eq!(Keep::UNCHANGED.arg().to_string(), ">0");
    // As a command's argument: the same bytes.
    let arg = Keep::AtLeast(Duration::from_micros(999)).arg();
    assert_eq!(
        redis::ToRedisArgs::to_redis_args(&arg),
        vec![b">2".to_vec()]
    );
}
