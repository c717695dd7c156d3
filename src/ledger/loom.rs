//! The plain lock's in-process queue and its handover under loom (every
//! interleaving, see `crate::sync`): threads of one client entering the
//! same name through the real `Ledger::enter`, `release`, `finish` and
//! `take_up`, over a stand-in for Redis's side of the key ([`Redis`]: who
//! holds it; an acquire waits until it is free — the wait loop's pub/sub,
//! abstracted). Each model asserts that at most one thread holds the lock
//! at a time (here and in Redis), that a release hands it to the first
//! waiter, and that a waiter giving up while the lock is being handed to it
//! (its `Cancel`, its task's future dropped) loses the lock for nobody:
//! every other thread gets it, nobody waits forever (loom reports a
//! deadlock), and at the end it is free in Redis and nothing is left here.
//! Compiled only in the unit tests built with `--cfg loom`. Leases and
//! deadlines are an hour away (time never decides: loom does not model
//! it); deadlines give up through the same path as a `Cancel`, which is
//! modelled instead.

use std::future::Future;
use std::sync::Arc;
use std::task::{Context, Waker};

use ::loom::thread;

use super::tests::{enter_until, entering, hold, lease, turn};
use super::*;
use crate::options::Cancel;
use crate::park::Park;
use crate::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use crate::sync::{model, Condvar};

/// Every lease and deadline: far enough that time never decides.
const FAR: std::time::Duration = std::time::Duration::from_secs(3_600);

/// Redis's side of the lock: who holds it now (and how many holds it
/// counts for them), and who held it in turn; `public`: other clients wait
/// too, and a release frees the lock for them instead of handing it over.
#[derive(Default)]
struct Redis {
    owners: Mutex<Owners>,
    freed: Condvar,
    public: bool,
}

#[derive(Default)]
struct Owners {
    now: Option<(String, u32)>,
    order: Vec<String>,
}

impl Owners {
    fn pass_to(&mut self, who: &str) {
        self.now = Some((who.to_owned(), 1));
        self.order.push(who.to_owned());
    }

    fn held_by(&self, who: &str) -> bool {
        self.now.as_ref().is_some_and(|(h, _)| h == who)
    }
}

impl Redis {
    /// An attempt that waits until the lock is free, or takes one more
    /// hold of its owner's.
    fn acquire(&self, who: &str) {
        let mut owners = self.owners.lock();
        while owners.now.is_some() && !owners.held_by(who) {
            self.freed.wait(&mut owners);
        }
        match &mut owners.now {
            Some((_, holds)) => *holds += 1,
            None => owners.pass_to(who),
        }
    }

    /// The release script: one hold fewer — or, the owner's `last` here,
    /// all of them: the lock passes to `successor`, or is freed.
    fn release(&self, who: &str, last: bool, successor: Option<&str>) -> Outcome {
        let mut owners = self.owners.lock();
        let Some((_, holds)) = owners.now.as_mut().filter(|(h, _)| h == who) else {
            panic!("{who} released what Redis does not hold for it");
        };
        *holds -= 1;
        match successor {
            _ if !last && *holds > 0 => Outcome::Other,
            Some(_) if self.public => {
                self.undo_locked(&mut owners, who);
                Outcome::FreedForOthers
            }
            Some(next) => {
                owners.pass_to(next);
                Outcome::HandedOver(Instant::now(), None)
            }
            None => {
                self.undo_locked(&mut owners, who);
                Outcome::Other
            }
        }
    }

    /// The owner-checked undo of a hold nobody here takes up.
    fn undo(&self, who: &str) {
        self.undo_locked(&mut self.owners.lock(), who);
    }

    fn undo_locked(&self, owners: &mut Owners, who: &str) {
        if owners.held_by(who) {
            owners.now = None;
            self.freed.notify_all();
        }
    }

    fn holder(&self) -> Option<String> {
        self.owners.lock().now.as_ref().map(|(h, _)| h.clone())
    }
}

/// One client's threads on lock "k": the ledger, Redis's side, and how
/// many of them are inside the lock right now.
#[derive(Default)]
struct Client {
    locks: Ledger,
    redis: Redis,
    inside: AtomicU64,
}

impl Client {
    /// `who` takes the lock as the lock path does: its turn at Redis, or
    /// the hold a release handed it; `None` when it gave up (`cancel`).
    fn acquire(&self, who: &str, cancel: Option<&Cancel>) -> Option<Added> {
        let new_hold = |new_state| NewHold {
            renewed: false,
            until: Instant::now() + FAR,
            minted: None,
            new_state,
        };
        match enter_until(&self.locks, who, None, cancel) {
            // The wait loop looks at its cancel before an attempt.
            Enter::Turn(_) if cancel.is_some_and(Cancel::is_cancelled) => None,
            Enter::Turn(turn) => {
                self.redis.acquire(who);
                Some(hold(turn, FAR))
            }
            Enter::Granted(..) => Some(self.locks.take_up("k", who, new_hold(&mut || lease(FAR)))),
            Enter::TimedOut => None,
            Enter::Abandoned => {
                self.redis.undo(who);
                None
            }
        }
    }

    /// Inside the lock: alone, and the holder in Redis.
    fn inside(&self, who: &str) {
        assert_eq!(self.inside.fetch_add(1, Ordering::SeqCst), 0, "two holders");
        assert_eq!(self.redis.holder().as_deref(), Some(who), "not Redis's");
        self.inside.fetch_sub(1, Ordering::SeqCst);
    }

    /// The guard's release: handed to the first waiter here, or freed; a
    /// waiter that gave up meanwhile has its hold undone by the releaser.
    fn release(&self, who: &str, added: &Added) {
        self.release_after(who, added, &AtomicBool::new(false));
    }

    /// The same, telling `begun` once the ledger's part is done (its
    /// script is then "in flight").
    fn release_after(&self, who: &str, added: &Added, begun: &AtomicBool) {
        let handover = self
            .locks
            .release("k", who, added.generation, &added.state, false);
        begun.store(true, Ordering::SeqCst);
        let successor = handover.successor().map(|s| s.owner.to_owned());
        let last = handover.removed.last;
        let outcome = self.redis.release(who, last, successor.as_deref());
        if let Some(gave_up) = handover.finish(outcome) {
            self.redis.undo(&gave_up);
        }
    }

    /// `who` takes the lock, is inside, releases; whether it held it.
    fn take_turn(&self, who: &str, cancel: Option<&Cancel>) -> bool {
        let Some(added) = self.acquire(who, cancel) else {
            return false;
        };
        self.inside(who);
        self.release(who, &added);
        true
    }

    /// "a" holds the lock (`public`: see [`Redis`]).
    fn held_by_a(public: bool) -> (Arc<Client>, Added) {
        let mut client = Client::default();
        client.redis.public = public;
        let client = Arc::new(client);
        let a = hold(turn(&client.locks, "a"), FAR);
        client.redis.acquire("a");
        (client, a)
    }

    /// Until a thread is queued.
    fn until_queued(&self) {
        until(|| self.locks.queued.load(Ordering::SeqCst) > 0);
    }

    /// Nothing is held or queued, here or in Redis.
    fn assert_idle(&self) {
        assert_eq!(self.redis.holder(), None, "still held in Redis");
        assert!(self.locks.keys.lock().is_empty(), "left in the ledger");
        assert_eq!(self.locks.queued.load(Ordering::SeqCst), 0);
    }
}

/// Spins (loom schedules the others) until `cond`.
fn until(cond: impl Fn() -> bool) {
    while !cond() {
        thread::yield_now();
    }
}

/// `f` on a new loom thread, given the client.
fn spawn<T: 'static>(
    client: &Arc<Client>,
    f: impl FnOnce(&Arc<Client>) -> T + 'static,
) -> thread::JoinHandle<T> {
    let client = Arc::clone(client);
    thread::spawn(move || f(&client))
}

/// b queues behind a; c comes while b waits; a's release hands the lock to
/// b (the first waiter), b's to c: one holder at a time, in arrival order.
#[test]
fn a_release_hands_the_lock_to_the_first_waiter_one_holder_at_a_time() {
    model("ledger: handover in arrival order", || {
        let (client, a) = Client::held_by_a(false);
        let b = spawn(&client, |c| c.take_turn("b", None));
        client.until_queued();
        let c = spawn(&client, |c| c.take_turn("c", None));
        client.inside("a");
        client.release("a", &a);
        assert!(b.join().unwrap() && c.join().unwrap(), "both held it");
        assert_eq!(client.redis.owners.lock().order, ["a", "b", "c"]);
        client.assert_idle();
    });
}

/// a's last guard is being released on one thread (its script in flight)
/// while a takes the lock again on another: the fresh hold waits for the
/// release to end (the `Releasing` phase) — it never reaches Redis first,
/// where the release would free it.
#[test]
fn an_owners_fresh_hold_waits_for_its_own_last_release() {
    model("ledger: a last release and the owner's next hold", || {
        let (client, a) = Client::held_by_a(false);
        let begun = Arc::new(AtomicBool::new(false));
        let releasing = {
            let begun = Arc::clone(&begun);
            spawn(&client, move |c| c.release_after("a", &a, &begun))
        };
        until(|| begun.load(Ordering::SeqCst));
        assert!(client.take_turn("a", None));
        releasing.join().unwrap();
        client.assert_idle();
    });
}

/// The same, but the owner's new lock may also come before the release
/// begins — and then, re-entering while its last guard is released, it
/// fails: the release is sent as not the last (the reentrant attempt is
/// on), the new hold's own release then is the last and frees the lock,
/// and the first release reaches Redis after it (not held: an error for
/// its caller — and, had the owner locked again meanwhile, that fresh
/// hold freed under it). Not reachable through the API: an owner is one
/// thread's (its guards release on it) or one acquisition's (the owned and
/// async guards), so one owner never releases and locks at once. Kept to
/// show the ledger's limit (`--ignored` runs it: loom finds it at once).
#[test]
#[ignore = "one owner releasing and locking on two threads at once: not supported (see its doc)"]
fn one_owner_releasing_and_locking_at_once_on_two_threads() {
    model("ledger: a release racing the owner's next hold", || {
        let (client, a) = Client::held_by_a(false);
        let releasing = spawn(&client, move |c| c.release("a", &a));
        assert!(client.take_turn("a", None));
        releasing.join().unwrap();
        client.assert_idle();
    });
}

/// b, queued, is cancelled by c — before, while or after a's release hands
/// b the lock: b holds it or not, and either way c gets it after, and the
/// lock ends free (a hold handed to b after it gave up is undone).
#[test]
fn a_cancel_racing_a_handover_loses_the_lock_for_nobody() {
    model("ledger: a cancel racing a handover", || {
        a_cancel_racing_a_release(false);
    });
}

/// The same when other clients wait too and a's release frees the lock for
/// them: b, promoted to try Redis itself, or cancelled first, passes the
/// turn on to c.
#[test]
fn a_cancel_racing_a_release_for_others_loses_the_lock_for_nobody() {
    model("ledger: a cancel racing a release for others", || {
        a_cancel_racing_a_release(true);
    });
}

/// b, queued, cancelled by c while a's release goes out (`public`: see
/// [`Redis`]).
fn a_cancel_racing_a_release(public: bool) {
    let (client, a) = Client::held_by_a(public);
    let cancel = Cancel::new();
    let b = {
        let cancel = cancel.clone();
        spawn(&client, move |c| c.take_turn("b", Some(&cancel)))
    };
    client.until_queued();
    let c = spawn(&client, move |c| {
        cancel.cancel();
        c.take_turn("c", None)
    });
    client.release("a", &a);
    b.join().unwrap();
    assert!(c.join().unwrap(), "c held it");
    client.assert_idle();
}

/// b's wait is a task's, queued; its future is dropped (on its own thread)
/// while a's release may be handing it the lock: the hold goes to c or is
/// undone, and the lock ends free.
#[test]
fn a_task_dropped_while_handed_the_lock_loses_it_for_nobody() {
    model("ledger: a dropped task racing a handover", || {
        let (client, a) = Client::held_by_a(false);
        let polled = Arc::new(AtomicBool::new(false));
        let queued = Arc::clone(&polled);
        let b = spawn(&client, move |c| {
            // Its undo: owner-checked, in Redis.
            let undo = || -> Undo {
                let client = Arc::clone(c);
                Box::new(move |_| client.redis.undo("b"))
            };
            let mut wait = Box::pin(entering(&c.locks, Park::Task, "b", None, None, undo));
            let mut cx = Context::from_waker(Waker::noop());
            assert!(wait.as_mut().poll(&mut cx).is_pending(), "queued");
            queued.store(true, Ordering::SeqCst);
        });
        until(|| polled.load(Ordering::SeqCst));
        let c = spawn(&client, |c| c.take_turn("c", None));
        client.release("a", &a);
        b.join().unwrap();
        assert!(c.join().unwrap(), "c held it");
        client.assert_idle();
    });
}
