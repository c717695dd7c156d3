//! The Redlock's pure parts: majorities, settings, thread safety.

use super::*;

#[test]
fn majority_is_more_than_half() {
    assert_eq!(majority(1), 1);
    assert_eq!(majority(2), 2);
    assert_eq!(majority(3), 2);
    assert_eq!(majority(4), 3);
    assert_eq!(majority(5), 3);
}

#[test]
fn settings_are_checked() {
    let none: [&str; 0] = [];
    assert!(Redlock::new(&none).is_err());
    let lease_too_short = Redlock::builder(&["redis://127.0.0.1:1/"])
        .node_timeout(Duration::from_millis(50))
        .watchdog_lease(Duration::from_millis(400))
        .build();
    assert!(matches!(
        lease_too_short,
        Err(Error::InvalidArgument { .. })
    ));
    let bad_url = Redlock::new(&["redis://127.0.0.1:1/", "nope://"]);
    assert!(matches!(bad_url, Err(Error::InvalidUrl { .. })));
}

#[test]
fn guards_and_redlocks_are_send_sync() {
    fn assert_send_sync<T: Send + Sync + 'static>() {}
    assert_send_sync::<Redlock>();
    assert_send_sync::<RedlockGuard>();
}
