//! One acquisition as the wait loop drives it ([`Waiting`]), for every lock
//! kind: what the caller asked for ([`Want`]), the kind's attempt, undo,
//! channels, wake rule, waiting place and grants — what the loop asks of a
//! lock ([`LockKind`], in the loop's words: [`Answer`], [`Granted`],
//! [`Wake`], [`Channels`], [`Got`]) — what differs by kind before the loop
//! (the plain lock's in-process queue, a fair waiter's place) and the one
//! acquire ending ([`Waiting::held`]): the hold recorded in the ledger, its
//! lease registered with the renewal thread.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{Hold, Orphan, Raw};
use crate::conn::Bound;
use crate::error::{Error, Result};
use crate::ledger::{Enter, NewHold, Turn, Undo};
use crate::names::timeout_prefix;
use crate::options::{check_lease, check_name, Cancel, Kind};
use crate::park::Park;
use crate::protocol::{self, Attempt, Fence, Request};

/// What one attempt of a kind found.
#[derive(Debug)]
pub(crate) enum Answer<H> {
    /// Held now.
    Held(H),
    /// Held by someone else: try again after at most this long (the kind
    /// caps it: the holder's lease, or how often it must confirm its place).
    Wait(Duration),
}

/// How waiters of a kind are woken on its channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wake {
    /// Each unlock message wakes one waiter of the client; wake-ups granted
    /// before an attempt are stale once it ran (cleared first).
    One,
    /// Read/write: waiters of one client share the wake-ups, so none clears
    /// them (that could swallow another's); a wake-all message (`1`) wakes
    /// everyone whose attempt came before it.
    OneOrAll,
    /// A semaphore: waiters of one client share the subscription; each is
    /// woken by a grant that names its place (see [`LockKind::claim`]), and
    /// one by each count announced on the channel; none clears wake-ups.
    Claim,
}

/// What a waiter subscribes to: the channel that announces its chance, and
/// (plain) its client's grant channel for the lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Channels {
    pub(crate) channel: String,
    /// Plain: the lock key and the client's grant channel for it.
    pub(crate) line: Option<(String, String)>,
    /// Plain: the unlock channel `channel` is heard too (see
    /// [`LockKind::hears_unlock`]).
    pub(crate) unlock: bool,
    /// Grants are claimed by the waiter whose place they name (a
    /// semaphore's: [`Wake::Claim`]).
    pub(crate) claims: bool,
}

/// What a grant message means to the waiter it names.
#[derive(Debug)]
pub(crate) enum Granted<H> {
    /// Held now, with the lease Redis set for it (from the last attempt on).
    Held(H, Duration),
    /// Ours, but the lock needs an attempt to be taken as asked (its own
    /// lease, a token, replica acknowledgement): the attempt finds it set to
    /// us and takes it.
    Accept,
}

/// A wait that ended holding the lock.
#[derive(Debug)]
pub(crate) struct Got<H> {
    pub(crate) held: H,
    /// When the request that set the lease was sent (the lease counts from
    /// then).
    pub(crate) sent_at: Instant,
    /// The lease Redis set: the kind's, or a grant's shorter one.
    pub(crate) lease: Duration,
}

/// What one lock kind does at Redis; the loop decides everything else.
pub(crate) trait LockKind {
    /// What a successful attempt returns.
    type Held;
    /// One attempt. Errors the loop may ride out are those
    /// [`Error::is_transient`] calls so.
    async fn attempt(&mut self) -> Result<Answer<Self::Held>>;
    /// Gives back a hold whose reply arrived after its lease had run out
    /// (owner-checked, best effort).
    async fn undo(&mut self, held: Self::Held);
    /// The lease an attempt asks for.
    fn lease(&self) -> Duration;
    /// The channels that announce our chance.
    fn channels(&self) -> Channels;
    /// Plain: whether the unlock channel must be heard now (the last
    /// attempt found another library's holder, whose release only publishes
    /// there; or the wait has no place in line to be granted).
    fn hears_unlock(&self) -> bool;
    /// What a message on our grant channel means to us (`None`: not ours —
    /// another wait's, or garbage).
    fn granted(&mut self, grant: &[u8]) -> Option<Granted<Self::Held>>;
    /// How waiters on that channel are woken.
    fn wake(&self) -> Wake;
    /// Whether a `Wait` answer left a place of ours in Redis (a fair queue
    /// place, a waiting writer's place) that must be left on giving up.
    fn holds_place(&self) -> bool;
    /// Leaves that place (owner-checked, best effort; a task's leave runs in
    /// the background). Not `heard` (Redis did not answer the wait's last
    /// call): not sent now, where its reply would be waited for up to the
    /// socket timeout, past the wait's deadline — the undo thread leaves it
    /// once Redis answers, and before this owner's next acquire of the key.
    fn leave(&mut self, heard: bool);
    /// [`Wake::Claim`]: the place a grant for this wait names, once it has
    /// one.
    fn claim(&self) -> Option<&str> {
        None
    }
}

/// What the caller asked for.
#[derive(Clone)]
pub(crate) struct Want {
    pub(crate) kind: Kind,
    /// An explicit lease; `None`: the watchdog lease, renewed.
    pub(crate) lease: Option<Duration>,
    pub(crate) fenced: bool,
    /// The hold gets an owner of its own (an owned guard), not the thread's.
    pub(crate) owned: bool,
    /// Another thread may cancel the wait.
    pub(crate) cancel: Option<Cancel>,
    /// Who waits: a thread, or a task.
    pub(crate) park: Park,
}

impl Want {
    /// What `options` ask for, for an owner of its own (`owned`) or the
    /// thread's, waited for as `park` says.
    pub(crate) fn of(options: &crate::options::LockOptions, owned: bool, park: Park) -> Self {
        let common = options.common();
        Want {
            kind: options.kind(),
            lease: common.lease,
            fenced: options.is_fenced(),
            owned,
            cancel: common.cancel.clone(),
            park,
        }
    }

    /// What `options` ask for of permits (each permit has an owner of its
    /// own), waited for as `park` says.
    pub(crate) fn of_permits(options: &crate::options::SemaphoreOptions, park: Park) -> Self {
        let common = options.common();
        Want {
            kind: Kind::Plain,
            lease: common.lease,
            fenced: false,
            owned: true,
            cancel: common.cancel.clone(),
            park,
        }
    }
}

/// How the hold of an acquisition was taken (for [`Waiting::held`]).
pub(crate) enum Taken<'t> {
    /// By an attempt (or a grant) of the wait loop.
    Attempt(Got<Option<u64>>),
    /// The same, in a turn of the plain lock's in-process queue.
    Turn(Turn<'t>, Got<Option<u64>>),
    /// Handed over in-process by a release of this client, sent at the
    /// instant given, with the token minted for it.
    HandedOver(Instant, Option<u64>),
}

/// One acquisition of any kind at Redis, for the wait loop.
pub(crate) struct Waiting<'a> {
    raw: &'a Arc<Raw>,
    name: &'a str,
    kind: Kind,
    /// The lock's Redis key.
    pub(crate) key: String,
    owner: String,
    lease: Duration,
    /// Asked for a fencing token.
    fenced: bool,
    /// Guards of this owner alive in the client (0: a count Redis still
    /// shows for it is stale).
    alive: u32,
    fence: Fence,
    /// Plain, fair: this wait's place in the line of waiting clients (the
    /// mark of its fair queue entry).
    place: Option<String>,
    /// Plain: this wait's element in the line (`protocol::element`), as the
    /// last attempt's reply gave it; the next attempt confirms it.
    element: Option<String>,
    /// Plain: the wait takes a place in line once the lock is found held.
    join: bool,
    /// Plain: attempts sent with the current place.
    sent_with_place: u32,
    /// Plain: a later attempt found our place new again (granted or dropped
    /// since): a grant naming it may predate our last attempt, so attempts
    /// take grants from then on (a delayed grant made two holders: found by
    /// the protocol simulator, docs/verification.md).
    stale_grants: bool,
    /// The watchdog renews the lease (no explicit lease).
    watchdog: bool,
    /// Plain: the last attempt found the lock held by another library's
    /// client, which only publishes the unlock message when it lets go.
    foreign: bool,
    /// What each round trip may take (a bounded wait's deadline).
    bound: Bound,
    /// Who waits: a thread, or a task (round trips on the I/O threads).
    park: Park,
}

impl Raw {
    /// Starts an acquisition of lock `name` as `want` says, waiting until
    /// `deadline` at the latest (`None`: as long as it takes).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an empty or overlong name, a lease of
    /// zero or over the limit, a fencing token asked of a read/write lock.
    pub(crate) fn waiting<'a>(
        self: &'a Arc<Self>,
        name: &'a str,
        want: &Want,
        deadline: Option<Instant>,
    ) -> Result<Waiting<'a>> {
        check_name(name)?;
        if let Some(lease) = want.lease {
            check_lease("lease", lease)?;
        }
        if want.fenced && matches!(want.kind, Kind::Read | Kind::Write) {
            return Err(Error::invalid(
                "fencing tokens are for exclusive locks (plain or fair); a read/write lock has none",
            ));
        }
        let key = self.key(name);
        let owner = if want.owned {
            self.unique_owner()
        } else {
            self.owner()
        };
        // Plain: set from the in-process queue's turn.
        let alive = self
            .ledger
            .holds(&key, &protocol::hold_field(want.kind, &owner))
            .0;
        Ok(Waiting {
            raw: self,
            name,
            kind: want.kind,
            key,
            owner,
            lease: want.lease.unwrap_or(self.watchdog_lease),
            fenced: want.fenced,
            alive,
            fence: if want.fenced {
                Fence::Mint
            } else {
                Fence::None
            },
            place: None,
            element: None,
            join: false,
            sent_with_place: 0,
            stale_grants: false,
            watchdog: want.lease.is_none(),
            foreign: false,
            // A bounded wait's round trips end by its deadline; a single
            // try's (a deadline already passed) take the socket timeout.
            bound: Bound::until(deadline.filter(|d| *d > Instant::now())),
            park: want.park,
        })
    }
}

impl<'a> Waiting<'a> {
    /// Whether a lost reply of this client may have left something to undo
    /// first (see [`settle`](Self::settle)).
    pub(crate) fn unsettled(&self) -> bool {
        self.raw.orphans.any()
    }

    /// Undoes what a lost reply of this owner on this key may have left
    /// (before anything else: also before a hold handed over in-process,
    /// which sends no attempt).
    pub(crate) async fn settle(&self) -> Result<()> {
        if !self.unsettled() {
            return Ok(());
        }
        let (raw, bound) = (Arc::clone(self.raw), self.bound);
        let (key, owner) = (self.key.clone(), self.owner.clone());
        let settle = move || {
            raw.orphans
                .settle(&key, &owner, bound.end, |o| raw.undo(o, bound))
        };
        self.raw.io(self.park, settle).await?
    }

    /// What a hold handed over to this acquisition in-process leaves to
    /// undo when nobody takes it up.
    fn handed_over(&self) -> Orphan {
        let (key, owner) = (&self.key, &self.owner);
        Orphan::lost(self.kind, key, owner, self.lease, None, Instant::now())
    }

    /// A new place in line (or fair queue mark) for this wait.
    fn new_place(&mut self) {
        self.place = Some(self.raw.next_place(&self.owner, self.lease, self.fenced));
        self.element = None;
        self.sent_with_place = 0;
        self.stale_grants = false;
    }

    /// Whether this kind waits in the client's in-process queue first (a
    /// plain lock: one thread per client and name talks to Redis).
    pub(crate) fn queues_in_process(&self) -> bool {
        self.kind == Kind::Plain
    }

    /// Takes a turn in the in-process queue (see `ledger::Ledger::enter`).
    pub(crate) fn enter<'w>(
        &'w self,
        deadline: Option<Instant>,
        cancel: Option<&'w Cancel>,
    ) -> impl std::future::Future<Output = Enter<'a>> + 'w {
        self.raw.ledger.enter(
            self.park,
            &self.key,
            &self.owner,
            self.lease,
            self.fenced,
            deadline,
            cancel,
            // A task's wait dropped as a hold was handed to it: undone right
            // away on an I/O thread, else by the client's undo thread (told
            // later whether the hand-over may still be on its way).
            || -> Undo {
                let (raw, orphan) = (Arc::clone(self.raw), self.handed_over());
                Box::new(move |in_flight| raw.forsake(orphan, in_flight))
            },
        )
    }

    /// Gave up while a release handed it the lock in-process: what that
    /// gave it in Redis is undone, owner-checked, once Redis answers (and
    /// before this owner's next acquire of the key).
    pub(crate) fn abandoned(&self) {
        self.raw.orphaned(self.handed_over());
    }

    /// Before the loop, for a wait until `deadline`: a fair waiter marks
    /// its queue entry with a place, so a release can grant it the lock
    /// directly; a single try does not wait for a grant.
    pub(crate) fn take_place(&mut self, deadline: Option<Instant>) {
        if self.kind == Kind::Fair && deadline.is_none_or(|d| d > Instant::now()) {
            self.new_place();
        }
    }

    /// The turn of the in-process queue decides: whether the owner has
    /// guards alive here (`alive`) and the token of its holds. A waiter
    /// takes a place in the line of waiting clients; a single try (a
    /// `deadline` passed) leaves none. Already subscribed (`subscribed`: a
    /// busy name), the first attempt takes it; otherwise the attempt after
    /// subscribing does (the loop retries then anyway), so an uncontended
    /// lock makes no place at all.
    pub(crate) fn begin_turn(
        &mut self,
        turn: &Turn<'_>,
        subscribed: bool,
        deadline: Option<Instant>,
    ) {
        self.alive = turn.alive;
        self.fence = match (self.fenced, turn.fence) {
            (false, _) => Fence::None,
            (true, Some(_)) => Fence::Keep,
            (true, None) => Fence::Mint,
        };
        self.join = deadline.is_none_or(|d| d > Instant::now());
        if self.join && subscribed {
            self.new_place();
        }
    }

    /// The one acquire ending: the hold taken (`taken`) recorded in the
    /// ledger — a reentrant hold shares its owner's lease and token, a
    /// watchdog lease is registered with the renewal thread once — as the
    /// hold a guard keeps.
    pub(crate) fn held(self, taken: Taken<'_>) -> Hold {
        let raw = self.raw;
        let (sent_at, set, minted) = match &taken {
            Taken::Attempt(got) | Taken::Turn(_, got) => (got.sent_at, got.lease, got.held),
            Taken::HandedOver(at, fence) => (*at, self.lease, *fence),
        };
        let in_line = !matches!(taken, Taken::Attempt(_));
        let (key, owner, lease, watchdog) = (&self.key, &self.owner, self.lease, self.watchdog);
        let field = protocol::hold_field(self.kind, owner).into_owned();
        let timeouts = (self.kind == Kind::Read).then(|| timeout_prefix(key, owner));
        let timeouts = timeouts.as_deref();
        let meter = self.kind.meter_kind();
        let mut new_state =
            || raw.new_state(key, &field, lease, watchdog, sent_at, set, timeouts, meter);
        let new = NewHold {
            renewed: watchdog,
            until: sent_at + set,
            minted,
            new_state: &mut new_state,
        };
        let added = match taken {
            Taken::Attempt(_) => raw.ledger.add(key, &field, new),
            Taken::Turn(turn, _) => turn.acquired(new),
            Taken::HandedOver(..) => raw.ledger.take_up(key, owner, new),
        };
        if let Some(replaced) = &added.replaced {
            // Lost: the thread sends it no more, so `cancel` names no
            // batch to wait out.
            let _ = raw.renewer.cancel(replaced, true);
        }
        Hold {
            name: self.name.to_owned(),
            key: self.key,
            field,
            lease,
            kind: self.kind,
            // A reentrant fenced hold returns the token it already has.
            fence: added.fence.filter(|_| self.fenced),
            state: added.state,
            renewed: watchdog,
            generation: added.generation,
            in_line,
        }
    }
}

impl LockKind for Waiting<'_> {
    /// The fencing token the attempt minted, if any.
    type Held = Option<u64>;

    async fn attempt(&mut self) -> Result<Answer<Option<u64>>> {
        // A waiter is named to operators too (its registration is kept
        // written while it waits; two atomics).
        self.raw.touch(Instant::now(), self.lease);
        // What a lost reply of this owner on this key may have left is
        // undone first (a retry after a lost reply).
        self.settle().await?;
        let first_with_place = self.sent_with_place == 0;
        if self.place.is_some() {
            self.sent_with_place += 1;
        }
        let attempt = self
            .raw
            .attempt(self.park, self.name, &self.request(), self.bound)
            .await;
        if let (Err(_), Kind::Plain, Some(place)) = (&attempt, self.kind, &self.place) {
            // The attempt may have run and rewritten our element: the next
            // one names it as unknown, and the script finds it by its place.
            self.element = Some(protocol::element(0, place));
        }
        match attempt? {
            Attempt::Acquired { minted } => Ok(Answer::Held(minted)),
            Attempt::Wait {
                hint,
                foreign,
                joined,
                until,
            } => {
                self.foreign = foreign;
                if let (Some(until), Some(place)) = (until, &self.place) {
                    self.element = Some(protocol::element(until, place));
                }
                if joined && !first_with_place {
                    self.stale_grants = true;
                }
                if self.join && self.place.is_none() {
                    // Plain: the next attempt takes a place in line.
                    self.new_place();
                }
                // A holder that died without unlocking costs at most its
                // lease: wake when it would have expired (+1 ms for PTTL's
                // rounding) — or earlier, to confirm a waiting place.
                let place = self.holds_place();
                let cap = self.raw.wait_cap(hint, self.kind, self.lease, place);
                Ok(Answer::Wait(cap + Duration::from_millis(1)))
            }
            Attempt::Upgrade => Err(Error::UpgradeWouldDeadlock {
                name: self.name.to_owned(),
            }),
            Attempt::NotALock(what) => Err(super::not_a_lock(&self.key, what)),
        }
    }

    async fn undo(&mut self, _minted: Option<u64>) {
        let _ = self.raw.io(self.park, self.giving_back(false)).await;
    }

    fn lease(&self) -> Duration {
        self.lease
    }

    fn channels(&self) -> Channels {
        Channels {
            channel: protocol::wait_channel(self.kind, &self.key, &self.owner),
            line: (self.kind == Kind::Plain)
                .then(|| (self.key.clone(), self.raw.grant_channel(&self.key))),
            unlock: self.hears_unlock(),
            claims: false,
        }
    }

    /// Plain: a waiter in line is granted the lock (or told to try again)
    /// on its grant channel by a leasehold holder's release; it needs the
    /// unlock channel only while another library holds the lock — or when
    /// it has no place in line.
    fn hears_unlock(&self) -> bool {
        self.kind != Kind::Plain || self.foreign || self.place.is_none()
    }

    /// A grant names this wait's place: held at once with the grant's short
    /// lease (renewal lengthens it) and the token minted for it — unless the
    /// hold must be taken as asked by an attempt: an explicit lease (its own
    /// length), a fenced hold the grant brought no token for, replica
    /// acknowledgement (`WAIT` after the acquire), or a re-entry (guards of
    /// the owner alive here: a grant sets one hold, the attempt counts them
    /// all, so their releases count down to this one).
    fn granted(&mut self, grant: &[u8]) -> Option<Granted<Option<u64>>> {
        let (place, token) = protocol::parse_grant(grant)?;
        if Some(place) != self.place.as_deref() {
            return None;
        }
        let fenced = self.fenced;
        let direct = self.watchdog
            && self.alive == 0
            && !self.stale_grants
            && self.raw.replicas.is_none()
            && (token.is_some() || !fenced);
        Some(if direct {
            Granted::Held(token.filter(|_| fenced), protocol::grant_lease(self.lease))
        } else {
            Granted::Accept
        })
    }

    fn wake(&self) -> Wake {
        match self.kind {
            Kind::Read | Kind::Write => Wake::OneOrAll,
            Kind::Plain | Kind::Fair => Wake::One,
        }
    }

    fn holds_place(&self) -> bool {
        match self.kind {
            Kind::Plain => self.place.is_some(),
            kind => protocol::place_lease(kind, self.lease).is_some(),
        }
    }

    fn leave(&mut self, heard: bool) {
        // An undo thread's undo gives back a whole hold: only for an owner
        // with no guard alive here (else one count, sent now). A re-entry
        // leaves inline even after an unanswered call, though on a silent
        // Redis that waits out the socket timeout past the deadline: the
        // leave tells a grant to it by owner, not by place, so sent in the
        // background it could land after this owner's next acquire of the
        // key and give back a count of that new hold (its guards would then
        // outnumber the counts in Redis, and the last release would free
        // the lock under a live guard).
        if heard || self.alive > 0 {
            self.raw.detach(self.park, self.giving_back(true));
        } else {
            let (kind, place) = (self.kind, self.place.as_deref());
            let lost = Orphan::lost(
                kind,
                &self.key,
                &self.owner,
                self.lease,
                place,
                Instant::now(),
            );
            self.raw.orphaned(lost);
        }
    }
}

impl Waiting<'_> {
    /// The job that gives back what this wait took at Redis: its hold (an
    /// undo), or (`leave`) its waiting place (the line's, fair queue,
    /// waiting writers) — and a plain lock granted to us meanwhile (passed
    /// on). Its bound is its own, not the wait's (which may have passed: cut
    /// by it, nothing would be sent). A leave not sent (out of time, no
    /// connection) or not answered is done in the background once Redis
    /// answers (and before this owner's next acquire of the key) — or the
    /// place expires by itself first.
    fn giving_back(&self, leave: bool) -> impl FnOnce() + Send + 'static {
        let (raw, kind, fresh) = (Arc::clone(self.raw), self.kind, self.alive == 0);
        let (key, owner) = (self.key.clone(), self.owner.clone());
        let (place, lease) = (self.place.clone(), self.lease);
        move || {
            let (bound, sent_at, place) = (raw.give_back(), Instant::now(), place.as_deref());
            if leave {
                match raw.leave_place(kind, &key, &owner, place, bound) {
                    (Ok(true), _) => {} // granted as we gave up: passed on below
                    (Ok(false), _) => return,
                    (Err(e), sent) => {
                        tracing::debug!(key = %key, error = ?e, "leasehold: leaving a waiters' place failed; leaving it once redis answers");
                        if !sent || e.is_unanswered() {
                            raw.orphaned(Orphan::lost(kind, &key, &owner, lease, place, sent_at));
                        }
                        return;
                    }
                }
            }
            let _ = raw.undo_hold(kind, &key, &owner, fresh, bound);
        }
    }

    /// This acquisition's attempt as the protocol takes it.
    fn request(&self) -> Request<'_> {
        Request {
            kind: self.kind,
            key: &self.key,
            owner: &self.owner,
            lease: self.lease,
            alive: self.alive,
            fence: self.fence,
            place: self.element.as_deref().or(self.place.as_deref()),
        }
    }
}
