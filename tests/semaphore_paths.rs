//! The semaphore's uncontended paths against its full ones: the acquire
//! and the release each end early, before their helpers are defined, when
//! nobody is in line (`protocol::semaphore`'s scripts); this runs each
//! script as shipped and with its early end switched off on the same
//! random states (counter, lease table, line, places), on a real server,
//! and checks that both answer alike, leave the same data and publish the
//! same messages. And the release's shortcut past the lease table (one of
//! ours still there is alive when every expired permit was read), beyond
//! the most expired permits one script takes back.

mod support;

use std::collections::BTreeMap;

use redis::Value;
use support::{RedisServer, Rng};

/// A leasehold client's id (`raw::permits::permit_id`'s marks): byte 7's
/// high nibble 8, bytes 9 and 10 = 30, 165.
fn permit(who: u8, n: u8) -> Vec<u8> {
    let mut id = vec![who; 16];
    id[0] = n;
    id[6] = 0x80;
    (id[8], id[9]) = (30, 165);
    id
}

/// The five keys of semaphore `name`.
fn keys(name: &str) -> [String; 5] {
    [
        name.to_owned(),
        format!("{{{name}}}:timeout"),
        format!("redisson_sc:{{{name}}}"),
        format!("leasehold_sline:{{{name}}}"),
        format!("leasehold_sline:{{{name}}}:places"),
    ]
}

/// `script` with `from` replaced by `to`, exactly once.
fn switched_off(script: &str, from: &str, to: &str) -> String {
    assert_eq!(script.matches(from).count(), 1, "{from:?} in the script");
    script.replace(from, to)
}

/// One random state, written under `name` for both runs alike.
struct State {
    cmds: Vec<redis::Cmd>,
}

fn state(rng: &mut Rng, name: &str, now: i64, ours: &[Vec<u8>], our_place: &str) -> State {
    let [n, t, _, l, p] = keys(name);
    let mut cmds = Vec::new();
    let mut cmd = |args: Vec<Vec<u8>>| {
        let mut c = redis::cmd(std::str::from_utf8(&args[0]).unwrap());
        for a in &args[1..] {
            c.arg(&a[..]);
        }
        cmds.push(c);
    };
    let b = |s: &str| s.as_bytes().to_vec();
    match rng.below(8) {
        0 => {}                                  // no counter
        1 => cmd(vec![b("SET"), b(&n), b("x")]), // no count
        v => cmd(vec![b("SET"), b(&n), b(&(v as i64 - 3).to_string())]),
    }
    let at = |rng: &mut Rng| match rng.below(3) {
        0 => now - 5_000,  // past its lease
        _ => now + 60_000, // live
    };
    for i in 0..rng.below(4) {
        let id = match rng.below(3) {
            0 => ours[0].clone(),
            1 => ours[1].clone(),
            _ => permit(9, i as u8),
        };
        cmd(vec![b("ZADD"), b(&t), b(&at(rng).to_string()), id]);
    }
    // Half the states: nobody in line at all (where the early ends apply).
    let places = if rng.below(2) == 0 { 0 } else { rng.below(3) };
    for i in 0..places {
        let place = match rng.below(4) {
            0 => our_place.to_owned(),
            _ => format!("99999999-9999-8999-8999-99999999999{i}:1#{i}@3000/3000"),
        };
        cmd(vec![b("RPUSH"), b(&l), b(&place)]);
        if rng.below(5) > 0 {
            let mut value = format!("{} ", at(rng)).into_bytes();
            for k in 0..=rng.below(2) {
                value.extend(permit(7, (i * 2 + k) as u8));
            }
            cmd(vec![b("HSET"), b(&p), b(&place), value]);
        }
    }
    State { cmds }
}

/// What semaphore `name` holds: counter, lease table, line, places, and
/// whether the table expires.
fn snapshot(con: &mut redis::Connection, name: &str) -> String {
    let [n, t, _, l, p] = keys(name);
    let counter: Option<String> = redis::cmd("GET").arg(&n).query(con).unwrap();
    let table: Vec<(Vec<u8>, f64)> = redis::cmd("ZRANGE")
        .arg(&t)
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES")
        .query(con)
        .unwrap();
    let table: BTreeMap<Vec<u8>, i64> = table
        .into_iter()
        .map(|(id, score)| (id, score as i64))
        .collect();
    let line: Vec<String> = redis::cmd("LRANGE")
        .arg(&l)
        .arg(0)
        .arg(-1)
        .query(con)
        .unwrap();
    let places: BTreeMap<String, Vec<u8>> = redis::cmd("HGETALL").arg(&p).query(con).unwrap();
    let places: BTreeMap<String, (i64, Vec<u8>)> = places
        .into_iter()
        .map(|(place, v)| {
            let sp = v.iter().position(|&c| c == b' ').unwrap();
            let until: f64 = std::str::from_utf8(&v[..sp]).unwrap().parse().unwrap();
            (place, (until as i64, v[sp + 1..].to_vec()))
        })
        .collect();
    let expires: i64 = redis::cmd("PTTL").arg(&t).query(con).unwrap();
    format!(
        "counter {counter:?}\ntable {table:?}\nline {line:?}\nplaces {places:?}\ntable expires {}",
        expires > 0
    )
}

/// A reply as text.
fn reply(v: &redis::RedisResult<Value>) -> String {
    fn norm(v: &Value) -> String {
        match v {
            Value::Int(n) => n.to_string(),
            Value::Array(items) => {
                let items: Vec<_> = items.iter().map(norm).collect();
                format!("[{}]", items.join(", "))
            }
            other => format!("{other:?}"),
        }
    }
    match v {
        Ok(v) => norm(v),
        // Less where it was raised (the script's hash and line).
        Err(e) => format!(
            "error {:?} {:?}",
            e.code(),
            e.detail().map(|d| d.split(" script: ").next())
        ),
    }
}

/// The messages published since the last call, read up to a marker, with
/// the semaphore's name taken out of the channels.
fn published(sub: &mut redis::PubSub<'_>, con: &mut redis::Connection, name: &str) -> Vec<String> {
    let _: () = redis::cmd("PUBLISH")
        .arg("redisson_sc:{marker}")
        .arg("end")
        .query(con)
        .unwrap();
    let mut out = Vec::new();
    loop {
        let msg = sub.get_message().unwrap();
        let channel = msg.get_channel_name().to_owned();
        if channel == "redisson_sc:{marker}" {
            return out;
        }
        let payload: Vec<u8> = msg.get_payload().unwrap();
        out.push(format!(
            "{} {:?}",
            channel.replace(name, "<name>"),
            String::from_utf8_lossy(&payload)
        ));
    }
}

/// `text` with each number of 4 digits or more (the clock's readings and
/// lengths of time: the two runs read the clock a moment apart) taken out,
/// and those numbers.
fn times(text: &str) -> (String, Vec<i64>) {
    let (mut out, mut found, mut digits) = (String::new(), Vec::new(), String::new());
    for c in text.chars().chain(std::iter::once(' ')) {
        if c.is_ascii_digit() {
            digits.push(c);
            continue;
        }
        if digits.len() >= 4 {
            found.push(digits.parse().unwrap());
            out.push('#');
        } else {
            out.push_str(&digits);
        }
        digits.clear();
        out.push(c);
    }
    (out, found)
}

/// Whether two runs' records agree: the same, but for readings of the
/// clock at most 100 ms apart.
fn alike(a: &[String; 3], b: &[String; 3]) -> bool {
    a.iter().zip(b).all(|(a, b)| {
        let ((a, at), (b, bt)) = (times(a), times(b));
        a == b && at.len() == bt.len() && at.iter().zip(&bt).all(|(x, y)| (x - y).abs() <= 100)
    })
}

#[test]
fn the_uncontended_paths_do_what_the_full_ones_do() {
    let server = RedisServer::start();
    let mut con = server.connection();
    let mut listener = server.connection();
    let mut sub = listener.as_pubsub();
    sub.psubscribe("redisson_sc:*").unwrap();
    sub.psubscribe("leasehold_sgrant:*").unwrap();
    let scripts: BTreeMap<_, _> = leasehold::scripts::all().into_iter().collect();
    let acquire = scripts["semaphore acquire"].to_owned();
    let release = scripts["semaphore release"].to_owned();
    let full_acquire = switched_off(
        &acquire,
        "if type(free) == 'string'",
        "if false and type(free) == 'string'",
    );
    let full_release = switched_off(&release, "if not first then", "if false then");
    let load = |con: &mut redis::Connection, s: &str| -> String {
        redis::cmd("SCRIPT").arg("LOAD").arg(s).query(con).unwrap()
    };
    let shipped = [load(&mut con, &acquire), load(&mut con, &release)];
    let full = [load(&mut con, &full_acquire), load(&mut con, &full_release)];
    let our_place = "c0ffee00-0000-8000-8000-000000000001:1#7@3000/3000";
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let (mut taken_early, mut released_early) = (0, 0);
    for case in 0..400 {
        let k = 1 + rng.below(2) as usize;
        let ours: Vec<Vec<u8>> = (0..2).map(|n| permit(1, n)).collect();
        let blob: Vec<u8> = ours[..k].concat();
        let place = if rng.below(2) == 0 { "" } else { our_place };
        let (s, us): (i64, i64) = redis::cmd("TIME").query(&mut con).unwrap();
        let now = s * 1000 + us / 1000;
        let seed = rng.0;
        let mut results = Vec::new();
        for (run, sha) in [("shipped", &shipped), ("full", &full)] {
            let name = format!("eq{case}{run}");
            let mut states = Rng(seed);
            for cmd in state(&mut states, &name, now, &ours, our_place).cmds {
                let _: Value = cmd.query(&mut con).unwrap();
            }
            let before = snapshot(&mut con, &name);
            let call = |con: &mut redis::Connection, sha: &str, args: &[&[u8]]| {
                let mut c = redis::cmd("EVALSHA");
                c.arg(sha).arg(5).arg(&keys(&name));
                for a in args {
                    c.arg(*a);
                }
                c.query::<Value>(con)
            };
            let acquired = call(
                &mut con,
                &sha[0],
                &[k.to_string().as_bytes(), b"30000", place.as_bytes(), &blob],
            );
            let after_acquire = snapshot(&mut con, &name);
            let acquire_messages = published(&mut sub, &mut con, &name);
            let released = call(&mut con, &sha[1], &[&blob]);
            let after_release = snapshot(&mut con, &name);
            let release_messages = published(&mut sub, &mut con, &name);
            results.push((
                before,
                [reply(&acquired), after_acquire, acquire_messages.join("\n")],
                [reply(&released), after_release, release_messages.join("\n")],
            ));
        }
        let (shipped_run, full_run) = (&results[0], &results[1]);
        assert_eq!(shipped_run.0, full_run.0, "case {case}: the same state");
        let calls = [
            (
                format!("the acquire (k {k}, place {place:?})"),
                &shipped_run.1,
                &full_run.1,
            ),
            (
                "the release after it".to_owned(),
                &shipped_run.2,
                &full_run.2,
            ),
        ];
        for (call, shipped, full) in calls {
            assert!(
                alike(shipped, full),
                "case {case}: {call} from\n{}\nshipped {shipped:#?}\nfull {full:#?}",
                shipped_run.0
            );
        }
        taken_early += usize::from(shipped_run.0.contains("line []") && shipped_run.1[0] == "[1]");
        released_early += usize::from(shipped_run.1[1].contains("line []"));
    }
    // The early ends were taken, and often.
    eprintln!("{taken_early} acquires and {released_early} releases could end early");
    assert!(taken_early >= 40, "{taken_early} early acquires");
    assert!(released_early >= 100, "{released_early} early releases");
}

#[test]
fn a_release_that_finds_the_line_key_no_list_changes_nothing() {
    // The release reads the line before it writes: a line key overwritten
    // by something else fails the call with every permit still counted (it
    // took the permit out of the table first, and lost it for good).
    let server = RedisServer::start();
    let client = leasehold::LockClient::new(&server.url()).unwrap();
    let mut con = server.connection();
    let semaphore = client.semaphore("overwritten");
    semaphore.set_permits(1).unwrap();
    let permit = semaphore.acquire().unwrap();
    let _: () = redis::cmd("SET")
        .arg("leasehold_sline:{overwritten}")
        .arg("an application's string")
        .query(&mut con)
        .unwrap();
    let e = permit.unlock().expect_err("the line key is no list");
    let available: i64 = redis::cmd("GET")
        .arg("overwritten")
        .query(&mut con)
        .unwrap();
    let out: i64 = redis::cmd("ZCARD")
        .arg("{overwritten}:timeout")
        .query(&mut con)
        .unwrap();
    assert_eq!(
        (available, out),
        (0, 1),
        "the permit is still out, back at its lease's end ({e})"
    );
}

#[test]
fn a_release_beyond_the_expired_permits_one_script_takes_back_tells_alive_from_expired() {
    // The release reads the expired permits (at most 1,000 a script) and
    // takes one of ours still in the table out without reading its lease:
    // alive, when every expired one was read. With 1,500 other expired
    // permits ahead of ours, it is not: ours must be told by its lease.
    let server = RedisServer::start();
    let client = leasehold::LockClient::new(&server.url()).unwrap();
    let mut con = server.connection();
    let [n, t, ..] = keys("crowded");
    let semaphore = client.semaphore("crowded");
    semaphore.set_permits(1).unwrap();
    for ours_expired in [false, true] {
        let permit = semaphore.acquire().unwrap();
        let ours: Vec<Vec<u8>> = redis::cmd("ZRANGE")
            .arg(&t)
            .arg(0)
            .arg(-1)
            .query(&mut con)
            .unwrap();
        assert_eq!(ours.len(), 1);
        let mut add = redis::pipe();
        for i in 0..1_500u32 {
            let mut id = vec![0u8; 16];
            id[12..].copy_from_slice(&i.to_be_bytes());
            add.zadd(&t, id, 1).ignore();
        }
        if ours_expired {
            // Past its lease, and after the 1,500 (a greater score).
            add.zadd(&t, &ours[0][..], 2).ignore();
        }
        add.exec(&mut con).unwrap();
        let released = permit.unlock();
        assert_eq!(
            released.is_ok(),
            !ours_expired,
            "ours expired: {ours_expired}, {released:?}"
        );
        // Back: the 1,000 read, and ours.
        let available: i64 = redis::cmd("GET").arg(&n).query(&mut con).unwrap();
        let left: i64 = redis::cmd("ZCARD").arg(&t).query(&mut con).unwrap();
        assert_eq!(
            (available, left),
            (1_001, 500),
            "ours expired: {ours_expired}"
        );
        let _: () = redis::cmd("DEL").arg(&t).query(&mut con).unwrap();
        semaphore.set_permits(1).unwrap();
    }
}
