//! The in-process queue's state machine, without Redis. Compiled only under
//! #[cfg(test)] (see `local/mod.rs`).

use super::*;

fn lease(valid_for: Duration) -> Arc<LeaseState> {
    LeaseState::new(Instant::now() + valid_for)
}

fn queued(locks: &LocalLocks) -> u64 {
    locks.queued.load(Ordering::Relaxed)
}

fn wait_until(mut cond: impl FnMut() -> bool) {
    let end = Instant::now() + Duration::from_secs(5);
    while !cond() {
        assert!(Instant::now() < end, "condition not reached");
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn release_hands_over_to_the_first_queued_thread() {
    let locks = LocalLocks::default();
    let Enter::Turn(turn) = locks.enter("k", "a", Duration::from_secs(1), false, None, None) else {
        panic!("a free slot is ours at once");
    };
    assert!(turn.fresh());
    turn.acquired(&lease(Duration::from_secs(30)), None);
    std::thread::scope(|s| {
        let b = s.spawn(|| {
            matches!(
                locks.enter("k", "b", Duration::from_secs(1), false, None, None),
                Enter::Granted(..)
            )
        });
        wait_until(|| queued(&locks) == 1);
        let handover = locks.release("k", "a");
        assert!(handover.last());
        let next = handover.successor().expect("b is queued");
        assert_eq!(next.owner, "b");
        assert!(next.force, "first handoff in a row");
        handover.finish(Outcome::HandedOver(Instant::now(), None));
        assert!(b.join().unwrap(), "b was granted the lock");
    });
    assert_eq!(locks.handoffs.load(Ordering::Relaxed), 1);
    // b holds now: its release with nobody queued frees the slot.
    let handover = locks.release("k", "b");
    assert!(handover.last() && handover.successor().is_none());
    handover.finish(Outcome::Other);
    assert!(locks.slots.lock().is_empty());
}

#[test]
fn reentrant_release_is_not_the_last_and_hands_nothing_over() {
    let locks = LocalLocks::default();
    let Enter::Turn(t1) = locks.enter("k", "a", Duration::from_secs(1), false, None, None) else {
        panic!()
    };
    t1.acquired(&lease(Duration::from_secs(30)), None);
    let Enter::Turn(t2) = locks.enter("k", "a", Duration::from_secs(1), false, None, None) else {
        panic!("reentry is not queued")
    };
    assert!(!t2.fresh(), "a hold of this owner is alive");
    t2.acquired(&lease(Duration::from_secs(30)), None);
    let inner = locks.release("k", "a");
    assert!(!inner.last() && inner.successor().is_none());
    inner.finish(Outcome::Other);
    let outer = locks.release("k", "a");
    assert!(outer.last());
    outer.finish(Outcome::Other);
    assert!(locks.slots.lock().is_empty());
}

#[test]
fn a_turn_taken_over_meanwhile_cannot_touch_the_new_owner() {
    let locks = LocalLocks::default();
    let Enter::Turn(t) = locks.enter("k", "a", Duration::from_secs(1), false, None, None) else {
        panic!()
    };
    t.acquired(&lease(Duration::from_millis(50)), None);
    // a re-enters (its attempt is in flight) …
    let Enter::Turn(reentry) = locks.enter("k", "a", Duration::from_secs(1), false, None, None)
    else {
        panic!()
    };
    std::thread::scope(|s| {
        // … while b, first in the queue, sees a's lease run out.
        let b =
            s.spawn(
                || match locks.enter("k", "b", Duration::from_secs(1), false, None, None) {
                    Enter::Turn(turn) => {
                        assert!(turn.fresh());
                        std::mem::forget(turn); // b keeps its turn for the checks below
                        true
                    }
                    _ => false,
                },
            );
        assert!(b.join().unwrap(), "b took over after a's lease ran out");
    });
    drop(reentry); // a's attempt ends (failed) after the takeover
    let slots = locks.slots.lock();
    let slot = &slots["k"];
    assert_eq!(slot.active, "b");
    assert!(slot.attempting, "still b's turn");
    assert_eq!(slot.holds, 0);
}

#[test]
fn the_owner_waits_for_its_own_last_release_before_a_fresh_hold() {
    let locks = LocalLocks::default();
    let Enter::Turn(t) = locks.enter("k", "a", Duration::from_secs(1), false, None, None) else {
        panic!()
    };
    t.acquired(&lease(Duration::from_secs(30)), None);
    // The last guard's release is in flight on another thread …
    let handover = locks.release("k", "a");
    assert!(handover.last() && handover.successor().is_none());
    std::thread::scope(|s| {
        // … so the owner's new lock does not race it at Redis: it queues.
        let again =
            s.spawn(
                || match locks.enter("k", "a", Duration::from_secs(1), false, None, None) {
                    Enter::Turn(turn) => {
                        let fresh = turn.fresh();
                        drop(turn);
                        Some(fresh)
                    }
                    _ => None,
                },
            );
        wait_until(|| queued(&locks) == 1);
        handover.finish(Outcome::Other);
        assert_eq!(
            again.join().unwrap(),
            Some(true),
            "a fresh turn after the release"
        );
    });
}

#[test]
fn a_queued_thread_leaves_at_its_deadline() {
    let locks = LocalLocks::default();
    let Enter::Turn(t) = locks.enter("k", "a", Duration::from_secs(1), false, None, None) else {
        panic!()
    };
    t.acquired(&lease(Duration::from_secs(30)), None);
    let deadline = Instant::now() + Duration::from_millis(50);
    assert!(matches!(
        locks.enter(
            "k",
            "b",
            Duration::from_secs(1),
            false,
            Some(deadline),
            None
        ),
        Enter::TimedOut
    ));
    assert!(Instant::now() >= deadline);
    assert!(locks.slots.lock()["k"].queue.is_empty());
    assert!(matches!(
        locks.enter(
            "k",
            "c",
            Duration::from_secs(1),
            false,
            Some(Instant::now()),
            None
        ),
        Enter::TimedOut
    ));
}

/// A queued thread whose wait is cancelled leaves the queue within a few
/// slices of the cancel, with no deadline of its own.
#[test]
fn a_queued_thread_leaves_when_its_wait_is_cancelled() {
    let locks = LocalLocks::default();
    let Enter::Turn(t) = locks.enter("k", "a", Duration::from_secs(1), false, None, None) else {
        panic!()
    };
    t.acquired(&lease(Duration::from_secs(30)), None);
    let cancel = Cancel::new();
    std::thread::scope(|s| {
        let b = s.spawn(|| {
            let entered = locks.enter("k", "b", Duration::from_secs(1), false, None, Some(&cancel));
            (matches!(entered, Enter::TimedOut), Instant::now())
        });
        wait_until(|| queued(&locks) == 1);
        std::thread::sleep(Duration::from_millis(60));
        let cancelled = Instant::now();
        cancel.cancel();
        let (left, at) = b.join().unwrap();
        assert!(left, "the cancelled thread left without the lock");
        assert!(
            at - cancelled < Duration::from_millis(200),
            "{:?}",
            at - cancelled
        );
    });
    assert!(locks.slots.lock()["k"].queue.is_empty());
}

#[test]
fn a_public_release_for_others_promotes_with_a_yield() {
    let locks = LocalLocks::default();
    let Enter::Turn(t) = locks.enter("k", "a", Duration::from_secs(1), false, None, None) else {
        panic!()
    };
    t.acquired(&lease(Duration::from_secs(30)), None);
    std::thread::scope(|s| {
        let b =
            s.spawn(
                || match locks.enter("k", "b", Duration::from_secs(1), false, None, None) {
                    Enter::Turn(turn) => turn.yield_to.map(|y| y.messages),
                    _ => None,
                },
            );
        wait_until(|| queued(&locks) == 1);
        let handover = locks.release("k", "a");
        assert!(handover.successor().is_some());
        handover.finish(Outcome::FreedForOthers);
        assert_eq!(
            b.join().unwrap(),
            Some(0),
            "no subscription here: nothing to skip"
        );
    });
    assert_eq!(locks.handoffs.load(Ordering::Relaxed), 0);
}
