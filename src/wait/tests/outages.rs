//! The wait loop with late replies, transient errors, outages and deadlines.

use super::*;

#[test]
fn a_reply_after_the_lease_is_undone_and_retried_then_refused() {
    let late = || Step::Held {
        after: Duration::from_millis(15),
    };
    let mut kind = Scripted::new(vec![late(), late(), late()]);
    kind.lease = Duration::from_millis(10);
    let env = fake();
    let e = run(&mut kind, &env, None).unwrap_err();
    match e {
        Error::LeaseExpiredOnArrival {
            tries, round_trip, ..
        } => {
            assert_eq!(tries, LATE_REPLIES_MAX);
            assert!(round_trip >= Duration::from_millis(10));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(kind.undone, LATE_REPLIES_MAX, "every late hold given back");
    // One late reply and then a timely one: the timely hold is kept.
    let mut kind = Scripted::new(vec![late(), HELD]);
    kind.lease = Duration::from_millis(10);
    assert_eq!(run(&mut kind, &fake(), None).unwrap(), Some(2));
    assert_eq!(kind.undone, 1);
}

#[test]
fn a_late_reply_past_the_deadline_is_refused_at_once() {
    let mut kind = Scripted::new(vec![Step::Held {
        after: Duration::from_millis(15),
    }]);
    kind.lease = Duration::from_millis(10);
    let deadline = now() + Duration::from_millis(5);
    let e = run(&mut kind, &fake(), Some(deadline)).unwrap_err();
    assert!(
        matches!(e, Error::LeaseExpiredOnArrival { tries: 1, .. }),
        "{e:?}"
    );
}

#[test]
fn transient_errors_are_ridden_out_only_once_waiting() {
    // Before the lock was ever found held: the error is the caller's.
    let mut kind = Scripted::new(vec![Step::Fail(io_error)]);
    let e = run(&mut kind, &fake(), None).unwrap_err();
    assert!(e.is_connection(), "{e:?}");
    // Waiting: connection errors and LOADING are ridden out.
    let mut kind = Scripted::new(vec![
        Step::Wait(Duration::from_millis(1)),
        Step::Fail(io_error),
        Step::Fail(loading),
        HELD,
    ]);
    let env = fake();
    assert_eq!(run(&mut kind, &env, None).unwrap(), Some(4));
    let pauses = env.log().iter().filter(|l| l.starts_with("pause")).count();
    assert_eq!(pauses, 2, "{:?}", env.log());
    // A refusal is not transient: given up at once, even while waiting.
    let mut kind = Scripted::new(vec![
        Step::Wait(Duration::from_millis(1)),
        Step::Fail(no_permission),
    ]);
    let e = run(&mut kind, &fake(), None).unwrap_err();
    assert!(e.is_refused(), "{e:?}");
}

#[test]
fn an_outage_longer_than_the_limit_gives_up_with_its_error() {
    let mut steps = vec![Step::Wait(Duration::from_millis(1))];
    steps.extend((0..50).map(|_| Step::Fail(io_error)));
    let mut kind = Scripted::new(steps);
    let env = Fake {
        outage_limit: Duration::from_millis(60),
        ..Fake::default()
    };
    let started = now();
    let e = run(&mut kind, &env, None).unwrap_err();
    assert!(e.is_connection(), "{e:?}");
    // Retried at 10, 20 and 40 ms, given up at 80 ms (the limit passed).
    assert_eq!(now() - started, Duration::from_millis(80));
    assert!(
        kind.attempts < 20,
        "backoff between tries: {}",
        kind.attempts
    );
}

#[test]
fn an_outage_is_not_ridden_past_the_deadline() {
    let mut steps = vec![Step::Wait(Duration::from_millis(1))];
    steps.extend((0..50).map(|_| Step::Fail(io_error)));
    let mut kind = Scripted::new(steps);
    let deadline = now() + Duration::from_millis(40);
    let e = run(&mut kind, &fake(), Some(deadline)).unwrap_err();
    assert!(e.is_connection(), "{e:?}");
    assert_eq!(now(), deadline, "the last try at the deadline, none after");
}

#[test]
fn the_deadline_ends_the_wait_and_leaves_the_place() {
    let mut kind = Scripted::new(vec![Step::Wait(Duration::from_secs(10)); 3]);
    kind.place = true;
    let started = now();
    let deadline = started + Duration::from_millis(50);
    let env = fake();
    assert_eq!(run(&mut kind, &env, Some(deadline)).unwrap(), None);
    assert_eq!(kind.left, 1, "the waiting place was left");
    assert_eq!(kind.unheard, 0, "at once: Redis answered");
    // The park was capped by the deadline, not by the 10 s hint.
    let took = now() - started;
    assert_eq!(took, Duration::from_millis(50));
    assert_eq!(
        kind.attempts, 3,
        "attempt, retry after subscribing, last try at the deadline"
    );
}

#[test]
fn a_place_is_left_on_error_but_kept_when_held() {
    let mut kind = Scripted::new(vec![
        Step::Wait(Duration::from_millis(1)),
        Step::Fail(no_permission),
    ]);
    kind.place = true;
    assert!(run(&mut kind, &fake(), None).is_err());
    assert_eq!(kind.left, 1);
    let mut kind = Scripted::new(vec![Step::Wait(Duration::from_millis(1)), HELD]);
    kind.place = true;
    assert_eq!(run(&mut kind, &fake(), None).unwrap(), Some(2));
    assert_eq!(kind.left, 0, "the acquire took us out of line itself");
}

#[test]
fn a_place_is_left_when_the_waiter_panics() {
    let mut kind = Scripted::new(vec![Step::Wait(Duration::from_millis(1))]);
    kind.place = true;
    kind.panic_at = Some(2);
    let env = fake();
    let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut sub = None;
        let _ = crate::park::block_on(wait_for(&mut kind, &env, &mut sub, "lock", None));
    }));
    assert!(unwound.is_err());
    assert_eq!(kind.left, 1);
}

#[test]
fn a_bounded_wait_rides_out_an_outage_from_its_first_attempt_up_to_its_deadline() {
    // Refused from the start, back after a few tries: held.
    let mut kind = Scripted::new(vec![Step::Fail(io_error), Step::Fail(loading), HELD]);
    let env = Fake {
        outage_limit: Duration::from_millis(1), // a bounded wait ignores it
        ..Fake::default()
    };
    let deadline = now() + Duration::from_secs(5);
    assert_eq!(run(&mut kind, &env, Some(deadline)).unwrap(), Some(3));
    // A single attempt (deadline now) reports the error at once.
    let mut kind = Scripted::new(vec![Step::Fail(io_error)]);
    let e = run(&mut kind, &fake(), Some(now())).unwrap_err();
    assert!(e.is_connection(), "{e:?}");
    assert_eq!(kind.attempts, 1);
}

/// The error of a call that was not sent because no time was left before
/// the wait's deadline (what `Connections` makes of it).
fn out_of_time() -> Error {
    let e = std::io::Error::new(std::io::ErrorKind::TimedOut, "no time was left");
    Error::TimedOut {
        addr: String::new(),
        timeout: Duration::ZERO,
        by_deadline: true,
        source: redis::RedisError::from(e).into(),
    }
}

#[test]
fn a_last_try_with_no_time_left_ends_the_wait_as_its_deadline() {
    // Woken at the deadline with nothing left for the last try's round
    // trip: the wait ran out, Redis did not fail — no outage to report.
    let mut kind = Scripted::new(vec![
        Step::Wait(Duration::from_secs(10)),
        Step::Wait(Duration::from_secs(10)),
        Step::Fail(out_of_time),
    ]);
    kind.place = true;
    let deadline = now() + Duration::from_millis(50);
    assert_eq!(run(&mut kind, &fake(), Some(deadline)).unwrap(), None);
    assert_eq!(kind.left, 1, "the waiting place was left");
    assert_eq!(kind.unheard, 0, "at once: Redis answered the last try sent");
    // After an outage, though, it is reported at the deadline: the retry
    // after the failure (its backoff past the deadline) is the last try.
    let mut kind = Scripted::new(vec![
        Step::Wait(Duration::from_secs(10)),
        Step::Fail(io_error),
        Step::Fail(out_of_time),
    ]);
    let deadline = now() + Duration::from_millis(5);
    let e = run(&mut kind, &fake(), Some(deadline)).unwrap_err();
    assert!(matches!(e, Error::Unavailable { .. }), "{e:?}");
    // And so it is when Redis never answered this wait at all.
    let mut kind = Scripted::new(vec![Step::Fail(out_of_time), Step::Fail(out_of_time)]);
    let deadline = now() + Duration::from_millis(5);
    let e = run(&mut kind, &fake(), Some(deadline)).unwrap_err();
    assert!(matches!(e, Error::Unavailable { .. }), "{e:?}");
}

/// The error of a last try sent with little time left before the wait's
/// deadline and not answered in it: the socket timeout would have waited
/// longer (what `Connections` makes of it).
fn cut_short() -> Error {
    let e = std::io::Error::new(std::io::ErrorKind::TimedOut, "timed out");
    Error::TimedOut {
        addr: String::new(),
        timeout: Duration::from_millis(8),
        by_deadline: true,
        source: redis::RedisError::from(e).into(),
    }
}

#[test]
fn a_last_try_cut_short_by_the_deadline_ends_the_wait_as_its_deadline() {
    // Redis answered every try of this wait; the last one, sent with 8 ms
    // left, was not answered in them. A reply waited for less than the
    // socket timeout is not late by the client's own measure: the wait ran
    // out, Redis did not fail (a loaded run once saw `Unavailable` here
    // for a 12 ms silence).
    let mut kind = Scripted::new(vec![
        Step::Wait(Duration::from_secs(10)),
        Step::Wait(Duration::from_secs(10)),
        Step::Fail(cut_short),
    ]);
    kind.place = true;
    let deadline = now() + Duration::from_millis(50);
    assert_eq!(run(&mut kind, &fake(), Some(deadline)).unwrap(), None);
    assert_eq!(kind.left, 1, "the waiting place was left");
    // Once Redis answers: sent now, its reply would be waited for up to
    // the socket timeout, past the deadline.
    assert_eq!(kind.unheard, 1, "left by the undo thread");
    // Within an outage it is the outage's end: reported.
    let mut kind = Scripted::new(vec![
        Step::Wait(Duration::from_secs(10)),
        Step::Fail(io_error),
        Step::Fail(cut_short),
    ]);
    kind.place = true;
    let deadline = now() + Duration::from_millis(5);
    let e = run(&mut kind, &fake(), Some(deadline)).unwrap_err();
    assert!(matches!(e, Error::Unavailable { .. }), "{e:?}");
    assert_eq!((kind.left, kind.unheard), (1, 1));
    // And so it is when Redis never answered this wait.
    let mut kind = Scripted::new(vec![Step::Fail(cut_short), Step::Fail(cut_short)]);
    let deadline = now() + Duration::from_millis(5);
    let e = run(&mut kind, &fake(), Some(deadline)).unwrap_err();
    assert!(matches!(e, Error::Unavailable { .. }), "{e:?}");
}
