//! Calls whose reply was lost — an acquire, a release, leaving a waiting
//! place — and their undo, done by a thread of this client that holds only
//! a `Weak` to it.
//!
//! An acquire whose reply never came (a socket timeout, a connection that
//! broke mid-call) may still have run in Redis: the lock is then held by an
//! owner that does not know it — every other waiter would lose up to a whole
//! lease, and the same owner's next lock + unlock would leave a count behind
//! (fair, read and write locks count holds in Redis). Such an attempt becomes
//! an [`Orphan`]: its owner-checked undo (leave the waiting place, release
//! the hold) runs as soon as Redis answers — in the background, and before
//! any later acquire of the same owner and key (which then sends it itself,
//! waiting for a background undo in flight), so an undo can never land after
//! a later, real hold of that owner.
//!
//! Only a *first* hold is ever orphaned: an owner that already holds the
//! lock in this client (a reentrant acquire) would lose its real hold to an
//! undo (the ledger says which acquire is a first hold).
//!
//! An undo counts once it has been answered twice in a row: the first answer
//! may come from an undo Redis ran before the lost acquire (both waiting in
//! Redis's buffers while it was paused); the second was sent after Redis had
//! read everything sent before the first answer.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::Raw;
use crate::conn::{Bound, Forsaken, MakeForsaken, Outcome};
use crate::error::{Error, Result};
use crate::names::SemaphoreKeys;
use crate::options::Kind;
use crate::park::Park;
use crate::protocol::LONGEST_PLACE;
use crate::renewal::InFlight;

/// What a call whose caller went away is (see [`Raw::forsaken`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Undoing {
    /// An acquire (of a first hold, of permits): what it took is undone.
    Acquire,
    /// A release: it must reach Redis.
    Release,
}

/// How often the background undo of lost calls tries again.
const UNDO_RETRY: Duration = Duration::from_millis(100);

/// A call whose reply was lost (an acquire attempt, a release, leaving a
/// waiting place): what undoing it takes.
pub(crate) struct Orphan {
    pub(crate) kind: Kind,
    pub(crate) key: String,
    pub(crate) owner: String,
    /// The waiting place the call may have taken (plain: in line).
    pub(crate) place: Option<String>,
    /// After this, whatever the call took has expired: nothing to undo.
    pub(crate) until: Instant,
    /// A semaphore's acquisition (its key is the counter, its owner the
    /// acquisition's): undone by leaving its place and giving back its
    /// permits by id.
    pub(crate) permits: Option<LostPermits>,
    /// A scheduled job's take or end (its key is the job's lock, its owner
    /// the run's value): undone by the job's owner-checked end.
    pub(crate) job: Option<LostJob>,
}

/// What the undo of a scheduled job's lost take or end needs.
pub(crate) struct LostJob {
    /// The job's run history key.
    pub(crate) history: String,
    /// Until when the lock is to be kept (the rest of `lock_at_least_for`;
    /// a take's undo: none).
    pub(crate) keep_until: Instant,
}

/// What a semaphore acquisition's undo needs: the semaphore's keys and the
/// ids of the permits it asked for.
pub(crate) struct LostPermits {
    pub(crate) keys: Arc<SemaphoreKeys>,
    pub(crate) ids: Arc<[u8]>,
}

impl Orphan {
    /// A call of `kind` by `owner` on `key`, sent at `sent_at`, whose reply
    /// was lost: what it may have taken lives at most its lease or a waiting
    /// place's life (and a second for the clocks).
    pub(crate) fn lost(
        kind: Kind,
        key: &str,
        owner: &str,
        lease: Duration,
        place: Option<&str>,
        sent_at: Instant,
    ) -> Self {
        Orphan {
            kind,
            key: key.to_owned(),
            owner: owner.to_owned(),
            place: place.map(str::to_owned),
            until: sent_at + lease.max(LONGEST_PLACE) + Duration::from_secs(1),
            permits: None,
            job: None,
        }
    }

    /// A scheduled job's take or end by the run `value` of lock `key`,
    /// sent at `sent_at`, whose reply was lost: the lock lives at most
    /// `lease` from then.
    pub(crate) fn lost_job(
        key: &str,
        value: &str,
        lease: Duration,
        job: LostJob,
        sent_at: Instant,
    ) -> Self {
        Orphan {
            job: Some(job),
            ..Orphan::lost(Kind::Plain, key, value, lease, None, sent_at)
        }
    }

    /// A semaphore acquisition of `owner` (permits `ids` of semaphore
    /// `keys`, `lease`, `place` in line) whose call's reply was lost, sent
    /// at `sent_at`.
    pub(crate) fn lost_permits(
        keys: &Arc<SemaphoreKeys>,
        ids: &Arc<[u8]>,
        owner: &str,
        lease: Duration,
        place: Option<&str>,
        sent_at: Instant,
    ) -> Self {
        let mut orphan = Orphan::lost(Kind::Plain, &keys.counter, owner, lease, place, sent_at);
        orphan.permits = Some(LostPermits {
            keys: Arc::clone(keys),
            ids: Arc::clone(ids),
        });
        orphan
    }
}

struct Entry {
    orphan: Orphan,
    /// Undos answered in a row (done at 2).
    answered: Mutex<u8>,
}

/// A key and an owner.
type OwnerOfKey = (String, String);

/// The orphans of one client, by key and owner — one per lock kind (a
/// thread may read and write one read/write lock, and lose both).
#[derive(Default)]
pub(crate) struct Orphans {
    /// How many are pending: the acquire path looks at nothing else when
    /// there are none.
    count: AtomicUsize,
    map: Mutex<HashMap<OwnerOfKey, Vec<Arc<Entry>>>>,
}

impl Orphans {
    /// Records `orphan`, replacing an older one of the same owner, key and
    /// kind (undoing the newer undoes both) — unless an undo of that one
    /// is in flight: then both stay, so the owner's next acquire waits for
    /// it, and none of it lands after that acquire's hold.
    pub(crate) fn add(&self, orphan: Orphan) {
        let id = (orphan.key.clone(), orphan.owner.clone());
        let kind = orphan.kind;
        let entry = Arc::new(Entry {
            orphan,
            answered: Mutex::new(0),
        });
        let mut map = self.map.lock();
        let entries = map.entry(id).or_default();
        // Idle: its lock free (`finish` looks again, under the map's lock,
        // before each undo it sends).
        let idle = entries
            .iter_mut()
            .find(|e| e.orphan.kind == kind && e.answered.try_lock().is_some());
        match idle {
            Some(old) => *old = entry,
            None => {
                entries.push(entry);
                self.count.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Whether `entry` is still pending (not replaced by a newer one).
    fn pending(&self, entry: &Arc<Entry>) -> bool {
        let id = (entry.orphan.key.clone(), entry.orphan.owner.clone());
        self.map
            .lock()
            .get(&id)
            .is_some_and(|entries| entries.iter().any(|e| Arc::ptr_eq(e, entry)))
    }

    /// Whether any orphan is pending.
    pub(crate) fn any(&self) -> bool {
        self.count.load(Ordering::Relaxed) > 0
    }

    /// Before an acquire of `owner` on `key`: undoes its orphans there, if
    /// any, with `undo` — waiting for a background undo in flight, but not
    /// past `end` (then a timeout, as Redis not answering in time). An
    /// error means Redis did not answer; the orphans stay.
    pub(crate) fn settle(
        &self,
        key: &str,
        owner: &str,
        end: Option<Instant>,
        undo: impl Fn(&Orphan) -> Result<()>,
    ) -> Result<()> {
        if !self.any() {
            return Ok(());
        }
        let entries = self
            .map
            .lock()
            .get(&(key.to_owned(), owner.to_owned()))
            .cloned()
            .unwrap_or_default();
        for entry in entries {
            self.finish(&entry, end, &undo)?;
        }
        Ok(())
    }

    /// Undoes every pending orphan once more (the background pass); true
    /// while some remain.
    pub(crate) fn pass(&self, undo: impl Fn(&Orphan) -> Result<()>) -> bool {
        let entries: Vec<Arc<Entry>> = self.map.lock().values().flatten().cloned().collect();
        for entry in entries {
            if let Err(e) = self.finish(&entry, None, &undo) {
                tracing::debug!(key = %entry.orphan.key, error = ?e, "leasehold: undoing a call whose reply was lost failed; trying again");
            }
        }
        self.any()
    }

    /// Undoes `entry` until answered twice (or expired), then forgets it;
    /// waits for an undo of it in flight no longer than `end`.
    fn finish(
        &self,
        entry: &Arc<Entry>,
        end: Option<Instant>,
        undo: &impl Fn(&Orphan) -> Result<()>,
    ) -> Result<()> {
        let mut answered = match end {
            None => entry.answered.lock(),
            Some(end) => entry
                .answered
                .try_lock_until(end)
                .ok_or_else(still_undoing)?,
        };
        // Replaced meanwhile (taken by a pass before): the newer one's
        // undo undoes it, and only that one is waited for.
        while *answered < 2 && Instant::now() < entry.orphan.until && self.pending(entry) {
            undo(&entry.orphan)?;
            *answered += 1;
        }
        *answered = 2;
        let id = (entry.orphan.key.clone(), entry.orphan.owner.clone());
        let mut map = self.map.lock();
        if let Some(entries) = map.get_mut(&id) {
            let before = entries.len();
            entries.retain(|e| !Arc::ptr_eq(e, entry));
            if entries.len() < before {
                self.count.fetch_sub(1, Ordering::Relaxed);
            }
            if entries.is_empty() {
                map.remove(&id);
            }
        }
        Ok(())
    }
}

/// What a call that ran out of time waiting for a background undo of the
/// same owner's lost reply says: Redis did not answer it in time.
fn still_undoing() -> Error {
    Error::TimedOut {
        addr: String::new(),
        timeout: Duration::ZERO,
        by_deadline: true,
        source: redis::RedisError::from(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "an earlier lost reply of this owner is still being undone",
        ))
        .into(),
    }
}

impl Raw {
    /// A call whose reply was lost (an acquire, a release, leaving a
    /// place): undone in the background as soon as Redis answers (and
    /// before the owner's next acquire of the key). The thread that does it
    /// holds only a `Weak` to the client: it ends with the client.
    pub(crate) fn orphaned(self: &Arc<Self>, orphan: Orphan) {
        tracing::debug!(key = %orphan.key, "leasehold: a reply was lost; undoing what the call may have done once redis answers");
        self.orphans.add(orphan);
        let mut undoing = self.undoing.lock();
        if *undoing {
            return;
        }
        let weak = Arc::downgrade(self);
        let spawned = std::thread::Builder::new()
            .name("leasehold-undo".into())
            .spawn(move || loop {
                // A first pass at once: a reply lost to a slow moment (a
                // last try cut short by its deadline) is undone, and the
                // place its waiter left behind freed, a round trip later.
                {
                    let Some(raw) = weak.upgrade() else {
                        return; // the client is gone; what is left expires
                    };
                    if !raw.orphans.pass(|o| raw.undo(o, Bound::default())) {
                        let mut undoing = raw.undoing.lock();
                        if !raw.orphans.any() {
                            *undoing = false;
                            return;
                        }
                    }
                }
                std::thread::sleep(UNDO_RETRY);
            });
        match spawned {
            Ok(_) => *undoing = true,
            // The owner's next acquire still undoes it; otherwise it expires.
            Err(e) => {
                tracing::warn!(error = %e, "leasehold: cannot start the thread that undoes lost calls")
            }
        }
    }

    /// A task's wait dropped with a call of it out (its reply in hand), or
    /// with a hand-over to it (`in_flight`: its script may not have run
    /// yet): undone at once on an I/O thread, owner-checked — and, where
    /// it may still be on its way or Redis does not answer, again by the
    /// undo thread, as a lost reply is.
    pub(crate) fn forsake(self: &Arc<Self>, orphan: Orphan, in_flight: bool) {
        let raw = Arc::clone(self);
        self.detach(Park::Task, move || {
            let undone = raw.undo(&orphan, Bound::default());
            if in_flight || undone.is_err() {
                raw.orphaned(orphan);
            }
        });
    }

    /// Waits out the renewal batch `in_flight` (see `Renewer::settled`)
    /// before a release is sent: a thread blocks, a task parks. A task's
    /// future dropped meanwhile leaves the release to `forsaken`'s hook,
    /// as one dropped before its call was sent (the hook sends it in the
    /// background).
    pub(crate) async fn renewal_settled(
        &self,
        park: Park,
        in_flight: InFlight,
        forsaken: Option<MakeForsaken<'_>>,
    ) {
        if !in_flight.is_some() {
            return;
        }
        let mut unsent = Unsent(forsaken);
        self.renewer.settled(park, in_flight).await;
        unsent.0 = None;
    }

    /// What a call leaves to undo when its caller's future is dropped while
    /// it is out — the one hook of every operation, run by the transport
    /// once the call's outcome is known (see `conn::Outcome`): an acquire
    /// (`Undoing::Acquire`) that ran is undone at once, owner-checked (what
    /// it took: a hold, permits, a place); a release (`Undoing::Release`)
    /// that was not sent is sent in the background; and either one whose
    /// answer never came is undone as a lost reply is, until Redis answers.
    pub(crate) fn forsaken(self: &Arc<Self>, orphan: Orphan, undoing: Undoing) -> Forsaken {
        let raw = Arc::clone(self);
        Box::new(move |outcome| match (undoing, outcome) {
            (_, Outcome::Unknown) | (Undoing::Release, Outcome::NotSent) => raw.orphaned(orphan),
            (Undoing::Acquire, Outcome::Ran) => raw.forsake(orphan, false),
            (Undoing::Acquire, Outcome::NotSent) | (Undoing::Release, Outcome::Ran) => {}
        })
    }

    /// One owner-checked undo of a lost call, within `bound`: leave its
    /// waiting place, release whatever hold it took or kept (all of the
    /// owner's: it has no other here).
    pub(super) fn undo(&self, o: &Orphan, bound: Bound) -> Result<()> {
        if let Some(j) = &o.job {
            let keep = j.keep_until.saturating_duration_since(Instant::now());
            self.undo_job(&o.key, &j.history, &o.owner, keep, bound)?;
            tracing::debug!(key = %o.key, "leasehold: undid a scheduled job's call whose reply was lost");
            return Ok(());
        }
        if let Some(p) = &o.permits {
            let given = self.leave_permits_once(&p.keys, o.place.as_deref(), &p.ids, bound)?;
            tracing::debug!(key = %o.key, given, "leasehold: undid a semaphore call whose reply was lost");
            return Ok(());
        }
        let granted = self
            .leave_place(o.kind, &o.key, &o.owner, o.place.as_deref(), bound)
            .0?;
        let released = self.undo_hold(o.kind, &o.key, &o.owner, true, bound)?;
        tracing::debug!(key = %o.key, ?released, granted, "leasehold: undid a call whose reply was lost");
        Ok(())
    }
}

/// A release not sent yet: dropped with its hook still in it (its future
/// dropped while waiting), the hook is told nothing was sent.
struct Unsent<'a>(Option<MakeForsaken<'a>>);

impl Drop for Unsent<'_> {
    fn drop(&mut self) {
        if let Some(make) = self.0.take() {
            make()(Outcome::NotSent);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;
    use std::cell::Cell;

    fn orphan(key: &str, owner: &str, until: Instant) -> Orphan {
        let lost = Orphan::lost(Kind::Plain, key, owner, Duration::ZERO, None, until);
        Orphan { until, ..lost }
    }

    #[test]
    fn an_owners_orphans_of_two_kinds_are_both_undone() {
        let orphans = Orphans::default();
        let later = Instant::now() + Duration::from_secs(30);
        let mut read = orphan("k", "o", later);
        read.kind = Kind::Read;
        let mut write = orphan("k", "o", later);
        write.kind = Kind::Write;
        orphans.add(read);
        orphans.add(write);
        let undone = Mutex::new(Vec::new());
        orphans
            .settle("k", "o", None, |o| {
                undone.lock().push(o.kind);
                Ok(())
            })
            .unwrap();
        let undone = undone.into_inner();
        assert!(
            undone.contains(&Kind::Read) && undone.contains(&Kind::Write),
            "{undone:?}"
        );
        assert!(!orphans.any());
    }

    #[test]
    fn settling_waits_for_an_undo_in_flight_no_longer_than_the_end() {
        let orphans = Arc::new(Orphans::default());
        orphans.add(orphan("k", "o", Instant::now() + Duration::from_secs(30)));
        let (started_tx, started_rx) = std::sync::mpsc::channel();
        let background = {
            let orphans = Arc::clone(&orphans);
            std::thread::spawn(move || {
                orphans.pass(|_| {
                    started_tx.send(()).unwrap();
                    std::thread::sleep(Duration::from_millis(500)); // Redis hangs
                    Err(down())
                })
            })
        };
        started_rx.recv().unwrap();
        let started = Instant::now();
        let end = started + Duration::from_millis(50);
        let e = orphans.settle("k", "o", Some(end), |_| Ok(())).unwrap_err();
        assert!(
            started.elapsed() < Duration::from_millis(300),
            "{:?}",
            started.elapsed()
        );
        assert!(e.is_timeout() && e.is_transient(), "{e:?}");
        background.join().unwrap();
    }

    fn down() -> Error {
        Error::invalid("redis is down")
    }

    #[test]
    fn a_newer_orphan_never_lets_an_undo_in_flight_land_after_the_owners_next_acquire() {
        // The background undoes orphan `a` (an acquire's lost reply), Redis
        // silent; meanwhile the same owner's wait ends and leaves its place
        // the same way (`b`, same key and kind). The owner's next acquire
        // settles what is pending: it must wait for `a`'s undo in flight —
        // an undo of `a` after that acquire would delete its real hold.
        let orphans = Arc::new(Orphans::default());
        let later = Instant::now() + Duration::from_secs(30);
        let mut a = orphan("k", "o", later);
        a.place = Some("a".into());
        orphans.add(a);
        let log = Arc::new(Mutex::new(Vec::new()));
        let (in_flight_tx, in_flight_rx) = std::sync::mpsc::channel();
        let (answer_tx, answer_rx) = std::sync::mpsc::channel::<()>();
        let background = {
            let (orphans, log) = (Arc::clone(&orphans), Arc::clone(&log));
            std::thread::spawn(move || {
                let answer = Mutex::new(answer_rx);
                orphans.pass(|o| {
                    if o.place.as_deref() == Some("a") && log.lock().is_empty() {
                        in_flight_tx.send(()).unwrap();
                        answer.lock().recv().unwrap(); // Redis paused
                    }
                    log.lock()
                        .push(format!("undo {}", o.place.as_deref().unwrap_or("")));
                    Ok(())
                })
            })
        };
        in_flight_rx.recv().unwrap();
        let mut b = orphan("k", "o", later);
        b.place = Some("b".into());
        orphans.add(b);
        let settled = {
            let (orphans, log) = (Arc::clone(&orphans), Arc::clone(&log));
            std::thread::spawn(move || {
                let end = Instant::now() + Duration::from_secs(10);
                orphans
                    .settle("k", "o", Some(end), |o| {
                        log.lock()
                            .push(format!("settle {}", o.place.as_deref().unwrap_or("")));
                        Ok(())
                    })
                    .unwrap();
                log.lock().push("acquire".into());
            })
        };
        // A settle that does not wait for `a` is done long before this.
        std::thread::sleep(Duration::from_millis(200));
        answer_tx.send(()).unwrap(); // Redis answers again
        settled.join().unwrap();
        background.join().unwrap();
        let log = log.lock().clone();
        let acquired = log.iter().position(|l| l == "acquire").unwrap();
        assert!(
            log[acquired..].iter().all(|l| l != "undo a"),
            "an undo of `a` after the acquire: {log:?}"
        );
        assert!(!orphans.any(), "{log:?}");
    }

    #[test]
    fn an_undo_counts_once_answered_twice_and_a_failure_keeps_the_orphan() {
        let orphans = Orphans::default();
        let later = Instant::now() + Duration::from_secs(30);
        orphans.add(orphan("k", "o", later));
        assert!(orphans.any());
        // Another owner's acquire sends nothing.
        let sent = Cell::new(0);
        orphans
            .settle("k", "other", None, |_| {
                sent.set(sent.get() + 1);
                Ok(())
            })
            .unwrap();
        assert_eq!(sent.get(), 0);
        // Redis down: the owner's acquire fails, the orphan stays.
        assert!(orphans.settle("k", "o", None, |_| Err(down())).is_err());
        assert!(orphans.any());
        // Redis back: answered twice, then forgotten.
        orphans
            .settle("k", "o", None, |o| {
                assert_eq!(o.key, "k");
                sent.set(sent.get() + 1);
                Ok(())
            })
            .unwrap();
        assert_eq!(sent.get(), 2);
        assert!(!orphans.any());
        orphans
            .settle("k", "o", None, |_| panic!("nothing left to undo"))
            .unwrap();
    }

    #[test]
    fn the_background_pass_undoes_all_and_an_expired_orphan_needs_nothing() {
        let orphans = Orphans::default();
        let later = Instant::now() + Duration::from_secs(30);
        orphans.add(orphan("a", "o", later));
        orphans.add(orphan("b", "o", later));
        orphans.add(orphan("c", "o", Instant::now()));
        let sent = Cell::new(0);
        assert!(orphans.pass(|o| {
            if o.key == "b" {
                return Err(down());
            }
            assert_ne!(o.key, "c", "expired: nothing to undo");
            sent.set(sent.get() + 1);
            Ok(())
        }));
        assert_eq!(sent.get(), 2);
        assert!(!orphans.pass(|_| Ok(())), "b undone on the next pass");
    }
}
