//! What each script path costs Redis, counted in instructions: a
//! `redis-server` run under valgrind's callgrind, its counters zeroed
//! before a workload and read after it. Instruction counts do not depend on
//! what else the machine does (timings on a 2-core machine swing by a
//! third), so a change to a script shows as a number that does not move
//! between runs: run this before and after.
//!
//! Rows, per iteration, commands sent one at a time on one connection:
//! - the raw floor's pair (`SET NX PX`, a compare-and-delete `EVALSHA`),
//!   Redisson's own `RLock` pair (its scripts as it sends them,
//!   `tests/support/redisson.rs`), and leasehold's uncontended pair;
//! - leasehold's semaphore: an uncontended acquire + release of one permit,
//!   and a release that grants its permit to the first place in line;
//! - leasehold's contended acquire (the lock held by another client: it
//!   takes a new place at the end of the line), and its release that grants
//!   the lock to the first place in line (less the plain commands that put
//!   the place there each time);
//! - their sum: what Redis runs per contended critical section;
//! - a waiter's confirmation of its place (the lock held elsewhere, 8
//!   places in line, ours 4th), which each waiter sends every third of its
//!   place lease.
//!
//! `cargo bench -p leasehold-tests --bench script_cost` (run by
//! `scripts/bench.sh`); `ITERATIONS` (2000) per row. Needs `valgrind`
//! (`apt-get install -y valgrind`) and the `redis-server` of the tests
//! (`LEASEHOLD_REDIS_SERVER`).

#[path = "../tests/support/redisson.rs"]
#[allow(dead_code)]
mod redisson;

use std::path::{Path, PathBuf};
use std::process::Command;

use leasehold::testing::TestServer;

const OTHER: &str = "11111111-1111-8111-8111-111111111111:1";
const ME: &str = "22222222-2222-8222-8222-222222222222:1";

/// The raw floor's release.
const COMPARE_AND_DELETE: &str =
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0";

fn main() {
    let n: u64 = std::env::var("ITERATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000);
    let valgrind = Command::new("valgrind").arg("--version").output();
    if !valgrind.is_ok_and(|o| o.status.success()) {
        panic!("valgrind is needed to count Redis's instructions: apt-get install -y valgrind");
    }
    let dir = std::env::temp_dir().join(format!("leasehold-script-cost-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let wrapper = dir.join("redis-under-callgrind");
    let server_bin =
        std::env::var("LEASEHOLD_REDIS_SERVER").unwrap_or_else(|_| "redis-server".into());
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\nexec valgrind --tool=callgrind --callgrind-out-file={}/cg.%p {server_bin} \"$@\"\n",
            dir.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(
        &wrapper,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let server = TestServer::builder()
        .binary(&wrapper)
        .start()
        .unwrap_or_else(|e| panic!("redis-server under valgrind: {e}"));
    let mut con = redis::Client::open(server.url())
        .unwrap()
        .get_connection()
        .unwrap();
    let scripts: std::collections::HashMap<_, _> = leasehold::scripts::all().into_iter().collect();
    let mut load = |source: &str| -> String {
        redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg(source)
            .query(&mut con)
            .unwrap()
    };
    let (acquire, release) = (
        load(scripts["plain acquire"]),
        load(scripts["plain release"]),
    );
    let (rs_acquire, rs_release) = (load(redisson::ACQUIRE), load(redisson::RELEASE));
    let compare_and_delete = load(COMPARE_AND_DELETE);
    let (sem_acquire, sem_release) = (
        load(scripts["semaphore acquire"]),
        load(scripts["semaphore release"]),
    );
    let counter = Counter {
        pid: server.pid(),
        dir: dir.clone(),
        n,
    };
    let acquire_keys = |k: &str| {
        vec![
            k.to_owned(),
            format!("leasehold_line:{{{k}}}"),
            format!("leasehold_line:{{{k}}}:yield"),
        ]
    };
    let release_keys = |k: &str| {
        vec![
            k.to_owned(),
            format!("redisson_lock__channel:{{{k}}}"),
            format!("leasehold_line:{{{k}}}"),
            format!("leasehold_line:{{{k}}}:yield"),
            format!("redisson_lock_token:{{{k}}}"),
        ]
    };
    let evalsha = |sha: &str, keys: &[String], args: &[&str]| {
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(sha).arg(keys.len()).arg(keys).arg(args);
        cmd
    };

    let raw = counter.per_iteration(&mut con, |_| {
        let mut set = redis::cmd("SET");
        set.arg("raw").arg(ME).arg("NX").arg("PX").arg(30000);
        vec![set, evalsha(&compare_and_delete, &["raw".into()], &[ME])]
    });
    let rs = counter.per_iteration(&mut con, |i| {
        // Each unlock has a latch of its own (Redisson's request id).
        let keys = [
            "rs".to_owned(),
            "redisson_lock__channel:{rs}".into(),
            format!("redisson_unlock_latch:{{rs}}:{i}"),
        ];
        vec![
            evalsha(&rs_acquire, &keys[..1], &["30000", ME]),
            evalsha(&rs_release, &keys, &["0", "30000", ME, "publish", "13500"]),
        ]
    });
    let pair = counter.per_iteration(&mut con, |_| {
        vec![
            evalsha(&acquire, &acquire_keys("lh"), &["30000", ME, "0", ""]),
            evalsha(&release, &release_keys("lh"), &["=30001", ME, "1"]),
        ]
    });
    // A semaphore of one permit, uncontended: acquire and release one
    // permit (a 16-byte id of a leasehold client, as `raw::permits` makes
    // them), nobody in line.
    let sem_keys: Vec<String> = [
        "sem",
        "{sem}:timeout",
        "redisson_sc:{sem}",
        "leasehold_sline:{sem}",
        "leasehold_sline:{sem}:places",
    ]
    .map(str::to_owned)
    .to_vec();
    let _: () = redis::cmd("SET").arg("sem").arg(1).query(&mut con).unwrap();
    let sem_pair = counter.per_iteration(&mut con, |i| {
        let mut id = [0u8; 16];
        id[..8].copy_from_slice(&i.to_be_bytes());
        id[6] = 0x80;
        id[8] = 30;
        id[9] = 165;
        vec![
            evalsha(&sem_acquire, &sem_keys, &[])
                .arg("1")
                .arg("30000")
                .arg("")
                .arg(&id[..])
                .clone(),
            evalsha(&sem_release, &sem_keys, &[]).arg(&id[..]).clone(),
        ]
    });
    let left: i64 = redis::cmd("GET").arg("sem").query(&mut con).unwrap();
    assert_eq!(left, 1, "every pair took the permit and gave it back");
    // A semaphore release that grants: each time our permit is out (none
    // available) and one live place waits for one (put there by plain
    // commands, counted apart and taken off); the permit it is granted is
    // taken out of the table again after.
    let _: () = redis::cmd("SET").arg("sem").arg(0).query(&mut con).unwrap();
    let far = (i64::MAX / 4).to_string();
    let sem_granting = |i: u64, with_release: bool| {
        let id = |who: u8| {
            let mut id = [who; 16];
            id[..8].copy_from_slice(&i.to_be_bytes());
            id[6] = 0x80;
            (id[8], id[9]) = (30, 165);
            id
        };
        let (ours, theirs) = (id(1), id(2));
        let place = format!("{OTHER}#{i}@3000/3000");
        let mut out = redis::cmd("ZADD");
        out.arg("{sem}:timeout").arg(&far).arg(&ours[..]);
        let mut push = redis::cmd("RPUSH");
        push.arg("leasehold_sline:{sem}").arg(&place);
        let mut asks = redis::cmd("HSET");
        let mut value = format!("{far} ").into_bytes();
        value.extend_from_slice(&theirs);
        asks.arg("leasehold_sline:{sem}:places")
            .arg(&place)
            .arg(value);
        let mut cmds = vec![out, push, asks];
        if with_release {
            cmds.push(evalsha(&sem_release, &sem_keys, &[]).arg(&ours[..]).clone());
        }
        let mut back = redis::cmd("ZREM");
        back.arg("{sem}:timeout").arg(&theirs[..]);
        cmds.push(back);
        cmds
    };
    let sem_setup = counter.per_iteration(&mut con, |i| sem_granting(i, false));
    let _: () = redis::cmd("DEL")
        .arg("{sem}:timeout")
        .arg("leasehold_sline:{sem}")
        .arg("leasehold_sline:{sem}:places")
        .query(&mut con)
        .unwrap();
    let sem_grant = counter.per_iteration(&mut con, |i| sem_granting(i, true)) - sem_setup;
    let waiting: i64 = redis::cmd("LLEN")
        .arg("leasehold_sline:{sem}")
        .query(&mut con)
        .unwrap();
    assert_eq!(
        waiting, 0,
        "every release granted its permit to the place in line"
    );

    // Contended: the lock held by another client for the whole row; each
    // acquire takes a new place (the line grows: O(1) per push).
    let _: () = redis::pipe()
        .cmd("HSET")
        .arg("held")
        .arg(OTHER)
        .arg(1)
        .ignore()
        .cmd("PEXPIRE")
        .arg("held")
        .arg(3_600_000)
        .ignore()
        .query(&mut con)
        .unwrap();
    let join = counter.per_iteration(&mut con, |i| {
        let place = format!("{ME}#{i}@3000/3000");
        vec![evalsha(
            &acquire,
            &acquire_keys("held"),
            &["30000", ME, "0", &place],
        )]
    });
    // A release that grants: each time the lock is ours and one live place
    // waits (put there by plain commands, counted apart and taken off).
    let granting = |i: u64, with_release: bool| {
        // An element that lives for ever: `<until>|<place>`.
        let element = format!("{}|{OTHER}#{i}@3000/3000", i64::MAX / 4);
        let mut hold = redis::cmd("HSET");
        hold.arg("granted").arg(ME).arg(1);
        let mut push = redis::cmd("RPUSH");
        push.arg("leasehold_line:{granted}").arg(&element);
        let mut cmds = vec![hold, push];
        if with_release {
            cmds.push(evalsha(
                &release,
                &release_keys("granted"),
                &["=30001", ME, "1"],
            ));
        }
        let mut gone = redis::cmd("DEL");
        gone.arg("granted");
        cmds.push(gone);
        cmds
    };
    let setup = counter.per_iteration(&mut con, |i| granting(i, false));
    let _: () = redis::cmd("DEL")
        .arg("leasehold_line:{granted}")
        .query(&mut con)
        .unwrap();
    let grant = counter.per_iteration(&mut con, |i| granting(i, true)) - setup;
    let granted: i64 = redis::cmd("LLEN")
        .arg("leasehold_line:{granted}")
        .query(&mut con)
        .unwrap();
    assert_eq!(
        granted, 0,
        "every release granted the lock to the place in line"
    );
    // A confirmation: the lock held by another client, 8 places in line,
    // ours 4th; each time our element is put back as it was (a plain LSET,
    // counted apart and taken off) and the acquire names it — found where it
    // stands (`LPOS`) and rewritten (`LSET`).
    let far = i64::MAX / 4;
    let ours = format!("{far}|{ME}#0@3000/3000");
    let mut line = redis::pipe();
    line.cmd("HSET")
        .arg("confirming")
        .arg(OTHER)
        .arg(1)
        .ignore();
    line.cmd("PEXPIRE")
        .arg("confirming")
        .arg(3_600_000)
        .ignore();
    for k in 0..8 {
        let el = match k {
            3 => ours.clone(),
            _ => format!("{far}|{OTHER}#{k}@3000/3000"),
        };
        line.cmd("RPUSH")
            .arg("leasehold_line:{confirming}")
            .arg(el)
            .ignore();
    }
    let _: () = line.query(&mut con).unwrap();
    let confirming = |with_acquire: bool| {
        let mut put = redis::cmd("LSET");
        put.arg("leasehold_line:{confirming}").arg(3).arg(&ours);
        let mut cmds = vec![put];
        if with_acquire {
            cmds.push(evalsha(
                &acquire,
                &acquire_keys("confirming"),
                &["30000", ME, "0", &ours],
            ));
        }
        cmds
    };
    let put_back = counter.per_iteration(&mut con, |_| confirming(false));
    let confirm = counter.per_iteration(&mut con, |_| confirming(true)) - put_back;
    let in_line: i64 = redis::cmd("LLEN")
        .arg("leasehold_line:{confirming}")
        .query(&mut con)
        .unwrap();
    assert_eq!(in_line, 8, "each confirmation rewrote its element in place");

    println!("Redis instructions per iteration (callgrind, {n} iterations a row; commands one at a time on one connection):");
    println!("| path | instructions | vs the raw floor's pair |");
    println!("|---|---:|---:|");
    let row = |what: &str, ir: u64| {
        println!("| {what} | {ir} | {:.2} |", ir as f64 / raw as f64);
    };
    row(
        "raw floor pair: SET NX PX + compare-and-delete EVALSHA",
        raw,
    );
    row("Redisson's RLock pair (its own scripts)", rs);
    row("leasehold uncontended pair (acquire + release)", pair);
    row(
        "leasehold semaphore uncontended pair (one permit)",
        sem_pair,
    );
    row(
        "leasehold semaphore release that grants to the first in line",
        sem_grant,
    );
    row("leasehold contended acquire (takes a place in line)", join);
    row("leasehold release that grants to the first in line", grant);
    row(
        "leasehold per contended critical section (the two above)",
        join + grant,
    );
    row(
        "leasehold confirmation of a waiting place (8 in line, 4th)",
        confirm,
    );
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Zeroes and reads the callgrind counters of the server under valgrind.
struct Counter {
    pid: u32,
    dir: PathBuf,
    n: u64,
}

impl Counter {
    /// The server's instructions per iteration of the commands `of(i)`
    /// makes, sent one at a time (after as many untimed iterations first).
    fn per_iteration(
        &self,
        con: &mut redis::Connection,
        of: impl Fn(u64) -> Vec<redis::Cmd>,
    ) -> u64 {
        let run = |con: &mut redis::Connection, from: u64| {
            for i in from..from + self.n {
                for cmd in of(i) {
                    let _: redis::Value = cmd.query(con).unwrap();
                }
            }
        };
        run(con, 0);
        callgrind_control(&self.dir, self.pid, "-z");
        run(con, self.n);
        callgrind_control(&self.dir, self.pid, "-d");
        summary(&self.dir, self.pid) / self.n
    }
}

fn callgrind_control(dir: &Path, pid: u32, what: &str) {
    let status = Command::new("callgrind_control")
        .arg(what)
        .arg(pid.to_string())
        .current_dir(dir)
        .output()
        .expect("callgrind_control (valgrind's)");
    assert!(
        status.status.success(),
        "callgrind_control {what}: {status:?}"
    );
}

/// The instruction total of the newest dump of `pid`.
fn summary(dir: &Path, pid: u32) -> u64 {
    let prefix = format!("cg.{pid}.");
    let newest = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| {
            let name = e.ok()?.file_name().to_string_lossy().into_owned();
            name.strip_prefix(&prefix)?.parse::<u64>().ok()
        })
        .max()
        .expect("a callgrind dump");
    let text = std::fs::read_to_string(dir.join(format!("{prefix}{newest}"))).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix("summary: "))
        .and_then(|v| v.trim().parse().ok())
        .expect("a summary line in the dump")
}
