//! The wait loop's decisions, driven by a scripted lock kind and a fake
//! environment: no Redis, no notifier. Compiled only under #[cfg(test)] (see
//! `wait.rs`). This file: the fakes, and waiting itself (subscribe, retry,
//! park, cancel); `outages`: late replies, errors, outages, deadlines;
//! `grants`: subscriptions handed in, grants, hearing the unlock channel.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;

use super::*;

thread_local! {
    /// The tests' clock (each test runs on a thread of its own): the real
    /// instant of its first read, moved on only by what the fakes take —
    /// an attempt's round trip, a park or a pause to its end. No test
    /// sleeps, and every time it checks is exact.
    static NOW: Cell<Option<Instant>> = const { Cell::new(None) };
}

/// The tests' clock now.
fn now() -> Instant {
    NOW.with(|n| {
        let t = n.get().unwrap_or_else(Instant::now);
        n.set(Some(t));
        t
    })
}

/// Moves the tests' clock on to `t` (never back).
fn advance_to(t: Instant) {
    let t = t.max(now());
    NOW.with(|n| n.set(Some(t)));
}

mod grants;
mod outages;

/// A scripted attempt: what it answers, and how long it "takes".
#[derive(Clone)]
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

/// Held, the reply at once.
const HELD: Step = Step::Held {
    after: Duration::ZERO,
};

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
    /// Of those, left with Redis silent (by the undo thread, later).
    unheard: u32,
    /// The last attempt found another library's holder.
    foreign: bool,
    /// The attempt of this number panics (a bug in it).
    panic_at: Option<u32>,
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
            unheard: 0,
            foreign: false,
            panic_at: None,
        }
    }
}

impl LockKind for Scripted {
    type Held = u32;

    async fn attempt(&mut self) -> Result<Answer<u32>> {
        self.attempts += 1;
        if self.panic_at == Some(self.attempts) {
            panic!("a bug in the attempt");
        }
        match self
            .steps
            .pop_front()
            .expect("an attempt more than scripted")
        {
            Step::Held { after } => {
                advance_to(now() + after);
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

    async fn undo(&mut self, _held: u32) {
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
            claims: false,
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

    fn leave(&mut self, heard: bool) {
        self.left += 1;
        self.unheard += u32::from(!heard);
    }

    /// A waiter whose grants are claimed names its place `mine`.
    fn claim(&self) -> Option<&str> {
        (self.wake == Wake::Claim && self.place).then_some("mine")
    }
}

/// Records what the loop asked of it; parks and pauses last until their
/// bound (on the tests' clock).
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
    /// Locks taken after waiting, each: woken by a message (or a retry).
    got: RefCell<Vec<bool>>,
}

impl Fake {
    fn log(&self) -> Vec<String> {
        self.log.borrow().clone()
    }
}

impl Env for Fake {
    type Sub = ();

    async fn subscribe(&self, channels: &Channels, _confirm_by: Instant) {
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

    async fn listen_unlock(&self, _sub: &(), on: bool, _confirm_by: Instant) -> bool {
        if self.unlock.replace(on) == on {
            return false;
        }
        self.log.borrow_mut().push(format!("unlock {on}"));
        on
    }

    fn take_grants(&self, _sub: &(), claim: Option<&str>) -> Vec<Vec<u8>> {
        let delivered = std::mem::take(&mut *self.delivered.borrow_mut());
        let Some(claim) = claim else {
            return delivered;
        };
        let (mine, others) = delivered.into_iter().partition(|g| g == claim.as_bytes());
        *self.delivered.borrow_mut() = others;
        mine
    }

    fn clear_permits(&self, _sub: &()) {
        self.log.borrow_mut().push("clear".into());
    }

    fn broadcasts(&self, _sub: &()) -> u64 {
        self.log.borrow_mut().push("broadcasts".into());
        7
    }

    /// A message (`grants`' next entry, maybe no grant in it) wakes the
    /// waiter at once; without one, the park lasts until `until`.
    async fn park(
        &self,
        _sub: &(),
        wake: Wake,
        seen: u64,
        claim: Option<&str>,
        until: Instant,
    ) -> bool {
        if let Some(claim) = claim {
            self.log.borrow_mut().push(format!("claim {claim}"));
        }
        let ms = until.saturating_duration_since(now()).as_millis();
        self.log
            .borrow_mut()
            .push(format!("park {wake:?} seen {seen} ~{ms} ms"));
        let message = self.grants.borrow_mut().pop_front();
        match message {
            Some(grants) => {
                let grants = grants.into_iter().map(<[u8]>::to_vec);
                self.delivered.borrow_mut().extend(grants);
                true
            }
            None => {
                advance_to(until);
                false
            }
        }
    }

    fn got_after_waiting(&self, woken: bool) {
        self.got.borrow_mut().push(woken);
    }

    fn listening(&self, sub: &()) -> bool {
        !self.deaf && !self.moved(sub)
    }

    fn moved(&self, _sub: &()) -> bool {
        self.moved.get() > 0
    }

    async fn pause(&self, sub: Option<&()>, until: Instant) {
        self.log
            .borrow_mut()
            .push(format!("pause subscribed={}", sub.is_some()));
        advance_to(until);
    }

    fn outage_limit(&self) -> Duration {
        self.outage_limit
    }

    fn now(&self) -> Instant {
        now()
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
    crate::park::block_on(wait_for(kind, env, &mut sub, "lock", deadline))
        .map(|got| got.map(|g| g.held))
}

/// The loop without a deadline, with `sub` handed in (and handed back).
fn run_on(kind: &mut Scripted, env: &Fake, sub: &mut Option<()>) -> Option<Got<u32>> {
    crate::park::block_on(wait_for(kind, env, sub, "lock", None)).unwrap()
}

#[test]
fn a_free_lock_is_one_attempt_and_no_subscription() {
    let mut kind = Scripted::new(vec![HELD]);
    let env = fake();
    assert_eq!(run(&mut kind, &env, None).unwrap(), Some(1));
    assert_eq!(kind.attempts, 1);
    assert!(env.log().is_empty(), "{:?}", env.log());
    assert!(
        env.got.borrow().is_empty(),
        "no wait: neither woken nor retried"
    );
}

/// A lock taken after waiting is counted as woken (a message ended the park
/// before the attempt that took it, or brought a grant) or retried (the
/// park ran to its end, or the retry came after subscribing): what
/// `Stats::woken_acquisitions` and `retried_acquisitions` count.
#[test]
fn what_set_off_the_attempt_that_took_the_lock_is_counted() {
    let wait = |ms| Step::Wait(Duration::from_millis(ms));
    // Each park in turn: woken by a message bringing these grants (none:
    // an unlock message), or (past the list) run to its end.
    let check = |case: &str, parks: Vec<Vec<&'static [u8]>>, steps, sub, woken: bool| {
        let mut kind = Scripted::new(steps);
        kind.place = true;
        let env = fake();
        *env.grants.borrow_mut() = parks.into();
        let mut sub = sub;
        assert!(run_on(&mut kind, &env, &mut sub).is_some(), "{case}");
        assert_eq!(*env.got.borrow(), [woken], "{case}: {:?}", env.log());
    };
    let subscribed = Some(());
    check(
        "the park ran out",
        vec![],
        vec![wait(50), HELD],
        subscribed,
        false,
    );
    check(
        "a message",
        vec![vec![]],
        vec![wait(10_000), HELD],
        subscribed,
        true,
    );
    check(
        "a grant",
        vec![vec![b"mine"]],
        vec![wait(10_000)],
        subscribed,
        true,
    );
    check(
        "a message, then the park ran out",
        vec![vec![]],
        vec![wait(10_000), wait(50), HELD],
        subscribed,
        false,
    );
    check(
        "the retry after subscribing",
        vec![],
        vec![wait(50), HELD],
        None,
        false,
    );
}

#[test]
fn a_held_lock_subscribes_then_retries_then_parks_for_the_cap() {
    let mut kind = Scripted::new(vec![
        Step::Wait(Duration::from_millis(200)),
        Step::Wait(Duration::from_millis(200)),
        HELD,
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
    let mut kind = Scripted::new([vec![Step::Wait(long); 6], vec![HELD]].concat());
    let env = Fake {
        deaf: true,
        ..fake()
    };
    let started = now();
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
    // Retried within 2.5 s in all, not after the 30 s lease.
    assert_eq!(now() - started, Duration::from_millis(2_500));
}

/// Sharded pub/sub: a subscription on a node that no longer serves the
/// channel's slot (a reshard, a failover) hears nothing: the waiter drops
/// it, attempts again and subscribes on the slot's node at once — and if
/// that one moved too, again after a growing pause, never a lease.
#[test]
fn a_waiter_whose_channel_moved_subscribes_again_where_it_is_now() {
    let long = Duration::from_secs(30);
    let mut kind = Scripted::new([vec![Step::Wait(long); 5], vec![HELD]].concat());
    let env = fake();
    // The first subscription is on the old node, and so is the next.
    env.moved.set(3);
    let started = now();
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
    // One pause of 100 ms, never the 30 s lease.
    assert_eq!(now() - started, Duration::from_millis(100));
}

/// A cancelled wait ends like one whose deadline passed: no attempt after
/// the cancel, the waiting place left.
#[test]
fn a_cancelled_wait_ends_without_another_attempt_and_leaves_its_place() {
    let waits = vec![Step::Wait(Duration::from_millis(10)); 3];
    let mut kind = Scripted::new([waits, vec![HELD]].concat());
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
        HELD,
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
