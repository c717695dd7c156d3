//! Owned guards (issue 14, case 1): a hold that moves between threads is
//! owned by the guard, so the thread that took it — or any other — cannot
//! re-enter the lock while the guard lives elsewhere. The thread-owned
//! `LockGuard` cannot move at all (its `compile_fail` doctest).

mod support;

use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use leasehold::{LockClient, LockOptions, OwnedLockGuard};
use support::{eventually, RedisServer};

/// A worker thread takes the lock as an owned guard and hands it to another
/// thread, then runs "the next job" on the same name: it must not get in
/// while the guard is held elsewhere, in any of 100 rounds and for every
/// way of asking (single try, bounded wait, reentrant or owned).
#[test]
fn a_moved_owned_guard_keeps_its_thread_out_for_a_hundred_rounds() {
    let server = RedisServer::start();
    let client = LockClient::new(&server.url()).unwrap();
    type Handed = (OwnedLockGuard, mpsc::Sender<()>, mpsc::Receiver<()>);
    let (to_keeper, kept) = mpsc::channel::<Handed>();
    // The keeper holds each guard it receives until told to let it go.
    let keeper = thread::spawn(move || {
        for (guard, held, go) in kept {
            assert!(guard.is_held());
            held.send(()).unwrap();
            go.recv().unwrap();
            guard
                .unlock()
                .expect("the moved guard unlocks on its new thread");
        }
    });
    for round in 0..100 {
        let guard = client.lock_owned("job").unwrap();
        let (held_tx, held_rx) = mpsc::channel();
        let (go_tx, go_rx) = mpsc::channel();
        to_keeper.send((guard, held_tx, go_rx)).unwrap();
        held_rx.recv().unwrap(); // the keeper has it now
                                 // The worker thread (this one) runs the next job on the same name.
        let again = match round % 3 {
            0 => client.try_lock("job").unwrap().is_some(),
            1 => client
                .try_lock_owned_with("job", LockOptions::new())
                .unwrap()
                .is_some(),
            _ => client
                .try_lock_with("job", LockOptions::new().wait(Duration::from_millis(1)))
                .unwrap()
                .is_some(),
        };
        assert!(
            !again,
            "round {round}: this thread got in while the moved guard held the lock"
        );
        // Once the keeper lets go, this thread gets it (waiting for that).
        go_tx.send(()).unwrap();
        let next = client
            .lock_with("job", LockOptions::new().wait(Duration::from_secs(10)))
            .unwrap();
        next.unlock().unwrap();
    }
    drop(to_keeper);
    keeper.join().unwrap();
}

/// Owned guards are not reentrant: a second owned acquisition of the same
/// name — from the same thread — waits for the first.
#[test]
fn owned_guards_are_not_reentrant() {
    let server = RedisServer::start();
    let client = LockClient::new(&server.url()).unwrap();
    let first = client.lock_owned("once").unwrap();
    let second = client
        .try_lock_owned_with("once", LockOptions::new().wait(Duration::from_millis(100)))
        .unwrap();
    assert!(second.is_none(), "an owned guard re-entered");
    assert!(client.try_lock("once").unwrap().is_none());
    drop(first);
    assert!(client.try_lock("once").unwrap().is_some());
}

/// Every kind takes an owned guard, and dropping it on another thread
/// releases it: a waiting thread of the same client gets the lock at once
/// (the in-process handoff for a plain lock).
#[test]
fn an_owned_guard_of_each_kind_released_on_another_thread_lets_the_next_in() {
    let server = RedisServer::start();
    let client = LockClient::new(&server.url()).unwrap();
    for (name, opts) in [
        ("plain", LockOptions::new()),
        ("fair", LockOptions::new().fair()),
        ("write", LockOptions::new().write()),
        ("fenced", LockOptions::new().fenced()),
    ] {
        let guard = client.lock_owned_with(name, opts.clone()).unwrap();
        let waiter = {
            let client = client.clone();
            thread::spawn(move || {
                let g = client
                    .lock_with(name, opts.wait(Duration::from_secs(10)))
                    .unwrap();
                g.unlock().unwrap();
            })
        };
        assert!(
            eventually(Duration::from_secs(5), || client.stats().waiters_parked
                + client.stats().waiters_queued
                > 0),
            "{name}: the waiter is waiting"
        );
        thread::spawn(move || drop(guard)).join().unwrap();
        waiter.join().unwrap();
    }
}

/// An owned hold on an explicit lease that ran out (its guard still alive)
/// keeps no one of its client out: the next acquire of the name in the same
/// client — even a single try — takes the in-process turn over and asks
/// Redis, which decides (it once found the turn taken and gave up).
#[test]
fn an_explicit_lease_that_ran_out_does_not_keep_the_same_clients_next_try_out() {
    let server = RedisServer::start();
    let client = LockClient::new(&server.url()).unwrap();
    let short = LockOptions::new().lease(Duration::from_millis(200));
    let first = client.lock_owned_with("ran-out", short.clone()).unwrap();
    assert!(client
        .try_lock_owned_with("ran-out", short.clone())
        .unwrap()
        .is_none());
    thread::sleep(Duration::from_millis(300));
    assert!(!first.is_held());
    let second = client.try_lock_owned_with("ran-out", short).unwrap();
    assert!(
        second.is_some(),
        "the lease ran out: the name is free in Redis"
    );
    drop(first); // not ours any more: changes nothing
    assert!(second.unwrap().is_held());
}
