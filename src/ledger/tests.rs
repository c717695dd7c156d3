//! The ledger without Redis: counting holds (reentrancy, generations,
//! tokens, the shared renewed lease) and the plain lock's in-process queue.
//! Compiled only under #[cfg(test)] (see `ledger/mod.rs`); its seams drive
//! the loom models too (`ledger/loom.rs`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::*;
use crate::options::Cancel;
use crate::park::{block_on, Park};

/// `owner`'s wait for a turn on "k" (see `Ledger::enter`), as `park` says,
/// until `deadline`, cancelled by `cancel`; `forsaken` makes its undo.
pub(super) fn entering<'a: 'b, 'b>(
    locks: &'a Ledger,
    park: Park,
    owner: &'b str,
    deadline: Option<Instant>,
    cancel: Option<&'b Cancel>,
    forsaken: impl FnOnce() -> Undo + 'b,
) -> impl std::future::Future<Output = Enter<'a>> + 'b {
    let lease = Duration::from_secs(1);
    locks.enter(park, "k", owner, lease, false, deadline, cancel, forsaken)
}

/// A thread's turn in the queue for `owner` on "k", waiting until
/// `deadline`, cancelled by `cancel`.
pub(super) fn enter_until<'a>(
    locks: &'a Ledger,
    owner: &str,
    deadline: Option<Instant>,
    cancel: Option<&Cancel>,
) -> Enter<'a> {
    let no_undo = || -> Undo { Box::new(|_| {}) };
    block_on(entering(
        locks,
        Park::Thread,
        owner,
        deadline,
        cancel,
        no_undo,
    ))
}

fn enter<'a>(locks: &'a Ledger, owner: &str) -> Enter<'a> {
    enter_until(locks, owner, None, None)
}

/// `owner`'s turn on "k", at once (a free slot, or a reentry: not queued).
pub(super) fn turn<'a>(locks: &'a Ledger, owner: &str) -> Turn<'a> {
    match enter(locks, owner) {
        Enter::Turn(turn) => turn,
        _ => panic!("{owner}'s turn is not at once"),
    }
}

pub(super) fn lease(valid_for: Duration) -> Arc<LeaseState> {
    LeaseState::new(Instant::now() + valid_for)
}

fn queued(locks: &Ledger) -> u64 {
    locks.queued.load(Ordering::Relaxed)
}

/// An explicit lease of `valid_for`, taken now: the hold as a turn records it.
pub(super) fn hold(turn: Turn<'_>, valid_for: Duration) -> Added {
    turn.acquired(NewHold {
        renewed: false,
        until: Instant::now() + valid_for,
        minted: None,
        new_state: &mut || lease(valid_for),
    })
}

/// One more hold of "o" on "k" (see `Entry::add`), on a new lease of
/// `valid_for`.
fn add(ledger: &Ledger, renewed: bool, valid_for: Duration, minted: Option<u64>) -> Added {
    let new = NewHold {
        renewed,
        until: Instant::now() + valid_for,
        minted,
        new_state: &mut || lease(valid_for),
    };
    ledger.add("k", "o", new)
}

/// One guard of "o" on "k" goes (see `Ledger::remove`).
fn gone(ledger: &Ledger, added: &Added, renewed: bool) -> Removed {
    ledger.remove("k", "o", added.generation, &added.state, renewed)
}

/// The generation of `field`'s holds on "k" now (what its guards count
/// in).
fn generation(locks: &Ledger, field: &str) -> u64 {
    let keys = locks.keys.lock();
    keys["k"].held(field).map_or(u64::MAX, |h| h.generation)
}

/// Nobody is queued on "k".
fn queue_is_empty(locks: &Ledger) -> bool {
    locks.keys.lock()["k"]
        .line
        .as_ref()
        .unwrap()
        .queue
        .is_empty()
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
    let locks = Ledger::default();
    let turn = turn(&locks, "a");
    assert_eq!(turn.alive, 0);
    let a = hold(turn, Duration::from_secs(30));
    std::thread::scope(|s| {
        let b = s.spawn(|| matches!(enter(&locks, "b"), Enter::Granted(..)));
        wait_until(|| queued(&locks) == 1);
        let handover = locks.release("k", "a", generation(&locks, "a"), &a.state, false);
        assert!(handover.removed.last);
        let next = handover.successor().expect("b is queued");
        assert_eq!(next.owner, "b");
        assert!(next.force, "first handoff in a row");
        handover.finish(Outcome::HandedOver(Instant::now(), None));
        assert!(b.join().unwrap(), "b was granted the lock");
    });
    assert_eq!(locks.handoffs.load(Ordering::Relaxed), 1);
    // b holds now: its release with nobody queued frees the slot.
    let handover = locks.release(
        "k",
        "b",
        generation(&locks, "b"),
        &lease(Duration::from_secs(1)),
        false,
    );
    assert!(handover.removed.last && handover.successor().is_none());
    handover.finish(Outcome::Other);
    assert!(locks.keys.lock().is_empty());
}

#[test]
fn reentrant_release_is_not_the_last_and_hands_nothing_over() {
    let locks = Ledger::default();
    let t1 = turn(&locks, "a");
    let t1 = hold(t1, Duration::from_secs(30));
    let t2 = turn(&locks, "a");
    assert_eq!(t2.alive, 1, "a hold of this owner is alive");
    let t2 = hold(t2, Duration::from_secs(10));
    let inner = locks.release("k", "a", generation(&locks, "a"), &t2.state, false);
    assert!(!inner.removed.last && inner.successor().is_none());
    assert!(
        matches!(inner.removed.keep, Keep::Exactly(d) if d > Duration::from_secs(25)),
        "the outer guard counts on 30 s: {:?}",
        inner.removed.keep
    );
    inner.finish(Outcome::Other);
    let outer = locks.release("k", "a", generation(&locks, "a"), &t1.state, false);
    assert!(outer.removed.last);
    outer.finish(Outcome::Other);
    assert!(locks.keys.lock().is_empty());
}

#[test]
fn a_turn_taken_over_meanwhile_cannot_touch_the_new_owner() {
    let locks = Ledger::default();
    let t = turn(&locks, "a");
    hold(t, Duration::from_millis(50));
    // a re-enters (its attempt is in flight) …
    let reentry = turn(&locks, "a");
    std::thread::scope(|s| {
        // … while b, first in the queue, sees a's lease run out.
        let b = s.spawn(|| match enter(&locks, "b") {
            Enter::Turn(turn) => {
                assert_eq!(turn.alive, 0);
                std::mem::forget(turn); // b keeps its turn for the checks below
                true
            }
            _ => false,
        });
        assert!(b.join().unwrap(), "b took over after a's lease ran out");
    });
    drop(reentry); // a's attempt ends (failed) after the takeover
    let keys = locks.keys.lock();
    let entry = &keys["k"];
    let slot = entry.line.as_ref().unwrap();
    assert_eq!(slot.active, "b");
    assert_eq!(slot.phase, super::slot::Phase::Attempting, "still b's turn");
    assert_eq!(entry.count("b"), 0);
    assert_eq!(
        entry.count("a"),
        0,
        "a's guards count for nothing here any more"
    );
}

#[test]
fn the_owner_waits_for_its_own_last_release_before_a_fresh_hold() {
    let locks = held_by_a();
    // The last guard's release is in flight on another thread …
    let handover = locks.release(
        "k",
        "a",
        generation(&locks, "a"),
        &lease(Duration::from_secs(30)),
        false,
    );
    assert!(handover.removed.last && handover.successor().is_none());
    std::thread::scope(|s| {
        // … so the owner's new lock does not race it at Redis: it queues.
        let again = s.spawn(|| match enter(&locks, "a") {
            Enter::Turn(turn) => {
                let fresh = turn.alive == 0;
                drop(turn);
                Some(fresh)
            }
            _ => None,
        });
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
    let locks = held_by_a();
    let deadline = Instant::now() + Duration::from_millis(50);
    assert!(matches!(
        enter_until(&locks, "b", Some(deadline), None),
        Enter::TimedOut
    ));
    assert!(Instant::now() >= deadline);
    assert!(queue_is_empty(&locks));
    assert!(matches!(
        enter_until(&locks, "c", Some(Instant::now()), None),
        Enter::TimedOut
    ));
}

/// A queued thread whose wait is cancelled leaves the queue within a few
/// slices of the cancel, with no deadline of its own.
#[test]
fn a_queued_thread_leaves_when_its_wait_is_cancelled() {
    let locks = held_by_a();
    let cancel = Cancel::new();
    std::thread::scope(|s| {
        let b = s.spawn(|| {
            let entered = enter_until(&locks, "b", None, Some(&cancel));
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
    assert!(queue_is_empty(&locks));
}

#[test]
fn a_public_release_for_others_promotes_with_a_yield() {
    let locks = held_by_a();
    std::thread::scope(|s| {
        let b = s.spawn(|| match enter(&locks, "b") {
            Enter::Turn(turn) => turn.yield_to,
            _ => None,
        });
        wait_until(|| queued(&locks) == 1);
        let handover = locks.release(
            "k",
            "a",
            generation(&locks, "a"),
            &lease(Duration::from_secs(30)),
            false,
        );
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

#[test]
fn holds_are_counted_per_field_with_their_token() {
    let ledger = Ledger::default();
    let d = Duration::from_secs(30);
    let a = add(&ledger, false, d, Some(7));
    assert_eq!(a.fence, Some(7), "a first fenced hold keeps its token");
    let b = add(&ledger, false, d, None);
    assert_eq!(b.fence, Some(7), "a reentrant hold returns the outer token");
    assert_eq!(ledger.holds("k", "o"), (2, Some(7)));
    assert_eq!(ledger.holds("k", "o:write").0, 0, "fields count apart");
    assert!(!gone(&ledger, &a, false).last);
    assert!(gone(&ledger, &b, false).last);
    assert_eq!(
        ledger.holds("k", "o"),
        (0, None),
        "the token goes with the holds"
    );
    assert!(ledger.keys.lock().is_empty());
}

#[test]
fn watchdog_guards_share_one_lease_and_its_renewal_stops_with_the_last_of_them() {
    let ledger = Ledger::default();
    let d = Duration::from_secs(30);
    let until = Instant::now() + d;
    let made = std::cell::Cell::new(0);
    let add_renewed = || {
        let new_state = &mut || {
            made.set(made.get() + 1);
            lease(d)
        };
        let (renewed, minted) = (true, None);
        let new = NewHold {
            renewed,
            until,
            minted,
            new_state,
        };
        ledger.add("k", "o", new)
    };
    let (a, b) = (add_renewed(), add_renewed());
    assert!(
        Arc::ptr_eq(&a.state, &b.state),
        "one lease, one registration"
    );
    assert_eq!(made.get(), 1);
    // An explicit lease of the same owner has a lease of its own.
    let e = add(&ledger, false, d, None);
    assert!(!Arc::ptr_eq(&a.state, &e.state));
    let removed = gone(&ledger, &a, true);
    assert!(!removed.last && !removed.stop_renewal);
    let removed = gone(&ledger, &b, true);
    assert!(!removed.last && removed.stop_renewal);
    assert!(
        matches!(removed.keep, Keep::Exactly(_)),
        "only the explicit lease remains: {:?}",
        removed.keep
    );
    assert_eq!(
        gone(&ledger, &e, false),
        Removed {
            last: true,
            stop_renewal: false,
            keep: Keep::UNCHANGED,
            superseded: false,
        }
    );
}

#[test]
fn what_redis_keeps_for_the_remaining_guards_is_the_longest_lease_they_count_on() {
    let ledger = Ledger::default();
    let (short, long) = (Duration::from_secs(2), Duration::from_secs(10));
    let kept = |removed: Removed| match removed.keep {
        Keep::Exactly(d) => ("exactly", d.as_secs_f64().round() as u64),
        Keep::AtLeast(d) => ("at least", d.as_secs_f64().round() as u64),
    };
    // Explicit leases only: exactly the longest left, whichever goes.
    let a = add(&ledger, false, long, None);
    let b = add(&ledger, false, short, None);
    let c = add(&ledger, false, short, None);
    let removed = gone(&ledger, &a, false);
    assert_eq!(kept(removed), ("exactly", 2), "the 10 s lease went");
    let removed = gone(&ledger, &b, false);
    assert_eq!(kept(removed), ("exactly", 2));
    assert!(gone(&ledger, &c, false).last);
    // A watchdog lease remains: never shortened (its renewal may be in
    // flight), at least the longest left.
    let w = add(&ledger, true, short, None);
    let x = add(&ledger, false, long, None);
    let y = add(&ledger, false, long, None);
    let removed = gone(&ledger, &x, false);
    assert_eq!(kept(removed), ("at least", 10), "y counts on 10 s");
    let removed = gone(&ledger, &y, false);
    assert_eq!(kept(removed), ("at least", 2), "the watchdog's 2 s");
    // The watchdog guard goes first: the explicit one left counts.
    let z = add(&ledger, false, long, None);
    let removed = gone(&ledger, &w, true);
    assert!(removed.stop_renewal);
    assert_eq!(kept(removed), ("exactly", 10));
    assert!(gone(&ledger, &z, false).last);
    assert!(ledger.keys.lock().is_empty());
}

#[test]
fn a_hold_after_a_lost_lease_is_a_first_hold_and_the_lost_guards_count_for_nothing() {
    let ledger = Ledger::default();
    let d = Duration::from_secs(30);
    let old = add(&ledger, true, d, Some(1));
    let older = add(&ledger, true, d, None);
    old.state
        .mark_lost(crate::renewal::LeaseLost::NotOurs, &AtomicU64::new(0));
    let new = add(&ledger, true, d, Some(2));
    assert!(!Arc::ptr_eq(&old.state, &new.state), "a new lease");
    assert_eq!(ledger.holds("k", "o"), (1, Some(2)), "the first hold again");
    // Counted out, and superseded by the new hold: they send nothing.
    let superseded = Removed {
        superseded: true,
        ..Removed::STALE
    };
    assert_eq!(gone(&ledger, &old, true), superseded);
    assert_eq!(gone(&ledger, &older, true), superseded);
    assert_eq!(
        gone(&ledger, &new, true),
        Removed {
            last: true,
            stop_renewal: true,
            keep: Keep::UNCHANGED,
            superseded: false,
        }
    );
    assert!(new.replaced.is_some_and(|r| Arc::ptr_eq(&r, &old.state)));
}

/// A task's queued wait, polled once (it queues) and then dropped.
fn queued_task<'a>(
    locks: &'a Ledger,
    owner: &'a str,
    undone: &Arc<AtomicU64>,
) -> std::pin::Pin<Box<impl std::future::Future<Output = Enter<'a>> + 'a>> {
    let undone = Arc::clone(undone);
    let forsaken = move || -> Undo {
        Box::new(move |in_flight| undone.store(1 + u64::from(in_flight), Ordering::SeqCst))
    };
    let mut fut = Box::pin(entering(locks, Park::Task, owner, None, None, forsaken));
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    let polled = std::future::Future::poll(fut.as_mut(), &mut cx);
    assert!(polled.is_pending(), "the slot is held: it queues");
    fut
}

/// A ledger where "a" holds "k" (its turn taken, a 30 s lease).
fn held_by_a() -> Ledger {
    let locks = Ledger::default();
    hold(turn(&locks, "a"), Duration::from_secs(30));
    locks
}

#[test]
fn a_task_dropped_while_queued_leaves_the_queue_and_undoes_nothing() {
    let locks = held_by_a();
    let undone = Arc::new(AtomicU64::new(0));
    let fut = queued_task(&locks, "b", &undone);
    assert_eq!(queued(&locks), 1);
    drop(fut);
    assert_eq!(queued(&locks), 0);
    assert_eq!(undone.load(Ordering::SeqCst), 0);
    let handover = locks.release(
        "k",
        "a",
        generation(&locks, "a"),
        &lease(Duration::from_secs(30)),
        false,
    );
    assert!(handover.successor().is_none(), "nobody is queued any more");
    assert!(handover.finish(Outcome::Other).is_none());
}

#[test]
fn a_task_dropped_while_handed_the_lock_leaves_its_hold_to_the_releaser_to_undo() {
    let locks = held_by_a();
    let undone = Arc::new(AtomicU64::new(0));
    let fut = queued_task(&locks, "b", &undone);
    let handover = locks.release(
        "k",
        "a",
        generation(&locks, "a"),
        &lease(Duration::from_secs(30)),
        false,
    );
    assert_eq!(handover.successor().map(|s| s.owner), Some("b"));
    // The task gives up while the hand-over's script is on its way: its
    // undo is told so, and the releaser — who learns that the script ran —
    // gets the owner to undo.
    drop(fut);
    assert_eq!(
        undone.load(Ordering::SeqCst),
        2,
        "undone, the hand-over in flight"
    );
    let gave_up = handover.finish(Outcome::HandedOver(Instant::now(), None));
    assert_eq!(gave_up.as_deref(), Some("b"));
    assert_eq!(queued(&locks), 0);
    assert!(locks.keys.lock().is_empty(), "nothing held or queued here");
}

/// A queued wait promoted by a release just as it is cancelled sees its
/// promotion (and takes the turn, which then ends as cancelled) — it must
/// not take the cancel for "still queued" and wait for nothing (it spun:
/// the cancel was looked at before the outcome).
#[test]
fn a_waiter_promoted_as_it_is_cancelled_sees_the_promotion() {
    use std::future::Future;
    use std::task::{Context, Poll, Waker};

    let locks = Arc::new(Ledger::default());
    let turn = turn(&locks, "a");
    let a = hold(turn, Duration::from_secs(30));
    let cancel = Cancel::new();
    let (told, hear) = std::sync::mpsc::channel();
    let (go, wait_go) = std::sync::mpsc::channel::<()>();
    // b's wait is a task's, polled by hand: queued at its first poll, then
    // polled again once it was both promoted and cancelled.
    std::thread::spawn({
        let (locks, cancel) = (Arc::clone(&locks), cancel.clone());
        move || {
            let no_undo = || -> Undo { Box::new(|_| {}) };
            let fut = entering(&locks, Park::Task, "b", None, Some(&cancel), no_undo);
            let mut fut = std::pin::pin!(fut);
            let mut cx = Context::from_waker(Waker::noop());
            assert!(fut.as_mut().poll(&mut cx).is_pending(), "queued");
            told.send("queued").unwrap();
            wait_go.recv().unwrap();
            let got = match fut.as_mut().poll(&mut cx) {
                Poll::Ready(Enter::Turn(_)) => "turn",
                Poll::Ready(_) => "other",
                Poll::Pending => "pending",
            };
            told.send(got).unwrap();
        }
    });
    assert_eq!(hear.recv_timeout(Duration::from_secs(10)), Ok("queued"));
    // Released publicly (not handed over): b is promoted to try Redis.
    let handover = locks.release("k", "a", generation(&locks, "a"), &a.state, false);
    assert_eq!(handover.finish(Outcome::Other), None);
    cancel.cancel();
    go.send(()).unwrap();
    assert_eq!(
        hear.recv_timeout(Duration::from_secs(10)),
        Ok("turn"),
        "the promoted waiter took its turn"
    );
}

/// A guard of a field's earlier holds here — alive after they were counted
/// out (its explicit lease ran out and another thread took the lock over)
/// — counts for nothing against a new hold of the same field, whose count
/// the ledger begins anew: its going changes nothing, and sends nothing.
#[test]
fn a_guard_of_an_earlier_held_counts_for_nothing_against_a_new_one() {
    let ledger = Ledger::default();
    let earlier = add(&ledger, false, Duration::from_secs(1), None);
    assert!(gone(&ledger, &earlier, false).last); // counted out here
    let new = add(&ledger, false, Duration::from_secs(1), None);
    assert_ne!(new.generation, earlier.generation);
    let removed = gone(&ledger, &earlier, false);
    assert_eq!(
        removed,
        Removed {
            superseded: true,
            ..Removed::STALE
        }
    );
    assert_eq!(ledger.holds("k", "o").0, 1, "the new hold still counts");
    assert!(gone(&ledger, &new, false).last);
}
