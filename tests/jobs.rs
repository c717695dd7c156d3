//! Scheduled jobs (issue 39) against a real server: a busy job is skipped
//! and told by whom, the lock is kept `lock_at_least_for` after a short
//! run and renewed through a long one, a lost lock is told and its end says
//! so, the assertion holds only inside a run — blocking and async — and
//! ShedLock's own commands, played on the wire, share one job with
//! leasehold: once per window between them, and neither side's owner check
//! lets the other's unlock through.

mod support;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use leasehold::{assert_locked, running_job, JobRun, LockClient};
use redis::Commands;
use support::proxy::{Fault, FaultProxy};
use support::{eventually, RedisServer};

fn host() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap()
}

/// `ADDED:<yyyy-mm-ddThh:mm:ss.mmmZ>@<host>:<uuid>`, ShedLock's value.
fn is_shedlock_value(v: &str, host: &str) -> bool {
    let Some(rest) = v.strip_prefix("ADDED:") else {
        return false;
    };
    let (time, at) = rest.split_at(24.min(rest.len()));
    let shape = |i: usize, c: u8| time.as_bytes().get(i) == Some(&c);
    let digits = [0, 1, 2, 3, 5, 6, 8, 9, 11, 12, 14, 15, 17, 18, 20, 21, 22];
    let time_ok = digits.iter().all(|&i| time.as_bytes()[i].is_ascii_digit())
        && shape(4, b'-')
        && shape(7, b'-')
        && shape(10, b'T')
        && shape(13, b':')
        && shape(16, b':')
        && shape(19, b'.')
        && shape(23, b'Z');
    let Some((h, id)) = at.strip_prefix('@').and_then(|a| a.rsplit_once(':')) else {
        return false;
    };
    time_ok && h == host && uuid::Uuid::parse_str(id).is_ok()
}

#[test]
fn a_busy_job_is_skipped_and_the_lock_is_kept_its_minimum_after_a_short_run() {
    let server = RedisServer::start();
    let (a, b) = (
        LockClient::connect(&server.url()).unwrap(),
        LockClient::connect(&server.url()).unwrap(),
    );
    let at_least = Duration::from_millis(1_500);
    let job = |c: &LockClient| c.job("report").lock_at_least_for(at_least);
    let mut con = server.connection();
    assert_eq!(job(&a).key(), "job-lock:default:report");
    let started = Instant::now();
    let ran = job(&a)
        .run(|| {
            assert_locked();
            assert_eq!(running_job().as_deref(), Some("report"));
            let value: String = con.get("job-lock:default:report").unwrap();
            assert!(is_shedlock_value(&value, &host()), "{value}");
            // An operator sees it as any other lock (`inspect`, `list`,
            // the CLI): its holder is the run's value.
            let info = b.inspect("job-lock:default:report").unwrap();
            assert_eq!(info.kind, leasehold::LockKind::Job);
            assert_eq!(info.holders.len(), 1);
            assert_eq!(info.holders[0].owner, value);
            assert!(info.ttl.is_some());
            let listed = b.list("job-lock:*", 10).unwrap();
            assert!(
                listed.iter().any(|l| l.kind == leasehold::LockKind::Job),
                "{listed:?}"
            );
            // Another replica, meanwhile: skipped, and told by whom.
            match job(&b)
                .run(|| unreachable!("ran beside the holder"))
                .unwrap()
            {
                JobRun::Skipped(skip) => {
                    assert_eq!(skip.holder(), value);
                    assert_eq!(skip.host(), Some(host().as_str()));
                }
                other => unreachable!("{other:?}"),
            }
            7
        })
        .unwrap();
    assert!(matches!(ran, JobRun::Ran(7)), "{ran:?}");
    assert_eq!(running_job(), None);
    // Ended long before its minimum: kept until then, not deleted.
    let pttl: i64 = con.pttl("job-lock:default:report").unwrap();
    assert!(
        pttl > 0 && pttl <= at_least.as_millis() as i64,
        "pttl {pttl} ms after a run of {:?}",
        started.elapsed()
    );
    assert!(job(&b).run(|| ()).unwrap().is_skipped());
    assert!(eventually(Duration::from_secs(5), || {
        !con.exists::<_, bool>("job-lock:default:report").unwrap()
    }));
    assert_eq!(b.job("report").run(|| 8).unwrap().ran(), Some(8));
    // A run without a minimum deletes the key at its end.
    assert!(!con.exists::<_, bool>("job-lock:default:report").unwrap());

    let history = job(&a).history().unwrap();
    assert_eq!((history.runs, history.skipped, history.lost), (2, 2, 0));
    assert_eq!(history.last_host.as_deref(), Some(host().as_str()));
    assert!(history.last_started.is_some() && history.last_ended.is_some());
    assert!(history.last_duration.unwrap() < Duration::from_secs(1));
    assert_eq!(history.holder, None);

    // Outside a run the assertion fails.
    let outside = std::panic::catch_unwind(assert_locked);
    assert!(outside.is_err());
}

#[test]
fn a_job_longer_than_lock_at_most_for_keeps_its_lock_while_it_runs() {
    let server = RedisServer::start();
    // A lease of 2 s renewed every 667 ms, each round trip bounded at
    // 800 ms (lock_at_most_for must exceed twice the socket timeout): a
    // slow round trip on a loaded machine is not an error (was 200 ms).
    let short = |url: &str| {
        LockClient::builder(url)
            .socket_timeout(Duration::from_millis(800))
            .connect()
            .unwrap()
    };
    let (a, b) = (short(&server.url()), short(&server.url()));
    let at_most = Duration::from_secs(2);
    let tries = AtomicU64::new(0);
    let ran = a
        .job("long")
        .lock_at_most_for(at_most)
        .run(|| {
            // Four leases long: another replica is skipped every time.
            let until = Instant::now() + at_most * 4;
            while Instant::now() < until {
                let other = b.job("long").lock_at_most_for(at_most).run(|| ());
                assert!(other.unwrap().is_skipped(), "ran beside the holder");
                tries.fetch_add(1, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(100));
            }
            assert_locked();
        })
        .unwrap();
    assert!(matches!(ran, JobRun::Ran(())), "{ran:?}");
    assert!(tries.load(Ordering::Relaxed) >= 10);
}

#[test]
fn a_lock_lost_while_the_job_runs_is_told_and_its_end_says_not_held() {
    let server = RedisServer::start();
    let client = LockClient::builder(&server.url())
        .socket_timeout(Duration::from_millis(200))
        .connect()
        .unwrap();
    let job = client
        .job("lost")
        .lock_at_most_for(Duration::from_millis(900));
    let guard = job.try_lock().unwrap().expect("free");
    assert!(job.try_lock().unwrap().is_none(), "a second run got it");
    assert_eq!(guard.key(), "job-lock:default:lost");
    let mut con = server.connection();
    // Someone took it over (an operator, or a replica after a partition).
    let _: () = con.set("job-lock:default:lost", "ADDED:other").unwrap();
    let why = guard.lost().wait_timeout(Duration::from_secs(10));
    assert!(why.is_some(), "the renewal did not find it gone");
    assert!(!guard.is_held() && guard.remaining() == Duration::ZERO);
    let e = guard.unlock().unwrap_err();
    assert!(matches!(e, leasehold::Error::NotHeld { .. }), "{e:?}");
    let value: String = con.get("job-lock:default:lost").unwrap();
    assert_eq!(value, "ADDED:other", "the other's lock was left alone");
    assert_eq!(job.history().unwrap().lost, 1);
}

#[test]
fn an_async_run_holds_the_lock_across_awaits_and_asserts_at_every_poll() {
    let server = RedisServer::start();
    let client = leasehold::AsyncLockClient::builder(&server.url())
        .build()
        .unwrap();
    let blocking = LockClient::connect(&server.url()).unwrap();
    let mut con = server.connection();
    let rt = support::current_thread();
    let out = rt.block_on(async {
        client
            .job("async")
            .run(async {
                assert_locked();
                tokio::time::sleep(Duration::from_millis(50)).await;
                assert_locked(); // a later poll, still inside
                let holder: Option<String> = con.get("job-lock:default:async").unwrap();
                holder.expect("held while the job runs")
            })
            .await
            .unwrap()
    });
    let holder = out.ran().expect("ran");
    assert!(is_shedlock_value(&holder, &host()), "{holder}");
    assert_eq!(running_job(), None);
    let guard = rt
        .block_on(client.job("async").try_lock())
        .unwrap()
        .expect("free again");
    assert!(blocking.job("async").try_lock().unwrap().is_none());
    rt.block_on(guard.unlock()).unwrap();
    assert!(blocking.job("async").try_lock().unwrap().is_some());
}

/// ShedLock's Redis provider, command for command
/// (`InternalRedisLockProvider` with `safeUpdate`): what a Java service
/// sends for the same job.
struct ShedLock {
    con: redis::Connection,
}

/// ShedLock's `delLuaScript` and `updLuaScript`, verbatim.
const SHEDLOCK_DEL: &str = r#"
        if redis.call("get",KEYS[1]) == ARGV[1] then
            return redis.call("del",KEYS[1])
        else
            return 0
        end
        "#;
const SHEDLOCK_UPD: &str = r#"
        if redis.call('get', KEYS[1]) == ARGV[1] then
           return redis.call('pexpire', KEYS[1], ARGV[2])
        else
           return 0
        end
        "#;

impl ShedLock {
    /// `SET job-lock:default:<name> ADDED:…@java-1:<uuid> NX PX <at_most>`.
    fn lock(&mut self, name: &str, at_most: Duration) -> Option<(String, String)> {
        let key = format!("job-lock:default:{name}");
        let value = format!(
            "ADDED:2026-11-28T08:00:00.000Z@java-1:{}",
            uuid::Uuid::new_v4()
        );
        let set: Option<String> = redis::cmd("SET")
            .arg(&key)
            .arg(&value)
            .arg("NX")
            .arg("PX")
            .arg(at_most.as_millis() as u64)
            .query(&mut self.con)
            .unwrap();
        set.map(|_| (key, value))
    }

    /// Its `doUnlock`: the rest of `lockAtLeastFor` as the expiry
    /// (`updLuaScript`), or the key deleted (`delLuaScript`); 1 if it was
    /// its own.
    fn unlock(&mut self, key: &str, value: &str, keep: Duration) -> i64 {
        let keep = keep.as_millis() as u64;
        let mut cmd = redis::cmd("EVAL");
        if keep > 0 {
            cmd.arg(SHEDLOCK_UPD).arg(1).arg(key).arg(value).arg(keep);
        } else {
            cmd.arg(SHEDLOCK_DEL).arg(1).arg(key).arg(value);
        }
        cmd.query(&mut self.con).unwrap()
    }
}

#[test]
fn shedlock_and_leasehold_share_a_job_and_refuse_each_others_unlock() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).unwrap();
    let mut java = ShedLock {
        con: server.connection(),
    };
    let mut con = server.connection();
    let job = client.job("nightly");

    // Java holds it: leasehold's run is skipped, told the Java host.
    let (key, value) = java.lock("nightly", Duration::from_secs(10)).unwrap();
    assert_eq!(key, job.key());
    match job.run(|| ()).unwrap() {
        JobRun::Skipped(skip) => assert_eq!(skip.host(), Some("java-1")),
        other => panic!("ran beside ShedLock's holder: {other:?}"),
    }
    // Java ends its run with 300 ms of lockAtLeastFor left: still skipped
    // until then.
    assert_eq!(java.unlock(&key, &value, Duration::from_millis(300)), 1);
    assert!(job.run(|| ()).unwrap().is_skipped());
    assert!(eventually(Duration::from_secs(5), || {
        !con.exists::<_, bool>(&key).unwrap()
    }));

    // leasehold holds it: Java's SET NX fails, and its unlock scripts,
    // carrying its own value, change nothing.
    let guard = job.try_lock().unwrap().expect("free");
    assert!(java.lock("nightly", Duration::from_secs(10)).is_none());
    assert_eq!(java.unlock(&key, &value, Duration::ZERO), 0);
    assert_eq!(java.unlock(&key, &value, Duration::from_secs(60)), 0);
    let now: String = con.get(&key).unwrap();
    assert_eq!(now, guard.value());
    drop(guard);
    assert!(!con.exists::<_, bool>(&key).unwrap());

    // Java took it over while ours was out (a lost lease): our end is
    // refused, and Java's lock stays.
    let guard = job.try_lock().unwrap().expect("free");
    let _: () = con.del(&key).unwrap();
    let (_, value) = java.lock("nightly", Duration::from_secs(10)).unwrap();
    let e = guard.unlock().unwrap_err();
    assert!(matches!(e, leasehold::Error::NotHeld { .. }), "{e:?}");
    let now: String = con.get(&key).unwrap();
    assert_eq!(now, value, "ShedLock's lock was left alone");
}

#[test]
fn shedlock_and_leasehold_run_a_job_once_per_window_between_them() {
    const WINDOWS: u64 = 8;
    // Scheduling delays of up to 400 ms (the window less the minimum hold)
    // change nothing.
    let window = Duration::from_millis(800);
    let at_least = Duration::from_millis(400);
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).unwrap();
    let job = client.job("shared").lock_at_least_for(at_least);
    let start = Instant::now() + Duration::from_millis(200);
    let both = Barrier::new(2);
    let ran = Arc::new([(); WINDOWS as usize].map(|()| AtomicU64::new(0)));
    std::thread::scope(|s| {
        // Each side fires every window, one of them 40 ms after the other —
        // which one alternates.
        let fire = |w: u64, late: bool| {
            let at = start + window * w as u32 + Duration::from_millis(if late { 40 } else { 0 });
            std::thread::sleep(at.saturating_duration_since(Instant::now()));
        };
        let (ran_j, both_j) = (Arc::clone(&ran), &both);
        let java_con = server.connection();
        s.spawn(move || {
            let mut java = ShedLock { con: java_con };
            both_j.wait();
            for w in 0..WINDOWS {
                fire(w, w % 2 == 0);
                let began = Instant::now();
                if let Some((key, value)) = java.lock("shared", Duration::from_secs(10)) {
                    ran_j[w as usize].fetch_add(1, Ordering::SeqCst);
                    std::thread::sleep(Duration::from_millis(20));
                    java.unlock(&key, &value, at_least.saturating_sub(began.elapsed()));
                }
            }
        });
        both.wait();
        for w in 0..WINDOWS {
            fire(w, w % 2 == 1);
            let run = job.run(|| {
                ran[w as usize].fetch_add(1, Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(20));
            });
            let _skipped_or_ran = run.unwrap();
        }
    });
    let counts: Vec<u64> = ran.iter().map(|c| c.load(Ordering::SeqCst)).collect();
    assert_eq!(counts, vec![1; WINDOWS as usize], "runs per window");
}

#[test]
fn a_run_whose_lock_was_lost_keeps_its_output_and_says_so() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).unwrap();
    let mut con = server.connection();
    let run = client
        .job("taken-over")
        .run(|| {
            // Taken over while it ran (an operator, a partition).
            let _: () = con
                .set("job-lock:default:taken-over", "ADDED:other")
                .unwrap();
            "the report"
        })
        .unwrap();
    match run {
        JobRun::RanUnconfirmed { output, error } => {
            assert_eq!(output, "the report");
            assert!(
                matches!(error, leasehold::Error::NotHeld { .. }),
                "{error:?}"
            );
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn settings_that_cannot_work_and_a_history_of_another_type_are_refused_untouched() {
    let server = RedisServer::start();
    let client = LockClient::connect(&server.url()).unwrap();
    let e = client
        .job("j")
        .lock_at_most_for(Duration::from_secs(60))
        .lock_at_least_for(Duration::from_secs(600))
        .try_lock()
        .unwrap_err();
    assert!(
        e.is_invalid_argument() && e.to_string().contains("lock_at_least_for"),
        "{e}"
    );
    let e = client
        .job("j")
        .lock_at_most_for(Duration::from_secs(5)) // not above two socket timeouts (3 s)
        .try_lock()
        .unwrap_err();
    assert!(
        e.is_invalid_argument() && e.to_string().contains("lock_at_most_for"),
        "{e}"
    );
    let mut con = server.connection();
    let _: () = con
        .set("{job-lock:default:h}:leasehold_job_history", "x")
        .unwrap();
    let e = client.job("h").try_lock().unwrap_err();
    assert!(matches!(e, leasehold::Error::NotALock { .. }), "{e:?}");
    assert!(
        !con.exists::<_, bool>("job-lock:default:h").unwrap(),
        "taken anyway"
    );
}

/// A take whose reply was lost (Redis slower than the socket timeout) is
/// undone once Redis answers — not left for the whole `lock_at_most_for`
/// (a minute here, against seconds).
#[test]
fn a_take_whose_reply_was_lost_is_undone_once_redis_answers() {
    let server = RedisServer::start_with_debug_command();
    let client = LockClient::builder(&server.url())
        .socket_timeout(Duration::from_millis(300))
        .connect()
        .unwrap();
    let job = client.job("slow").lock_at_most_for(Duration::from_secs(60));
    // (The scripts loaded first: a first EVALSHA is refused, NOSCRIPT.)
    assert!(client.job("warm").run(|| ()).unwrap().ran().is_some());
    // Redis stalls 2 s: the take waits in its socket, runs after the
    // client gave up on its reply. The take is sent once a probe finds
    // Redis stalled (its PING unanswered for 50 ms), not after a guess.
    let (mut stall, mut probe) = (server.connection(), server.connection());
    probe
        .set_read_timeout(Some(Duration::from_millis(50)))
        .unwrap();
    let sleeping = std::thread::spawn(move || {
        let _: () = redis::cmd("DEBUG")
            .arg("SLEEP")
            .arg("2")
            .query(&mut stall)
            .unwrap();
    });
    loop {
        match redis::cmd("PING").query::<String>(&mut probe) {
            Err(e) if e.is_timeout() => break,
            Err(e) => panic!("{e}"),
            Ok(_) => std::thread::sleep(Duration::from_millis(5)),
        }
    }
    let e = job
        .run(|| unreachable!("ran without its reply"))
        .unwrap_err();
    assert!(e.is_timeout(), "{e:?}");
    sleeping.join().unwrap();
    // The take ran (the history counts its run), then its undo ended it.
    assert_eq!(
        job.history().unwrap().runs,
        1,
        "the take never ran: nothing to undo"
    );
    let mut con = server.connection();
    assert!(
        eventually(Duration::from_secs(10), || {
            !con.exists::<_, bool>("job-lock:default:slow").unwrap()
        }),
        "the lost take's lock stayed"
    );
    assert!(job.run(|| 1).unwrap().ran().is_some());
}

/// A job's end that Redis refused (`LOADING`: it never ran) is sent again
/// once Redis answers, as a lock's release is, and not left for the rest
/// of `lock_at_most_for` (a minute here, against seconds). The run is
/// told it ran, unconfirmed.
#[test]
fn a_refused_end_is_sent_again_once_redis_answers() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(server.port());
    let client = LockClient::connect(&proxy.url()).unwrap();
    let job = client
        .job("refused")
        .lock_at_most_for(Duration::from_secs(60));
    let refuse = || {
        proxy.set(Fault::Refuse(
            "LOADING Redis is loading the dataset in memory",
        ))
    };
    let run = job.run(refuse).unwrap();
    assert!(matches!(run, JobRun::RanUnconfirmed { .. }), "{run:?}");
    proxy.set(Fault::Forward);
    let mut con = server.connection();
    assert!(
        eventually(Duration::from_secs(10), || !con
            .exists::<_, bool>("job-lock:default:refused")
            .unwrap()),
        "the refused end was not sent again: the lock stays its minute"
    );
}
