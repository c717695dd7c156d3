//! The wait loop's decisions, driven by a scripted lock kind and a fake
//! environment: no Redis, no notifier. Compiled only under #[cfg(test)] (see
//! `wait.rs`).

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;

use super::*;

/// A scripted attempt: what it answers, and how long it "takes".
enum Step {
    Held {
        after: Duration,
    },
    Wait(Duration),
    /// Held by another library's client (its release only publishes on
    /// the unlock channel).
    Foreign(Duration),
    Fail(fn() -> Error),
}

fn io_error() -> Error {
    Error::from(redis::RedisError::from(std::io::Error::new(
        std::io::ErrorKind::ConnectionRefused,
        "refused",
    )))
}

fn loading() -> Error {
    let e = redis::parse_redis_value(b"-LOADING Redis is loading the dataset in memory\r\n")
        .and_then(redis::Value::extract_error)
        .unwrap_err();
    Error::from_redis(e, "k")
}

fn no_permission() -> Error {
    let e = redis::parse_redis_value(b"-NOPERM no permissions\r\n")
        .and_then(redis::Value::extract_error)
        .unwrap_err();
    Error::from_redis(e, "k")
}

struct Scripted {
    steps: VecDeque<Step>,
    lease: Duration,
    place: bool,
    wake: Wake,
    attempts: u32,
    undone: u32,
    left: u32,
    /// The last attempt found another library's holder.
    foreign: bool,
}

impl Scripted {
    fn new(steps: Vec<Step>) -> Self {
        Scripted {
            steps: steps.into(),
            lease: Duration::from_secs(30),
            place: false,
            wake: Wake::One,
            attempts: 0,
            undone: 0,
            left: 0,
            foreign: false,
        }
    }
}

impl LockKind for Scripted {
    type Held = u32;

    fn attempt(&mut self) -> Result<Answer<u32>> {
        self.attempts += 1;
        match self
            .steps
            .pop_front()
            .expect("an attempt more than scripted")
        {
            Step::Held { after } => {
                std::thread::sleep(after);
                Ok(Answer::Held(self.attempts))
            }
            Step::Wait(cap) => {
                self.foreign = false;
                Ok(Answer::Wait(cap))
            }
            Step::Foreign(cap) => {
                self.foreign = true;
                Ok(Answer::Wait(cap))
            }
            Step::Fail(error) => Err(error()),
        }
    }

    fn undo(&mut self, _held: u32) {
        self.undone += 1;
    }

    fn lease(&self) -> Duration {
        self.lease
    }

    fn channels(&self) -> Channels {
        Channels {
            channel: "chan".into(),
            line: None,
            unlock: self.foreign,
        }
    }

    fn hears_unlock(&self) -> bool {
        self.foreign
    }

    /// `mine`: held (token 99) with a 3 s lease; `brief`: held with a 1 ns
    /// lease (gone by the time it is read); `accept`: ours, needs an attempt; anything else: not ours.
    fn granted(&mut self, grant: &[u8]) -> Option<Granted<u32>> {
        match grant {
            b"mine" => Some(Granted::Held(99, Duration::from_secs(3))),
            b"brief" => Some(Granted::Held(99, Duration::from_nanos(1))),
            b"accept" => Some(Granted::Accept),
            _ => None,
        }
    }

    fn wake(&self) -> Wake {
        self.wake
    }

    fn holds_place(&self) -> bool {
        self.place
    }

    fn leave(&mut self) {
        self.left += 1;
    }
}

/// Records what the loop asked of it; parks sleep until their bound.
/// `grants`: what each park delivers on the grant channel, in turn.
#[derive(Default)]
struct Fake {
    log: RefCell<Vec<String>>,
    outage_limit: Duration,
    grants: RefCell<VecDeque<Vec<&'static [u8]>>>,
    delivered: RefCell<Vec<Vec<u8>>>,
    /// The subscription is not confirmed (the subscriber cannot connect).
    deaf: bool,
    /// How many of the subscriptions made are (sharded) on a node that no
    /// longer serves the channel's slot, counted from the first.
    moved: Cell<u32>,
    /// The wait is cancelled once it parked this many times.
    cancel_after_parks: Cell<Option<usize>>,
    /// The subscription hears the unlock channel.
    unlock: Cell<bool>,
}

impl Fake {
    fn log(&self) -> Vec<String> {
        self.log.borrow().clone()
    }
}

impl Env for Fake {
    type Sub = ();

    fn subscribe(&self, channels: &Channels, _confirm_by: Instant) {
        let unlock = if channels.unlock { " +unlock" } else { "" };
        self.log
            .borrow_mut()
            .push(format!("subscribe {}{unlock}", channels.channel));
        self.unlock.set(channels.unlock);
        // Each new subscription after a move lands on the right node.
        if self.moved.get() > 0 {
            self.moved.set(self.moved.get() - 1);
        }
    }

    fn listen_unlock(&self, _sub: &(), on: bool, _confirm_by: Instant) -> bool {
        if self.unlock.replace(on) == on {
            return false;
        }
        self.log.borrow_mut().push(format!("unlock {on}"));
        on
    }

    fn take_grants(&self, _sub: &()) -> Vec<Vec<u8>> {
        std::mem::take(&mut *self.delivered.borrow_mut())
    }

    fn clear_permits(&self, _sub: &()) {
        self.log.borrow_mut().push("clear".into());
    }

    fn broadcasts(&self, _sub: &()) -> u64 {
        self.log.borrow_mut().push("broadcasts".into());
        7
    }

    fn park(&self, _sub: &(), wake: Wake, seen: u64, until: Instant) {
        let ms = until.saturating_duration_since(Instant::now()).as_millis();
        // Rounded to tens of ms so the log does not depend on scheduling.
        let ms = (ms + 5) / 10 * 10;
        self.log
            .borrow_mut()
            .push(format!("park {wake:?} seen {seen} ~{ms} ms"));
        match self.grants.borrow_mut().pop_front() {
            // A grant wakes the waiter at once.
            Some(grants) => self
                .delivered
                .borrow_mut()
                .extend(grants.into_iter().map(<[u8]>::to_vec)),
            None => std::thread::sleep(until.saturating_duration_since(Instant::now())),
        }
    }

    fn listening(&self, sub: &()) -> bool {
        !self.deaf && !self.moved(sub)
    }

    fn moved(&self, _sub: &()) -> bool {
        self.moved.get() > 0
    }

    fn pause(&self, sub: Option<&()>, until: Instant) {
        self.log
            .borrow_mut()
            .push(format!("pause subscribed={}", sub.is_some()));
        std::thread::sleep(until.saturating_duration_since(Instant::now()));
    }

    fn outage_limit(&self) -> Duration {
        self.outage_limit
    }

    fn cancelled(&self) -> bool {
        self.cancel_after_parks.get().is_some_and(|n| {
            self.log
                .borrow()
                .iter()
                .filter(|l| l.starts_with("park"))
                .count()
                >= n
        })
    }
}

fn fake() -> Fake {
    Fake {
        outage_limit: Duration::from_secs(5),
        ..Fake::default()
    }
}

fn run(kind: &mut Scripted, env: &Fake, deadline: Option<Instant>) -> Result<Option<u32>> {
    let mut sub = None;
    wait_for(kind, env, &mut sub, "lock", deadline).map(|got| got.map(|g| g.held))
}

#[test]
fn a_free_lock_is_one_attempt_and_no_subscription() {
    let mut kind = Scripted::new(vec![Step::Held {
        after: Duration::ZERO,
    }]);
    let env = fake();
    assert_eq!(run(&mut kind, &env, None).unwrap(), Some(1));
    assert_eq!(kind.attempts, 1);
    assert!(env.log().is_empty(), "{:?}", env.log());
}

#[test]
fn a_held_lock_subscribes_then_retries_then_parks_for_the_cap() {
    let mut kind = Scripted::new(vec![
        Step::Wait(Duration::from_millis(200)),
        Step::Wait(Duration::from_millis(200)),
        Step::Held {
            after: Duration::ZERO,
        },
    ]);
    let env = fake();
    assert_eq!(run(&mut kind, &env, None).unwrap(), Some(3));
    assert_eq!(
        env.log(),
        [
            "subscribe chan",
            "clear",
            "park One seen 0 ~200 ms",
            "clear"
        ],
        "subscribe before the retry, permits cleared before every attempt after"
    );
}

/// A waiter whose subscription is not confirmed (the subscriber cannot
/// connect: an ACL, a network problem) would never hear the unlock: it
/// retries at growing intervals from 100 ms up to 1 s instead of sleeping
/// out the holder's lease.
#[test]
fn a_waiter_that_cannot_hear_unlocks_retries_within_a_second_not_a_lease() {
    let long = Duration::from_secs(30);
    let mut kind = Scripted::new(vec![
        Step::Wait(long),
        Step::Wait(long),
        Step::Wait(long),
        Step::Wait(long),
        Step::Wait(long),
        Step::Wait(long),
        Step::Held {
            after: Duration::ZERO,
        },
    ]);
    let env = Fake {
        deaf: true,
        ..fake()
    };
    let started = Instant::now();
    assert_eq!(run(&mut kind, &env, None).unwrap(), Some(7));
    let parks: Vec<String> = env
        .log()
        .into_iter()
        .filter(|l| l.starts_with("park"))
        .collect();
    assert_eq!(
        parks,
        [
            "park One seen 0 ~100 ms",
            "park One seen 0 ~200 ms",
            "park One seen 0 ~400 ms",
            "park One seen 0 ~800 ms",
            "park One seen 0 ~1000 ms",
        ]
    );
    assert!(started.elapsed() < Duration::from_secs(4));
}

/// Sharded pub/sub: a subscription on a node that no longer serves the
/// channel's slot (a reshard, a failover) hears nothing: the waiter drops
/// it, attempts again and subscribes on the slot's node at once — and if
/// that one moved too, again after a growing pause, never a lease.
#[test]
fn a_waiter_whose_channel_moved_subscribes_again_where_it_is_now() {
    let long = Duration::from_secs(30);
    let mut kind = Scripted::new(vec![
        Step::Wait(long),
        Step::Wait(long),
        Step::Wait(long),
        Step::Wait(long),
        Step::Wait(long),
        Step::Held {
            after: Duration::ZERO,
        },
    ]);
    let env = fake();
    // The first subscription is on the old node, and so is the next.
    env.moved.set(3);
    let started = Instant::now();
    assert_eq!(run(&mut kind, &env, None).unwrap(), Some(6));
    assert_eq!(
        env.log(),
        [
            "subscribe chan",
            "clear",
            // moved: dropped, attempted again at once, subscribed again
            "subscribe chan",
            "clear",
            // moved again: a pause first
            "pause subscribed=false",
            "subscribe chan",
            "clear",
        ]
    );
    assert!(started.elapsed() < Duration::from_secs(1));
}

/// A cancelled wait ends like one whose deadline passed: no attempt after
/// the cancel, the waiting place left.
#[test]
fn a_cancelled_wait_ends_without_another_attempt_and_leaves_its_place() {
    let mut kind = Scripted::new(vec![
        Step::Wait(Duration::from_millis(10)),
        Step::Wait(Duration::from_millis(10)),
        Step::Wait(Duration::from_millis(10)),
        Step::Held {
            after: Duration::ZERO,
        },
    ]);
    kind.place = true;
    let env = fake();
    env.cancel_after_parks.set(Some(1));
    assert_eq!(run(&mut kind, &env, None).unwrap(), None);
    assert_eq!(kind.left, 1, "the waiting place was left");
    assert_eq!(
        env.log(),
        ["subscribe chan", "clear", "park One seen 0 ~10 ms"],
        "no attempt after the cancel"
    );
}

#[test]
fn read_write_waiters_count_wake_alls_instead_of_clearing() {
    let mut kind = Scripted::new(vec![
        Step::Wait(Duration::from_millis(100)),
        Step::Wait(Duration::from_millis(100)),
        Step::Held {
            after: Duration::ZERO,
        },
    ]);
    kind.wake = Wake::OneOrAll;
    let env = fake();
    run(&mut kind, &env, None).unwrap();
    assert_eq!(
        env.log(),
        [
            "subscribe chan",
            "broadcasts",
            "park OneOrAll seen 7 ~100 ms",
            "broadcasts"
        ]
    );
}

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
    let mut kind = Scripted::new(vec![
        late(),
        Step::Held {
            after: Duration::ZERO,
        },
    ]);
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
    let deadline = Instant::now() + Duration::from_millis(5);
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
        Step::Held {
            after: Duration::ZERO,
        },
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
    let started = Instant::now();
    let e = run(&mut kind, &env, None).unwrap_err();
    assert!(e.is_connection(), "{e:?}");
    assert!(started.elapsed() >= Duration::from_millis(60));
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
    let deadline = Instant::now() + Duration::from_millis(40);
    let e = run(&mut kind, &fake(), Some(deadline)).unwrap_err();
    assert!(e.is_connection(), "{e:?}");
    assert!(Instant::now() < deadline + Duration::from_millis(30));
}

#[test]
fn the_deadline_ends_the_wait_and_leaves_the_place() {
    let mut kind = Scripted::new(vec![
        Step::Wait(Duration::from_secs(10)),
        Step::Wait(Duration::from_secs(10)),
        Step::Wait(Duration::from_secs(10)),
    ]);
    kind.place = true;
    let started = Instant::now();
    let deadline = started + Duration::from_millis(50);
    let env = fake();
    assert_eq!(run(&mut kind, &env, Some(deadline)).unwrap(), None);
    assert_eq!(kind.left, 1, "the waiting place was left");
    // The park was capped by the deadline, not by the 10 s hint.
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(50) && took < Duration::from_secs(5),
        "{took:?}"
    );
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
    let mut kind = Scripted::new(vec![
        Step::Wait(Duration::from_millis(1)),
        Step::Held {
            after: Duration::ZERO,
        },
    ]);
    kind.place = true;
    assert_eq!(run(&mut kind, &fake(), None).unwrap(), Some(2));
    assert_eq!(kind.left, 0, "the acquire took us out of line itself");
}

#[test]
fn a_place_is_left_when_the_waiter_panics() {
    struct Panics(Scripted);
    impl LockKind for Panics {
        type Held = u32;
        fn attempt(&mut self) -> Result<Answer<u32>> {
            if self.0.attempts == 1 {
                panic!("a bug in the attempt");
            }
            self.0.attempt()
        }
        fn undo(&mut self, h: u32) {
            self.0.undo(h)
        }
        fn lease(&self) -> Duration {
            self.0.lease()
        }
        fn channels(&self) -> Channels {
            self.0.channels()
        }
        fn hears_unlock(&self) -> bool {
            self.0.hears_unlock()
        }
        fn granted(&mut self, grant: &[u8]) -> Option<Granted<u32>> {
            self.0.granted(grant)
        }
        fn wake(&self) -> Wake {
            self.0.wake()
        }
        fn holds_place(&self) -> bool {
            true
        }
        fn leave(&mut self) {
            self.0.leave()
        }
    }
    let mut kind = Panics(Scripted::new(vec![Step::Wait(Duration::from_millis(1))]));
    let env = fake();
    let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut sub = None;
        let _ = wait_for(&mut kind, &env, &mut sub, "lock", None);
    }));
    assert!(unwound.is_err());
    assert_eq!(kind.0.left, 1);
}

#[test]
fn a_subscription_handed_in_is_used_and_handed_back() {
    let mut kind = Scripted::new(vec![
        Step::Wait(Duration::from_millis(50)),
        Step::Held {
            after: Duration::ZERO,
        },
    ]);
    let env = fake();
    let mut sub = Some(());
    let held = wait_for(&mut kind, &env, &mut sub, "lock", None).unwrap();
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
    let got = wait_for(&mut kind, &env, &mut sub, "lock", None).unwrap();
    (kind, env, got)
}

#[test]
fn a_grant_while_parked_is_held_without_another_attempt() {
    let started = Instant::now();
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

#[test]
fn a_grant_for_another_wait_is_ignored() {
    let (kind, _, got) = granted_run(
        vec![vec![b"someone#else", b"0"]],
        vec![
            Step::Wait(Duration::from_millis(5)),
            Step::Held {
                after: Duration::ZERO,
            },
        ],
    );
    assert_eq!(got.map(|g| g.held), Some(2), "held by the next attempt");
    assert_eq!(kind.attempts, 2);
}

#[test]
fn a_grant_that_needs_accepting_or_came_late_is_taken_by_an_attempt() {
    for grant in [b"accept".as_slice(), b"brief".as_slice()] {
        let (kind, _, got) = granted_run(
            vec![vec![grant]],
            vec![
                Step::Wait(Duration::from_secs(10)),
                Step::Held {
                    after: Duration::ZERO,
                },
            ],
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
    let got = wait_for(&mut kind, &env, &mut sub, "lock", None).unwrap();
    assert_eq!(kind.attempts, 2, "the early grant did not end the wait");
    assert_eq!(got.map(|g| g.held), Some(99));
}

#[test]
fn a_bounded_wait_rides_out_an_outage_from_its_first_attempt_up_to_its_deadline() {
    // Refused from the start, back after a few tries: held.
    let mut kind = Scripted::new(vec![
        Step::Fail(io_error),
        Step::Fail(loading),
        Step::Held {
            after: Duration::ZERO,
        },
    ]);
    let env = Fake {
        outage_limit: Duration::from_millis(1), // a bounded wait ignores it
        ..Fake::default()
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    assert_eq!(run(&mut kind, &env, Some(deadline)).unwrap(), Some(3));
    // A single attempt (deadline now) reports the error at once.
    let mut kind = Scripted::new(vec![Step::Fail(io_error)]);
    let e = run(&mut kind, &fake(), Some(Instant::now())).unwrap_err();
    assert!(e.is_connection(), "{e:?}");
    assert_eq!(kind.attempts, 1);
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
        Step::Held {
            after: Duration::ZERO,
        },
    ]);
    let env = fake();
    assert_eq!(
        run(&mut kind, &env, Some(Instant::now() + long)).unwrap(),
        Some(6)
    );
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
