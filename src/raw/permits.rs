//! A semaphore's permits at the raw layer: one acquisition as the wait loop
//! drives it ([`PermitWaiting`], a [`LockKind`]: its attempt, grants, place
//! in line and leave), the hold a permit guard keeps ([`PermitHold`]) and
//! its one release path, and the semaphore's other calls (set and add
//! permits, the count available, an operator's read).
//!
//! An acquisition draws its permit ids once (16 bytes each, see
//! [`permit_id`]) and sends the same ids with every
//! attempt and with its place in line, so an attempt sent twice takes
//! nothing twice, a grant gives the permits the waiter already knows, and
//! the leave that ends a wait without permits gives back whatever a lost
//! reply or a late grant gave it — by id, so never anyone else's.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{not_held, Answer, Channels, Got, Granted, LockKind, Orphan, Raw, Undoing, Wake, Want};
use crate::conn::{Bound, MakeForsaken};
use crate::error::{Error, Result};
use crate::names::SemaphoreKeys;
use crate::options::{check_lease, check_name, Kind};
use crate::park::Park;
use crate::protocol::semaphore::{self, Acquire, State, MAX_PERMITS_AT_ONCE};
use crate::protocol::{self, Reply};
use crate::renewal::LeaseState;

/// One acquisition of permits, for the wait loop.
pub(crate) struct PermitWaiting<'a> {
    raw: &'a Arc<Raw>,
    name: &'a str,
    /// The semaphore's keys: its line (its subscription is named after it)
    /// and channel (Redisson's) among them.
    pub(crate) keys: Arc<SemaphoreKeys>,
    permits: u32,
    /// The ids of the permits asked for (16 bytes each), fixed for the
    /// whole acquisition.
    ids: Arc<[u8]>,
    /// The acquisition's own owner (`<client id>:<n>`), which its place in
    /// line names.
    owner: String,
    lease: Duration,
    /// The watchdog renews the permits (no explicit lease).
    watchdog: bool,
    /// This wait's place in line, once it waits.
    place: Option<String>,
    /// Attempts sent with the current place, and whether a later one found
    /// it new again (see `raw::waiting`'s `stale_grants`).
    sent_with_place: u32,
    stale_grants: bool,
    /// Whether the wait may take a place (not a single try).
    join: bool,
    /// An attempt went out and no answer came: it may have taken the
    /// permits or a place; the next attempt finds them, and a wait that
    /// ends without them — or is dropped — leaves (gives them back).
    unsettled: bool,
    /// What each attempt may take (a bounded wait's deadline).
    bound: Bound,
    park: Park,
}

/// The permits a permit guard holds.
#[derive(Clone)]
pub(crate) struct PermitHold {
    /// The semaphore name as the caller gave it.
    pub(crate) name: String,
    pub(crate) keys: Arc<SemaphoreKeys>,
    pub(crate) ids: Arc<[u8]>,
    pub(crate) permits: u32,
    /// The lease they were taken with (the watchdog's, or the one given).
    pub(crate) lease: Duration,
    /// Shared with the renewal thread (when renewed).
    pub(crate) state: Arc<LeaseState>,
    /// Whether the watchdog renews them (no explicit lease given).
    pub(crate) renewed: bool,
}

/// The undo of a release of `hold`'s permits sent at `sent_at` whose
/// answer was lost: they are given back by id until Redis answers (at
/// least a second after it was sent).
fn permits_orphan(hold: &PermitHold, sent_at: Instant) -> Orphan {
    // Its name among lost calls: its first permit id (unique).
    let owner = crate::names::hex(&hold.ids[..hold.ids.len().min(16)]);
    let (keys, ids) = (&hold.keys, &hold.ids);
    let lost = Orphan::lost_permits(keys, ids, &owner, Duration::ZERO, None, sent_at);
    let until = hold
        .state
        .valid_until()
        .max(sent_at + Duration::from_secs(1));
    Orphan { until, ..lost }
}

/// The mark in bytes 8 and 9 of a leasehold permit id (see [`permit_id`]).
const PERMIT_MARK: [u8; 2] = [0x1e, 0xa5];

/// A new permit id of client `client`: the first 8 bytes of the client's
/// id (its UUID version, 8, among them), [`PERMIT_MARK`], then 6 random
/// bytes — so an operator sees which client took a permit, and a Redisson
/// permit (16 random bytes) passes for ours once in about a million.
pub(crate) fn permit_id(client: &uuid::Uuid) -> [u8; 16] {
    let mut id = [0; 16];
    id[..8].copy_from_slice(&client.as_bytes()[..8]);
    id[8..10].copy_from_slice(&PERMIT_MARK);
    id[10..].copy_from_slice(&uuid::Uuid::new_v4().as_bytes()[..6]);
    id
}

/// The client prefix of a leasehold permit id (the first 8 bytes of its
/// client's id), `None` for another library's.
pub(crate) fn permit_client(id: &[u8]) -> Option<&[u8]> {
    (id.len() == 16 && id[6] >> 4 == 8 && id[8..10] == PERMIT_MARK).then(|| &id[..8])
}

impl Raw {
    /// Starts an acquisition of `permits` permits of semaphore `name` as
    /// `want` says (its lease, cancel handle, who waits), waiting until
    /// `deadline` at the latest (`None`: as long as it takes).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an empty or overlong name, no permits
    /// or too many at once, a lease of zero or over the limit, or a lock's
    /// option (a fencing token, a lock kind).
    pub(crate) fn permit_waiting<'a>(
        self: &'a Arc<Self>,
        name: &'a str,
        permits: u32,
        want: &Want,
        deadline: Option<Instant>,
    ) -> Result<PermitWaiting<'a>> {
        check_name(name)?;
        if permits == 0 || permits > MAX_PERMITS_AT_ONCE {
            return Err(Error::invalid(format_args!(
                "asked for {permits} permits at once; ask for 1 to {MAX_PERMITS_AT_ONCE}"
            )));
        }
        if let Some(lease) = want.lease {
            check_lease("lease", lease)?;
        }
        let mut ids = Vec::with_capacity(16 * permits as usize);
        for _ in 0..permits {
            ids.extend_from_slice(&permit_id(&self.id));
        }
        Ok(PermitWaiting {
            raw: self,
            name,
            keys: Arc::new(SemaphoreKeys::of(&self.key(name))),
            permits,
            ids: ids.into(),
            owner: self.unique_owner(),
            lease: want.lease.unwrap_or(self.watchdog_lease),
            watchdog: want.lease.is_none(),
            place: None,
            join: deadline.is_none_or(|d| d > Instant::now()),
            sent_with_place: 0,
            stale_grants: false,
            unsettled: false,
            bound: Bound::until(deadline.filter(|d| *d > Instant::now())),
            park: want.park,
        })
    }

    /// Gives back the permits of `hold`, for `park`'s caller, within
    /// `bound`: renewal stops first (and a task waiting for their loss
    /// stops waiting). A task's future dropped before the answer came
    /// leaves the release to the background (by id, until Redis answers).
    ///
    /// # Errors
    /// [`Error::NotHeld`] when one of them was no longer ours (its lease ran
    /// out, or it was removed): they were given back all the same;
    /// [`Error::ReleasePending`] when the release was sent and not answered
    /// (sent again in the background).
    pub(crate) async fn release_permits(
        self: &Arc<Self>,
        park: Park,
        hold: &PermitHold,
        bound: Bound,
    ) -> Result<()> {
        let in_flight = self.renewer.cancel(&hold.state, hold.renewed);
        hold.state.released();
        let call = self
            .scripts()
            .semaphore()
            .release_call(&hold.keys, &hold.ids);
        let settled = || self.forsaken(permits_orphan(hold, Instant::now()), Undoing::Release);
        self.renewal_settled(park, in_flight, Some(&settled as MakeForsaken<'_>))
            .await;
        let sent_at = Instant::now();
        let forsaken = || self.forsaken(permits_orphan(hold, sent_at), Undoing::Release);
        let read = |r: Reply| semaphore::release_reply(r.value);
        let ran = self
            .conns
            .call(park, &hold.keys.counter, bound, call, read, Some(&forsaken))
            .await;
        let released = match ran {
            // Failed transiently (its reply lost, refused, Redis down): sent
            // again in the background until Redis answers or the lease
            // would have ended, as a lock's last release is.
            (Err(e), _) if e.is_transient() => {
                let (orphan, until) = (permits_orphan(hold, sent_at), hold.state.valid_until());
                return Err(self.release_pending(&hold.name, orphan, until, e));
            }
            (ran, _) => ran?,
        };
        if released.alive < hold.permits {
            return Err(not_held(&hold.name, &hold.state));
        }
        Ok(())
    }

    /// One call of semaphore `name`'s scripts on the node serving it.
    fn on_semaphore<T>(
        &self,
        name: &str,
        mut call: impl FnMut(
            &semaphore::SemaphoreScripts,
            &mut dyn redis::ConnectionLike,
            &SemaphoreKeys,
        ) -> redis::RedisResult<T>,
    ) -> Result<T> {
        check_name(name)?;
        let keys = SemaphoreKeys::of(&self.key(name));
        self.conns.run(&keys.counter, Bound::default(), |con| {
            call(self.scripts().semaphore(), con, &keys)
        })
    }

    /// Sets semaphore `name`'s number of permits (those taken count); with
    /// `only_if_unset`, only when none was set yet (false: it was).
    pub(crate) fn set_permits(&self, name: &str, total: u32, only_if_unset: bool) -> Result<bool> {
        self.on_semaphore(name, |s, con, keys| {
            s.set_permits(con, keys, total, only_if_unset)
        })
    }

    /// Adds `delta` permits to semaphore `name` (negative: takes them
    /// away); the count available after.
    pub(crate) fn add_permits(&self, name: &str, delta: i64) -> Result<i64> {
        self.on_semaphore(name, |s, con, keys| s.add_permits(con, keys, delta))
    }

    /// The permits of semaphore `name` available now, after expired ones
    /// went back (`None`: never set).
    pub(crate) fn available_permits(&self, name: &str) -> Result<Option<i64>> {
        self.on_semaphore(name, |s, con, keys| s.available(con, keys))
    }

    /// An operator's read of semaphore `name`.
    pub(crate) fn inspect_semaphore(&self, name: &str) -> Result<State> {
        self.on_semaphore(name, |s, con, keys| s.inspect(con, keys))
    }

    /// Leaves `place` (if any) and gives back permits `ids` if they were
    /// given to us (by id: never anyone else's), waiting for a connection
    /// no longer than one reply may take; when Redis does not answer, the
    /// undo thread does it once Redis does (the place expires by itself
    /// meanwhile, the permits with their lease).
    fn leave_permits(
        self: &Arc<Self>,
        keys: &Arc<SemaphoreKeys>,
        owner: &str,
        place: Option<&str>,
        ids: &Arc<[u8]>,
        lease: Duration,
    ) {
        let sent_at = Instant::now();
        if let Err(e) = self.leave_permits_once(keys, place, ids, self.give_back()) {
            tracing::debug!(key = %keys.counter, error = ?e, "leasehold: leaving a semaphore's line failed; leaving it once redis answers");
            self.orphaned(Orphan::lost_permits(
                keys, ids, owner, lease, place, sent_at,
            ));
        }
    }

    /// One leave (see [`leave_permits`](Self::leave_permits)) within
    /// `bound`: how many permits a grant had given us.
    pub(super) fn leave_permits_once(
        &self,
        keys: &SemaphoreKeys,
        place: Option<&str>,
        ids: &[u8],
        bound: Bound,
    ) -> Result<u32> {
        self.conns.run(&keys.counter, bound, |con| {
            self.scripts()
                .semaphore()
                .leave(con, keys, place.unwrap_or(""), ids)
        })
    }
}

impl PermitWaiting<'_> {
    /// A place in line for the next attempt (before the loop: a
    /// subscription was resumed, a busy semaphore), unless a single try.
    pub(crate) fn take_place(&mut self) {
        if self.join && self.place.is_none() {
            self.place = Some(self.raw.next_place(&self.owner, self.lease, false));
            self.sent_with_place = 0;
            self.stale_grants = false;
        }
    }

    /// The one acquire ending: the permits as a guard holds them, their
    /// lease registered with the renewal thread unless explicit.
    pub(crate) fn held(mut self, got: Got<()>) -> PermitHold {
        self.unsettled = false;
        let raw = self.raw;
        let state = if self.watchdog {
            raw.renewer.register_permits(
                &self.keys.timeout,
                &self.ids,
                self.lease,
                got.sent_at,
                got.lease,
            )
        } else {
            LeaseState::new(got.sent_at + got.lease)
        };
        raw.touch(got.sent_at, self.lease);
        PermitHold {
            name: self.name.to_owned(),
            keys: Arc::clone(&self.keys),
            ids: Arc::clone(&self.ids),
            permits: self.permits,
            lease: self.lease,
            state,
            renewed: self.watchdog,
        }
    }

    /// The job that leaves `place` and gives back our permits (by id).
    fn leaving(&self, place: Option<String>) -> impl FnOnce() + Send + 'static {
        let (raw, owner, lease) = (Arc::clone(self.raw), self.owner.clone(), self.lease);
        let (keys, ids) = (Arc::clone(&self.keys), Arc::clone(&self.ids));
        move || raw.leave_permits(&keys, &owner, place.as_deref(), &ids, lease)
    }
}

/// A wait that ended without the permits (a deadline, a cancel, an error),
/// or was dropped (a task's future), while an attempt of it may have taken
/// permits (its reply lost): they are given back by the undo thread once
/// Redis answers — not sent from here, where a thread would wait up to the
/// socket timeout for a silent Redis, past its deadline. The loop leaves a
/// place it knows of itself.
impl Drop for PermitWaiting<'_> {
    fn drop(&mut self) {
        if self.unsettled {
            self.leave(false);
        }
    }
}

impl LockKind for PermitWaiting<'_> {
    type Held = ();

    async fn attempt(&mut self) -> Result<Answer<()>> {
        let raw = self.raw;
        raw.touch(Instant::now(), self.lease);
        // Sent where its caller waits (see `conn::transport`). A task's
        // future dropped while it is out: what it took (permits, a place) is
        // given back after its reply, by id.
        let first_with_place = self.sent_with_place == 0;
        if self.place.is_some() {
            self.sent_with_place += 1;
        }
        let (keys, ids, place) = (&self.keys, &self.ids, self.place.as_deref());
        let call = raw
            .scripts()
            .semaphore()
            .acquire_call(keys, self.permits, self.lease, place, ids)
            .then_wait(raw.wait(semaphore::took_permits));
        let forsaken = || {
            let lost = Instant::now();
            let orphan = Orphan::lost_permits(keys, ids, &self.owner, self.lease, place, lost);
            raw.forsaken(orphan, Undoing::Acquire)
        };
        let read = |r: Reply| Ok((semaphore::acquire_reply(r.value)?, r.acked));
        let (park, bound) = (self.park, self.bound);
        let (answer, sent) = raw
            .conns
            .call(park, &keys.counter, bound, call, read, Some(&forsaken))
            .await;
        if sent && answer.as_ref().is_err_and(Error::is_unanswered) {
            self.unsettled = true;
        }
        let (answer, acked) = answer?;
        if let Some(e) = self.raw.unreplicated(self.name, acked) {
            self.undo(()).await;
            return Err(e);
        }
        match answer {
            Acquire::Acquired => {
                self.unsettled = false;
                Ok(Answer::Held(()))
            }
            Acquire::TooMany { total } => {
                self.place = None; // gone with the refusal
                Err(Error::invalid(format_args!(
                    "asked for {} permits of semaphore {:?}, which has {total} in all: it would wait forever; ask for fewer, or raise its permits first",
                    self.permits, self.name
                )))
            }
            Acquire::NotSet => {
                // The place stays ours to leave: a waiter already in line
                // keeps its place there (the script changes nothing), and
                // the wait's end leaves it.
                Err(Error::NoPermits {
                    name: self.name.to_owned(),
                })
            }
            Acquire::Wait { hint, joined, .. } => {
                if joined && !first_with_place {
                    self.stale_grants = true;
                }
                // The next attempt takes a place in line. Permits whose
                // holder died come back when their lease ends: wake then to
                // take them back (+1 ms is in the hint) — or earlier, to
                // confirm our place.
                self.take_place();
                let place = self.place.is_some();
                Ok(Answer::Wait(self.raw.wait_cap(
                    hint,
                    Kind::Plain,
                    self.lease,
                    place,
                )))
            }
        }
    }

    async fn undo(&mut self, _held: ()) {
        let _ = self.raw.io(self.park, self.leaving(None)).await;
    }

    fn lease(&self) -> Duration {
        self.lease
    }

    fn channels(&self) -> Channels {
        let id = self.raw.id.to_string();
        Channels {
            channel: self.keys.channel.clone(),
            line: Some((self.keys.line.clone(), self.keys.grant_channel(&id))),
            unlock: true,
            claims: true,
        }
    }

    /// Redisson's channel is heard always: its clients' releases (and ours
    /// when permits are left over) announce permits there.
    fn hears_unlock(&self) -> bool {
        true
    }

    /// A grant names this wait's place: the permits are ours with the
    /// grant's short lease (renewal lengthens it) — unless the lease is
    /// explicit, replicas must acknowledge, or the grant may predate our
    /// last attempt (`stale_grants`): then an attempt takes them as asked.
    fn granted(&mut self, grant: &[u8]) -> Option<Granted<()>> {
        let place = semaphore::parse_grant(grant)?;
        if Some(place) != self.place.as_deref() {
            return None;
        }
        Some(
            if self.watchdog && !self.stale_grants && self.raw.replicas.is_none() {
                Granted::Held((), protocol::grant_lease(self.lease))
            } else {
                Granted::Accept
            },
        )
    }

    fn wake(&self) -> Wake {
        Wake::Claim
    }

    fn holds_place(&self) -> bool {
        self.place.is_some() || self.unsettled
    }

    /// Also gives back our permits (by id): for a thread inline, for a
    /// task in the background; Redis silent, by the undo thread.
    fn leave(&mut self, heard: bool) {
        self.unsettled = false;
        if heard {
            self.raw.detach(self.park, self.leaving(self.place.clone()));
        } else {
            let (owner, place) = (&self.owner, self.place.as_deref());
            let lost = Orphan::lost_permits(
                &self.keys,
                &self.ids,
                owner,
                self.lease,
                place,
                Instant::now(),
            );
            self.raw.orphaned(lost);
        }
    }

    fn claim(&self) -> Option<&str> {
        self.place.as_deref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_permit_id_names_its_client_and_a_random_one_does_not() {
        let client = crate::names::new_client_id();
        let (a, b) = (permit_id(&client), permit_id(&client));
        assert_ne!(a, b);
        assert_eq!(permit_client(&a), Some(&client.as_bytes()[..8]));
        // Redisson's ids are 16 random bytes (a v4 UUID's bytes here).
        let foreign = (0..1_000)
            .filter(|_| permit_client(uuid::Uuid::new_v4().as_bytes()).is_some())
            .count();
        assert_eq!(foreign, 0);
        assert_eq!(permit_client(&a[..15]), None);
    }
}
