//! Operators cannot destroy data, and their calls type their errors (issue
//! 25, items 6-8): `force_unlock`, `inspect`, `is_locked` and `list`
//! recognise a lock by its shape — a hash whose fields are lock owners
//! (`<client-uuid>:<n>`, leasehold's or Redisson's) with hold counts, or a
//! read/write lock's `mode` — and refuse anything else with
//! `Error::NotALock`, leaving it untouched; without the password every one
//! of them is `is_auth()`.

mod support;

use leasehold::{Error, LockClient, LockOptions};
use redis::Commands;
use support::RedisServer;

#[test]
fn application_data_is_never_taken_for_a_lock() {
    let server = RedisServer::start();
    let client = LockClient::new(&server.url()).unwrap();
    let mut con = server.connection();
    let data = support::seed_application_data(&mut con);
    let _: () = con.rpush("jobs", "a").unwrap();
    // Keyed by a uuid, counted: still no lock owner (`<uuid>:<n>`).
    let _: () = con
        .hset(
            "clicks",
            "6f1c2a9e-3b4d-4e5f-8a7b-9c0d1e2f3a4b:clicks",
            "17",
        )
        .unwrap();
    // Real locks beside them, of every kind.
    let plain = client.lock("order:pay").unwrap();
    let fair = client.fair_lock("order:ship").unwrap();
    let read = client.read_lock("catalog").unwrap();
    let fenced = client
        .lock_with("keys:rotate", LockOptions::new().fenced())
        .unwrap();

    for (name, is) in data
        .into_iter()
        .chain([("jobs", "a list"), ("clicks", "a hash")])
    {
        let e = client.force_unlock(name).unwrap_err();
        assert!(matches!(e, Error::NotALock { .. }), "{name}: {e:?}");
        assert!(e.is_wrong_type(), "{name}: {e:?}");
        let text = e.to_string();
        assert!(
            text.contains("is not a lock") && text.contains(is),
            "{text}"
        );
        let e = client.is_locked(name).unwrap_err();
        assert!(matches!(e, Error::NotALock { .. }), "{name}: {e:?}");
        let e = client.inspect(name).unwrap_err();
        assert!(matches!(e, Error::NotALock { .. }), "{name}: {e:?}");
    }
    // What it said about the hashes names a field that is no lock owner.
    let e = client.force_unlock("pages").unwrap_err();
    assert!(e.to_string().contains("page:"), "{e}");

    // Untouched.
    assert!(support::application_data_intact(&mut con));
    assert_eq!(con.llen::<_, i64>("jobs").unwrap(), 1);

    // `list` shows the locks, and nothing else.
    let listed: Vec<String> = client
        .list("*", 10_000)
        .unwrap()
        .into_iter()
        .map(|l| l.name)
        .collect();
    assert_eq!(
        listed,
        ["catalog", "keys:rotate", "order:pay", "order:ship"]
    );
    for name in ["order:pay", "order:ship", "catalog", "keys:rotate"] {
        assert!(client.is_locked(name).unwrap(), "{name}");
        assert!(!client.inspect(name).unwrap().holders.is_empty(), "{name}");
    }
    // A free name is no lock and no error.
    assert!(!client.is_locked("nothing:here").unwrap());
    assert!(!client.force_unlock("nothing:here").unwrap());
    // Real locks are still force-unlocked.
    assert!(client.force_unlock("order:pay").unwrap());
    assert!(!client.is_locked("order:pay").unwrap());
    drop((plain, fair, read, fenced));
}

#[test]
fn every_operator_call_without_the_password_is_an_auth_error() {
    let server = RedisServer::start_with_password("s3cret");
    let holder = LockClient::new(&server.url()).unwrap();
    let _held = holder.lock("ops:held").unwrap();
    let client = LockClient::new(&server.bare_url()).unwrap();
    let calls: Vec<(&str, leasehold::Result<()>)> = vec![
        ("inspect", client.inspect("ops:held").map(drop)),
        ("is_locked", client.is_locked("ops:held").map(drop)),
        ("list", client.list("*", 100).map(drop)),
        ("force_unlock", client.force_unlock("ops:held").map(drop)),
        ("ping", client.ping().map(drop)),
    ];
    for (call, result) in calls {
        let e = result.unwrap_err();
        assert!(e.is_auth(), "{call}: {e:?}");
        assert!(
            !format!("{e:?}").contains("Pipeline failure"),
            "{call}: {e:?}"
        );
    }
    assert!(
        holder.is_locked("ops:held").unwrap(),
        "force_unlock did nothing"
    );
}
