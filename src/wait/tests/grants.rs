//! The wait loop with a subscription handed in, grants, and the unlock
//! channel heard only while another library holds the lock.

use super::*;

#[test]
fn a_subscription_handed_in_is_used_and_handed_back() {
    let mut kind = Scripted::new(vec![Step::Wait(Duration::from_millis(50)), HELD]);
    let env = fake();
    let mut sub = Some(());
    let held = run_on(&mut kind, &env, &mut sub);
    assert!(held.is_some());
    assert!(sub.is_some());
    assert_eq!(env.log(), ["clear", "park One seen 0 ~50 ms", "clear"]);
}

/// A waiter already subscribed (its subscription lingered) and granted while
/// parked: one attempt in all.
fn granted_run(
    grants: Vec<Vec<&'static [u8]>>,
    steps: Vec<Step>,
) -> (Scripted, Fake, Option<Got<u32>>) {
    let mut kind = Scripted::new(steps);
    kind.place = true;
    let env = fake();
    *env.grants.borrow_mut() = grants.into();
    let mut sub = Some(());
    let got = run_on(&mut kind, &env, &mut sub);
    (kind, env, got)
}

#[test]
fn a_grant_while_parked_is_held_without_another_attempt() {
    let started = now();
    let (kind, env, got) = granted_run(
        vec![vec![b"mine"]],
        vec![Step::Wait(Duration::from_secs(10))],
    );
    let got = got.expect("held");
    assert_eq!((got.held, got.lease), (99, Duration::from_secs(3)));
    assert!(got.sent_at >= started, "the lease counts from the attempt");
    assert_eq!(kind.attempts, 1);
    assert_eq!(kind.left, 0, "a grant took the place: nothing to leave");
    assert_eq!(env.log(), ["clear", "park One seen 0 ~10000 ms"]);
}

/// A semaphore's waiters share one subscription: each takes the grants
/// that name its place and leaves the others' for them; nothing clears
/// wake-ups meant for another.
#[test]
fn a_claimed_grant_is_taken_and_the_others_are_left() {
    let mut kind = Scripted::new(vec![Step::Wait(Duration::from_secs(10))]);
    kind.place = true;
    kind.wake = Wake::Claim;
    let env = fake();
    *env.grants.borrow_mut() = vec![vec![b"other#1".as_slice(), b"mine"]].into();
    let mut sub = Some(());
    let got = run_on(&mut kind, &env, &mut sub);
    assert_eq!(got.map(|g| g.held), Some(99));
    assert_eq!(kind.attempts, 1);
    assert_eq!(env.log(), ["claim mine", "park Claim seen 0 ~10000 ms"]);
    assert_eq!(*env.delivered.borrow(), [b"other#1".to_vec()]);
}

#[test]
fn a_grant_for_another_wait_is_ignored() {
    let (kind, _, got) = granted_run(
        vec![vec![b"someone#else", b"0"]],
        vec![Step::Wait(Duration::from_millis(5)), HELD],
    );
    assert_eq!(got.map(|g| g.held), Some(2), "held by the next attempt");
    assert_eq!(kind.attempts, 2);
}

#[test]
fn a_grant_that_needs_accepting_or_came_late_is_taken_by_an_attempt() {
    for grant in [b"accept".as_slice(), b"brief".as_slice()] {
        let (kind, _, got) = granted_run(
            vec![vec![grant]],
            vec![Step::Wait(Duration::from_secs(10)), HELD],
        );
        let got = got.expect("held");
        assert_eq!(
            got.held,
            2,
            "{:?}: the attempt took it",
            std::str::from_utf8(grant)
        );
        assert_eq!(got.lease, kind.lease, "with the kind's own lease");
    }
}

#[test]
fn grants_received_before_an_attempt_are_stale_to_it() {
    // Park 1 brings nothing but the grant arrives with the retry's wake-up;
    // the loop drops grants before each attempt, so only a grant delivered
    // during the park after it counts.
    let mut kind = Scripted::new(vec![
        Step::Wait(Duration::from_millis(1)),
        Step::Wait(Duration::from_secs(10)),
    ]);
    kind.place = true;
    let env = fake();
    env.delivered.borrow_mut().push(b"mine".to_vec()); // before the first attempt
    *env.grants.borrow_mut() = vec![vec![], vec![b"mine".as_slice()]].into();
    let mut sub = Some(());
    let got = run_on(&mut kind, &env, &mut sub);
    assert_eq!(kind.attempts, 2, "the early grant did not end the wait");
    assert_eq!(got.map(|g| g.held), Some(99));
}

/// A plain waiter hears the unlock channel only while another library holds
/// the lock (its release publishes there and grants nobody): when an
/// attempt finds such a holder it starts to, and attempts again before it
/// parks; when a leasehold holder follows, it stops (no retry needed).
#[test]
fn a_waiter_hears_the_unlock_channel_only_while_another_library_holds_the_lock() {
    let long = Duration::from_secs(5);
    let short = Duration::from_millis(20);
    let mut kind = Scripted::new(vec![
        Step::Wait(short),
        Step::Wait(short),
        Step::Foreign(short),
        Step::Foreign(short),
        Step::Wait(short),
        HELD,
    ]);
    let env = fake();
    assert_eq!(run(&mut kind, &env, Some(now() + long)).unwrap(), Some(6));
    assert_eq!(
        env.log(),
        [
            // First attempt (leasehold holder): subscribed without the
            // unlock channel, attempt again, park.
            "subscribe chan",
            "clear",
            "park One seen 0 ~20 ms",
            // Another library's holder: hear its unlock, attempt again.
            "clear",
            "unlock true",
            "clear",
            "park One seen 0 ~20 ms",
            // A leasehold holder again: stop hearing it, park.
            "clear",
            "unlock false",
            "park One seen 0 ~20 ms",
            "clear",
        ]
    );
}
