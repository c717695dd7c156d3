//! TLS (`rediss://`): with the `tls` feature, locks, waiting (the subscriber
//! speaks TLS too), renewal and fencing against a TLS-only `redis-server`
//! whose certificate is made at test time, and the same on a TLS-only
//! 3-primary cluster; without it, a clear refusal.
//! `scripts/test.sh` runs the suite both ways.

mod support;

#[cfg(not(feature = "tls"))]
#[test]
fn without_the_feature_tls_urls_are_refused_with_what_to_do() {
    let e = leasehold::LockClient::new("rediss://127.0.0.1:6380/").unwrap_err();
    assert!(e.is_invalid_argument(), "{e:?}");
    assert!(e.to_string().contains("`tls` cargo feature"), "{e}");
}

#[cfg(feature = "tls")]
mod with_tls {
    use std::thread;
    use std::time::{Duration, Instant};

    use leasehold::{LockClient, LockOptions};
    use redis::Commands;

    use leasehold::ShardedPubSub;

    use super::support::{eventually, name_in_slot, RedisCluster, RedisServer};

    fn client(server: &RedisServer, lease: Duration) -> LockClient {
        LockClient::builder(&server.url())
            .tls_root_certificate(server.tls_ca().unwrap())
            .watchdog_lease(lease)
            .build()
            .unwrap()
    }

    #[test]
    fn locks_waiters_renewal_and_fencing_work_over_tls() {
        let server = RedisServer::start_tls();
        assert!(server.url().starts_with("rediss://"));
        let holder = client(&server, Duration::from_secs(30));
        let waiter = client(&server, Duration::from_secs(30));
        let guard = holder
            .lock_with("tls:job", LockOptions::new().fenced())
            .unwrap();
        assert!(guard.fence().is_some());
        // A waiter of another client parks on the TLS subscriber …
        let w = waiter.clone();
        let t = thread::spawn(move || w.lock("tls:job").map(|g| g.unlock()));
        assert!(eventually(Duration::from_secs(10), || waiter
            .stats()
            .waiters_parked
            == 1));
        assert_eq!(
            super::support::listening_clients(&server, "tls:job"),
            1,
            "subscribed over TLS"
        );
        // … and is woken by the unlock message, not by the 30 s lease.
        let released = Instant::now();
        guard.unlock().unwrap();
        assert!(matches!(t.join().unwrap(), Ok(Ok(()))));
        assert!(released.elapsed() < Duration::from_secs(5));

        // Renewal runs over TLS too: two renewals (a second in), then half a
        // second past the first lease; renewed every 500 ms, a second to
        // spare.
        let short = client(&server, Duration::from_millis(1_500));
        let renewed = short.lock("tls:renewed").unwrap();
        assert!(eventually(Duration::from_secs(5), || short
            .stats()
            .renewals_sent
            >= 2));
        thread::sleep(Duration::from_millis(1_000));
        assert!(renewed.is_held(), "renewed past its 1.5 s lease");
        let exists: bool = server.connection().exists("tls:renewed").unwrap();
        assert!(exists);
        renewed.unlock().unwrap();
    }

    /// A TLS connection the server closed while it sat idle (`CLIENT
    /// KILL`: its `close_notify`, then the end of the TCP stream) is found
    /// so before anything is sent on it, and the call goes on a new one: no
    /// error, the reentrant release ran once. (A request sent on it would
    /// meet the close after it went out, when it may have run.)
    #[test]
    fn a_tls_connection_closed_while_idle_is_replaced_before_anything_is_sent() {
        let server = RedisServer::start_tls();
        let client = client(&server, Duration::from_secs(30));
        let outer = client.lock("tls:idle").unwrap();
        let inner = client.lock("tls:idle").unwrap();
        server.kill_clients();
        let mut admin = server.connection();
        inner.unlock().unwrap();
        let count: Vec<String> = admin.hvals("tls:idle").unwrap();
        assert_eq!(count, ["1"]);
        outer.unlock().unwrap();
    }

    #[test]
    fn an_untrusted_certificate_is_refused() {
        let server = RedisServer::start_tls();
        let other = RedisServer::start_tls(); // a different self-signed CA
        let client = LockClient::builder(&server.url())
            .tls_root_certificate(other.tls_ca().unwrap())
            .connect_timeout(Duration::from_millis(500))
            .build()
            .unwrap();
        let e = client.lock("tls:untrusted").unwrap_err();
        assert!(e.is_connection(), "{e:?}");
    }

    #[test]
    fn unverified_tls_is_refused() {
        let e = LockClient::new("rediss://127.0.0.1:6380/#insecure").unwrap_err();
        assert!(e.is_invalid_argument(), "{e:?}");
    }

    #[test]
    fn a_tls_cluster_locks_wakes_waiters_and_renews_on_every_primary() {
        let cluster = RedisCluster::start_tls(3, 0);
        let urls = cluster.urls();
        assert!(urls.iter().all(|u| u.starts_with("rediss://")), "{urls:?}");
        let ca = cluster.nodes[0].tls_ca().unwrap().to_vec();
        let build = |lease: Duration, pubsub: ShardedPubSub| {
            LockClient::cluster_builder(&urls)
                .tls_root_certificate(ca.clone())
                .watchdog_lease(lease)
                .sharded_pubsub(pubsub)
                .build()
                .unwrap()
        };
        // A name on each primary.
        let names: Vec<String> = cluster
            .primaries()
            .into_iter()
            .map(|i| name_in_slot(&cluster, cluster.first_slot_of(i), "tls:c"))
            .collect();
        assert_eq!(names.len(), 3);

        // Waiters of another client are woken by the unlock message on a
        // TLS subscriber: the sharded one of each name's node, and the
        // classic one when forced.
        for pubsub in [ShardedPubSub::Auto, ShardedPubSub::Off] {
            let holder = build(Duration::from_secs(30), pubsub);
            let waiter = build(Duration::from_secs(30), pubsub);
            for name in &names {
                let guard = holder.lock(name).unwrap();
                let (w, n) = (waiter.clone(), name.clone());
                let t = thread::spawn(move || w.lock(&n).map(|g| g.unlock()));
                assert!(eventually(Duration::from_secs(10), || waiter
                    .stats()
                    .waiters_parked
                    == 1));
                let released = Instant::now();
                guard.unlock().unwrap();
                assert!(matches!(t.join().unwrap(), Ok(Ok(()))), "{pubsub:?} {name}");
                // Woken by the message: the 30 s lease was far from over.
                assert!(
                    released.elapsed() < Duration::from_secs(5),
                    "{pubsub:?} {name}: {:?}",
                    released.elapsed()
                );
            }
        }

        // Renewal over TLS to every primary, past a short lease (half a
        // second past it; renewed every 500 ms, a second to spare).
        let short = build(Duration::from_millis(1_500), ShardedPubSub::Auto);
        let held: Vec<_> = names.iter().map(|n| short.lock(n).unwrap()).collect();
        thread::sleep(Duration::from_millis(2_000));
        for (guard, name) in held.iter().zip(&names) {
            assert!(guard.is_held(), "{name} renewed past its 1.5 s lease");
            let info = short.inspect(name).unwrap();
            assert_eq!(info.holders.len(), 1, "{name}: {info:?}");
        }
        assert!(short.stats().renewals_sent >= 6);
        for guard in held {
            guard.unlock().unwrap();
        }
        assert!(!short.is_locked(&names[0]).unwrap());
    }

    #[test]
    fn sentinel_with_passwords_reaches_a_tls_primary_through_tls_sentinels() {
        let primary = RedisServer::start_tls_with(&[], Some("pr1mary"));
        let sentinel =
            RedisServer::start_sentinel_with_password(&primary, "tls-master", Some("s3ntinel"));
        let url = sentinel.url();
        assert!(url.starts_with("rediss://:s3ntinel@"), "{url}");
        let build = || {
            LockClient::sentinel_builder(&[url.as_str()], "tls-master")
                .sentinel_primary_auth(None, "pr1mary")
                .sentinel_primary_tls()
                .tls_root_certificate(primary.tls_ca().unwrap())
                .build()
                .unwrap()
        };
        let (holder, waiter) = (build(), build());
        let guard = holder.lock("tls:s").unwrap();
        let w = waiter.clone();
        let t = thread::spawn(move || w.lock("tls:s").map(|g| g.unlock()));
        assert!(eventually(Duration::from_secs(10), || waiter
            .stats()
            .waiters_parked
            == 1));
        assert_eq!(super::support::listening_clients(&primary, "tls:s"), 1);
        guard.unlock().unwrap();
        assert!(matches!(t.join().unwrap(), Ok(Ok(()))));
        // Without TLS to the primary the Sentinel's answer cannot be used.
        let plain = LockClient::sentinel_builder(&[url.as_str()], "tls-master")
            .sentinel_primary_auth(None, "pr1mary")
            .tls_root_certificate(primary.tls_ca().unwrap())
            .connect_timeout(Duration::from_secs(1))
            .build()
            .unwrap();
        assert!(plain.lock("tls:s").unwrap_err().is_connection());
    }
}
