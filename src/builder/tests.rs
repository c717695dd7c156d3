//! The builder's checks of settings, and what its `Debug` and errors hide.
//! Compiled only under #[cfg(test)] (see `builder.rs`).

use super::*;

#[test]
fn bad_settings_are_errors_not_panics() {
    let e = LockClient::builder("redis://127.0.0.1/")
        .pool_size(0)
        .build()
        .unwrap_err();
    assert!(e.is_invalid_argument(), "{e}");
    let e = LockClient::builder("redis://127.0.0.1/")
        .watchdog_lease(Duration::ZERO)
        .build()
        .unwrap_err();
    assert!(e.is_invalid_argument(), "{e}");
    let e = LockClient::new("not a url").unwrap_err();
    assert!(matches!(e, Error::InvalidUrl { .. }), "{e:?}");
    // TLS without verifying the server is refused in every build …
    let e = LockClient::new("rediss://127.0.0.1/#insecure").unwrap_err();
    assert!(matches!(e, Error::InvalidUrl { .. }), "{e:?}");
    // … and TLS at all without the `tls` feature.
    #[cfg(not(feature = "tls"))]
    {
        let e = LockClient::new("rediss://127.0.0.1/").unwrap_err();
        assert!(e.to_string().contains("`tls` cargo feature"), "{e}");
    }
    #[cfg(feature = "tls")]
    {
        let e = LockClient::builder("rediss://127.0.0.1/")
            .tls_root_certificate("not a certificate")
            .build()
            .unwrap_err();
        assert!(e.is_invalid_argument(), "{e:?}");
    }
}

/// Settings that cannot work together are refused, and say why.
#[test]
fn settings_that_cannot_work_are_typed_errors_that_say_why() {
    let refused = |b: LockClientBuilder, words: &[&str]| {
        let e = b.build().unwrap_err();
        assert!(e.is_invalid_argument(), "{e:?}");
        let text = e.to_string();
        for w in words {
            assert!(text.contains(w), "{text:?} should say {w:?}");
        }
    };
    let url = "redis://127.0.0.1/";
    // A watchdog lease one renewal round trip could outlast.
    refused(
        LockClient::builder(url)
            .watchdog_lease(Duration::from_millis(900))
            .socket_timeout(Duration::from_millis(500)),
        &["watchdog lease (900ms)", "socket timeout (500ms)", "twice"],
    );
    refused(
        LockClient::builder(url)
            .socket_timeout(Duration::from_secs(15))
            .watchdog_lease(Duration::from_secs(30)),
        &["watchdog lease (30s)", "socket timeout (15s)"],
    );
    // Timeouts no reply can meet.
    refused(
        LockClient::builder(url).socket_timeout(Duration::from_micros(200)),
        &["socket timeout", "1 ms"],
    );
    refused(
        LockClient::builder(url).connect_timeout(Duration::from_micros(200)),
        &["connect timeout", "1 ms"],
    );
    // The primary's settings are Sentinel's; a single server's go in its URL.
    refused(
        LockClient::builder(url).sentinel_primary_auth(None, "pw"),
        &[
            "sentinel_builder only",
            "redis://user:password@host:port/db",
        ],
    );
    // A cluster's nodes, and Sentinels, are all reached one way: TLS or not.
    let mixed = ["redis://127.0.0.1:7000", "rediss://127.0.0.1:7001"];
    for b in [
        LockClient::cluster_builder(&mixed),
        LockClient::sentinel_builder(&mixed, "m"),
    ] {
        let e = b.build().unwrap_err();
        assert!(
            e.to_string().contains("all redis:// or all rediss://"),
            "{e}"
        );
    }
    // Sentinel needs the name of the primary it watches.
    refused(
        LockClient::sentinel_builder(&["redis://127.0.0.1:26379"], ""),
        &["master name"],
    );
    // What works: a short watchdog lease without a socket timeout of its
    // own gets one that fits (a third of the lease), and explicit
    // settings just inside the rule.
    let short = LockClient::builder(url)
        .watchdog_lease(Duration::from_millis(300))
        .build()
        .unwrap();
    assert_eq!(short.raw().socket_timeout(), Duration::from_millis(100));
    let default = LockClient::new(url).unwrap();
    assert_eq!(default.raw().socket_timeout(), Duration::from_secs(3));
    LockClient::builder(url)
        .watchdog_lease(Duration::from_millis(1_001))
        .socket_timeout(Duration::from_millis(500))
        .build()
        .unwrap();
}

#[test]
fn debug_and_errors_hide_secrets() {
    assert_eq!(
        redact("redis://user:hunter2@127.0.0.1:6379/0"),
        "redis://user:***@127.0.0.1:6379/0"
    );
    assert_eq!(redact("redis://127.0.0.1/"), "redis://127.0.0.1/");
    let builder = LockClient::sentinel_builder(&["redis://:s3cret@127.0.0.1:26379/"], "m")
        .sentinel_primary_auth(Some("app"), "pr1mary");
    let shown = format!("{builder:?}");
    assert!(
        !shown.contains("s3cret") && !shown.contains("pr1mary"),
        "{shown}"
    );
    let shown = format!("{:?}", LockClient::builder("redis://u:hunter2@127.0.0.1/"));
    assert!(
        !shown.contains("hunter2") && shown.contains("u:***@"),
        "{shown}"
    );
    let client = LockClient::new("redis://127.0.0.1/").unwrap();
    let shown = format!("{client:?}");
    assert!(!shown.contains(&client.raw().id().to_string()), "{shown}");
}
