//! The face table kept true: every public method of a blocking face has its
//! twin of the same name on the async face, and the reverse, but for the
//! few that only make sense on one face (listed here, each with why). Read
//! from the sources (`impl <Type>` blocks, and the kind rungs that
//! `src/ladder.rs` writes for both faces at once), so a method added to one
//! face only fails this test until its twin exists or the list says why.
//! The table itself is in the crate docs (`src/lib.rs`, "Every face").

use std::collections::BTreeSet;
use std::path::Path;

/// The public methods of every `impl <ty>` block in `src/`.
fn methods(ty: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for file in rust_files(Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../src"))) {
        let text = std::fs::read_to_string(&file).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        let mut i = 0;
        while i < lines.len() {
            let line = lines[i];
            let opens =
                line.starts_with("impl") && !line.contains(" for ") && self_type(line) == Some(ty);
            if !opens {
                i += 1;
                continue;
            }
            let mut depth = 0i32;
            loop {
                let l = lines[i];
                if depth == 1 || (depth == 0 && l.contains('{') && l.starts_with("impl")) {
                    let t = l.trim_start();
                    for prefix in ["pub fn ", "pub async fn "] {
                        if let Some(rest) = t.strip_prefix(prefix) {
                            let name: String = rest
                                .chars()
                                .take_while(|c| c.is_alphanumeric() || *c == '_')
                                .collect();
                            found.insert(name);
                        }
                    }
                }
                depth += l.matches('{').count() as i32 - l.matches('}').count() as i32;
                i += 1;
                if depth <= 0 || i >= lines.len() {
                    break;
                }
            }
        }
    }
    found
}

/// The type an `impl` line is of: `impl<O> LockGuard<O> {` → `LockGuard`
/// (not a type named in its parameters, as `AsyncLockClient` in
/// `impl LockClientBuilder<AsyncLockClient>`).
fn self_type(line: &str) -> Option<&str> {
    let mut rest = line.strip_prefix("impl")?;
    if rest.starts_with('<') {
        let mut depth = 0;
        let end = rest.char_indices().find_map(|(i, c)| {
            depth += match c {
                '<' => 1,
                '>' => -1,
                _ => 0,
            };
            (depth == 0).then_some(i)
        })?;
        rest = &rest[end + 1..];
    }
    rest.split(|c: char| !c.is_alphanumeric() && c != '_')
        .find(|w| !w.is_empty())
}

/// The kind rungs `src/ladder.rs` gives both client faces.
fn ladder_rungs() -> BTreeSet<String> {
    let text =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../src/ladder.rs")).unwrap();
    let mut rungs = BTreeSet::new();
    for invocation in text.split("kind_rungs!(").skip(1) {
        let list = invocation
            .split('[')
            .nth(1)
            .unwrap()
            .split(']')
            .next()
            .unwrap();
        rungs.extend(list.split(',').map(|n| n.trim().to_owned()));
    }
    assert_eq!(rungs.len(), 12, "three kinds, four rungs each: {rungs:?}");
    rungs
}

fn rust_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
    files
}

/// `blocking` and `asynch`'s methods agree but for the ones named, each
/// only on its face.
fn twins(blocking: &str, asynch: &str, only_blocking: &[&str], only_async: &[&str]) {
    let (b, a) = (methods(blocking), methods(asynch));
    assert!(
        !b.is_empty() && !a.is_empty(),
        "no methods read for {blocking}/{asynch}"
    );
    let missing_async: Vec<_> = b
        .difference(&a)
        .filter(|m| !only_blocking.contains(&m.as_str()))
        .collect();
    let missing_blocking: Vec<_> = a
        .difference(&b)
        .filter(|m| !only_async.contains(&m.as_str()))
        .collect();
    assert!(
        missing_async.is_empty() && missing_blocking.is_empty(),
        "{blocking} has {missing_async:?} without a twin on {asynch}; \
         {asynch} has {missing_blocking:?} without a twin on {blocking}"
    );
    for m in only_blocking {
        assert!(
            b.contains(*m) && !a.contains(*m),
            "{m}: listed as {blocking}'s only"
        );
    }
    for m in only_async {
        assert!(
            a.contains(*m) && !b.contains(*m),
            "{m}: listed as {asynch}'s only"
        );
    }
}

#[test]
fn the_ladder_of_kinds_is_on_both_faces() {
    let rungs = ladder_rungs();
    for rung in ["fair_lock", "try_read_lock_until", "try_write_lock_for"] {
        assert!(rungs.contains(rung), "{rung}");
    }
}

#[test]
fn every_method_of_the_blocking_client_has_its_async_twin() {
    twins(
        "LockClient",
        "AsyncLockClient",
        &[
            // The blocking client's async face (the async one has
            // `blocking`, below).
            "to_async",
            // A thread's reentrant hold that may move: an async guard
            // already is one (every async acquisition has its own owner).
            "lock_owned",
            "lock_owned_with",
            "try_lock_owned",
            "try_lock_owned_for",
            "try_lock_owned_until",
            "try_lock_owned_with",
            // Pure, no round trip: the same on either face through
            // `blocking()`.
            "acl_rules",
            "watchdog_lease",
            // Redlock over several clients is blocking only (its own type).
        ],
        &["blocking"],
    );
}

#[test]
fn every_method_of_the_blocking_guards_and_semaphore_has_its_async_twin() {
    twins("Semaphore", "AsyncSemaphore", &[], &["blocking"]);
    twins("PermitGuard", "AsyncPermitGuard", &[], &[]);
    twins("MultiLockGuard", "AsyncMultiLockGuard", &[], &[]);
    twins("LockGuard", "AsyncLockGuard", &[], &[]);
    twins("Job", "AsyncJob", &[], &["blocking"]);
    twins("JobGuard", "AsyncJobGuard", &[], &[]);
    twins("Election", "AsyncElection", &[], &[]);
    twins("Leadership", "AsyncLeadership", &[], &[]);
}

/// Every guard answers the same questions where the concept exists: what
/// it holds (`name`/`key`, `names`/`keys` for several), whether and until
/// when (`is_held`, `valid_until`, `remaining`), the lease-lost signal, the
/// one word for a checked release (`unlock`; no `release` anywhere), the
/// lease of one hold, the fencing token of the kinds that mint one.
#[test]
fn every_guard_has_the_accessors_its_concept_has() {
    let everywhere = ["is_held", "valid_until", "remaining", "lost", "unlock"];
    let one_hold = ["name", "key", "lease"];
    let several = ["names", "keys", "guards"];
    let guards: [(&str, &[&str]); 9] = [
        ("JobGuard", &one_hold),
        ("AsyncJobGuard", &one_hold),
        ("LockGuard", &one_hold),
        ("AsyncLockGuard", &one_hold),
        ("PermitGuard", &one_hold),
        ("AsyncPermitGuard", &one_hold),
        ("RedlockGuard", &one_hold),
        ("MultiLockGuard", &several),
        ("AsyncMultiLockGuard", &several),
    ];
    for (guard, own) in guards {
        let has = methods(guard);
        let missing: Vec<&str> = (everywhere.iter().chain(own))
            .copied()
            .filter(|m| !has.contains(*m))
            .collect();
        assert!(
            missing.is_empty(),
            "{guard} lacks {missing:?}; it has {has:?}"
        );
        assert!(
            !has.contains("release"),
            "{guard}: the checked release is `unlock`"
        );
    }
    for fenced in ["LockGuard", "AsyncLockGuard"] {
        assert!(methods(fenced).contains("fence"), "{fenced} lacks fence");
    }
}

/// The accessors the last test asks for, answering on real holds.
#[test]
fn the_accessors_answer_for_what_is_held() {
    use std::time::Duration;

    use leasehold::{LockClient, Redlock, RedlockOptions};

    let redis = leasehold::testing::TestServer::start().unwrap();
    let client = LockClient::builder(&redis.url())
        .key_prefix("app:")
        .build()
        .unwrap();
    let sem = client.semaphore("s");
    sem.set_permits(1).unwrap();
    let permit = sem.acquire().unwrap();
    assert_eq!(permit.key(), "app:s");
    let all = client.lock_all(&["b", "a"]).unwrap();
    assert_eq!(all.keys().collect::<Vec<_>>(), ["app:a", "app:b"]);
    let until = all.valid_until().expect("held");
    assert!(all.guards().iter().all(|g| g.valid_until() >= Some(until)));
    assert!(all.remaining() > Duration::ZERO);
    all.unlock().unwrap();
    let red = Redlock::builder(&[redis.url()])
        .key_prefix("app:")
        .build()
        .unwrap();
    let lease = Duration::from_secs(20);
    let held = red
        .lock_with("r", RedlockOptions::new().lease(lease))
        .unwrap();
    assert_eq!((held.key(), held.lease()), ("app:r", lease));
    assert!(held.remaining() <= lease && held.remaining() > lease / 2);
}

/// The rungs this table added, against a real server: each gives the
/// hold when it is to be had and `None` when it stays busy (another
/// client holds it) — and a `try` of several names leaves none held.
#[test]
fn the_new_rungs_take_what_is_free_and_give_none_for_what_stays_busy() {
    use std::time::{Duration, Instant};

    use leasehold::{AsyncLockClient, LockClient, LockOptions, Redlock, RedlockOptions};

    let redis = leasehold::testing::TestServer::start().unwrap();
    let (me, other) = (
        LockClient::new(&redis.url()).unwrap(),
        LockClient::new(&redis.url()).unwrap(),
    );
    let soon = || Instant::now() + Duration::from_millis(100);
    let short = Duration::from_millis(100);

    // Kinds and owned holds, blocking.
    assert!(me.try_fair_lock("f").unwrap().is_some());
    let held = other.fair_lock("f2").unwrap();
    assert!(me.try_fair_lock_until("f2", soon()).unwrap().is_none());
    drop(held);
    let writer = other.write_lock("rw").unwrap();
    assert!(me.try_read_lock_until("rw", soon()).unwrap().is_none());
    assert!(me.try_write_lock_until("rw", soon()).unwrap().is_none());
    drop(writer);
    assert!(me.try_read_lock_until("rw", soon()).unwrap().is_some());
    let owned = me.try_lock_owned("o").unwrap().expect("free");
    assert!(other.try_lock_owned_for("o", short).unwrap().is_none());
    assert!(other.try_lock_owned_until("o", soon()).unwrap().is_none());
    drop(owned);
    assert!(other.try_lock_owned("o").unwrap().is_some());

    // Several names: all or none.
    let busy = other.lock("b").unwrap();
    assert!(me.try_lock_all(&["a", "b"]).unwrap().is_none());
    assert!(me
        .try_lock_all_until(&["a", "b"], soon())
        .unwrap()
        .is_none());
    let with = LockOptions::new().wait(short);
    assert!(me.try_lock_all_with(&["a", "b"], with).unwrap().is_none());
    assert!(other.try_lock("a").unwrap().is_some(), "a was given back");
    drop(busy);
    assert!(me.try_lock_all(&["a", "b"]).unwrap().is_some());

    // Permits.
    let sem = me.semaphore("s");
    sem.set_permits(2).unwrap();
    let one = sem.try_acquire().unwrap().expect("free");
    assert!(sem.try_acquire_many(2).unwrap().is_none());
    drop(one);
    let two = sem
        .try_acquire_many_for(2, short)
        .unwrap()
        .expect("two free");
    assert!(sem.try_acquire_until(soon()).unwrap().is_none());
    assert!(sem.try_acquire_many_until(1, soon()).unwrap().is_none());
    drop(two);
    assert!(sem.try_acquire_until(soon()).unwrap().is_some());

    // Redlock over one node.
    let (r1, r2) = (
        Redlock::new(&[redis.url()]).unwrap(),
        Redlock::new(&[redis.url()]).unwrap(),
    );
    let red = r1
        .try_lock_with("red", RedlockOptions::new())
        .unwrap()
        .expect("free");
    assert!(r2.try_lock_until("red", soon()).unwrap().is_none());
    assert!(r2
        .try_lock_with("red", RedlockOptions::new().wait(short))
        .unwrap()
        .is_none());
    drop(red);
    assert!(r2.try_lock_until("red", soon()).unwrap().is_some());

    // The async face.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // (Blocking calls of `other` are made off the runtime: with the `tokio`
    // feature they are refused on it.)
    let tasks = AsyncLockClient::new(&redis.url()).unwrap();
    let held = other.fair_lock("af").unwrap();
    rt.block_on(async {
        assert!(tasks.try_fair_lock("af").await.unwrap().is_none());
        assert!(tasks
            .try_fair_lock_for("af", short)
            .await
            .unwrap()
            .is_none());
    });
    drop(held);
    rt.block_on(async {
        assert!(tasks
            .try_fair_lock_until("af", soon())
            .await
            .unwrap()
            .is_some());
    });
    let writer = other.write_lock("arw").unwrap();
    rt.block_on(async {
        assert!(tasks.try_read_lock("arw").await.unwrap().is_none());
        assert!(tasks
            .try_write_lock_for("arw", short)
            .await
            .unwrap()
            .is_none());
    });
    drop(writer);
    let busy = other.lock("ab").unwrap();
    rt.block_on(async {
        assert!(tasks.try_write_lock("arw").await.unwrap().is_some());
        assert!(tasks.try_lock_all(&["aa", "ab"]).await.unwrap().is_none());
        assert!(tasks
            .try_lock_all_until(&["aa", "ab"], soon())
            .await
            .unwrap()
            .is_none());
    });
    drop(busy);
    rt.block_on(async {
        // The names a failed attempt took are given back in the background
        // (as a dropped async guard's): wait for them.
        let all = tasks
            .try_lock_all_for(&["aa", "ab"], Duration::from_secs(10))
            .await
            .unwrap()
            .expect("free");
        let listed = tasks.list("a*", 10).await.unwrap();
        assert!(listed.iter().any(|l| l.name == "aa"), "{listed:?}");
        assert_eq!(all.lost().check(), None);
        all.unlock().await.unwrap();
        let sem = tasks.semaphore("as");
        sem.set_permits(1).await.unwrap();
        let permit = sem
            .try_acquire_many_until(1, soon())
            .await
            .unwrap()
            .expect("one free");
        assert_eq!(permit.name(), "as");
        assert!(permit.valid_until().is_some() && permit.remaining() > Duration::ZERO);
        assert!(sem.try_acquire_many(1).await.unwrap().is_none());
        assert!(sem.try_acquire_until(soon()).await.unwrap().is_none());
        permit.unlock().await.unwrap();
        tasks.close().await;
    });
}
