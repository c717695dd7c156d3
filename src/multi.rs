//! `lock_all`: several names at once, every one or none — taken one by one
//! in one canonical order (the names sorted), so two callers that want the
//! same names, in whatever order they list them, can never hold one each
//! and wait for the other's (the deadlock Redisson's `MultiLock` has). A
//! bounded wait has one deadline for all; a wait that ends without every
//! name gives back those it took. The guard ([`MultiLockGuard`]) holds one
//! owned hold per name (each renewed by the client's renewal thread) and
//! releases them all. Thin: each name is the plain lock path's own.

use std::fmt;
use std::time::{Duration, Instant};

use crate::client::LockClient;
use crate::error::{Error, Result};
use crate::guard::OwnedLockGuard;
use crate::options::{check_name, deadline_after, LockOptions};
use crate::renewal::LeaseWatch;

/// The holds of several names, taken together by
/// [`LockClient::lock_all`]; dropping it releases every one.
///
/// `Send` and not reentrant, as an [`OwnedLockGuard`] (each name has a hold
/// of its own owner). Each lease is renewed while the guard lives; a lease
/// lost is reported by [`lost`](Self::lost) and [`is_held`](Self::is_held).
#[must_use = "if unused the locks are released at once"]
#[clippy::has_significant_drop]
pub struct MultiLockGuard {
    /// In the canonical order they were taken.
    guards: Vec<OwnedLockGuard>,
    /// The lost signal of every hold, made at the first `lost()`.
    watch: std::sync::OnceLock<LeaseWatch>,
}

impl MultiLockGuard {
    /// The names held, in the order they were taken (sorted).
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.guards.iter().map(OwnedLockGuard::name)
    }

    /// The Redis key of each name, in the same order.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.guards.iter().map(OwnedLockGuard::key)
    }

    /// Until when every lease is known to be ours: the earliest of the
    /// holds' [`valid_until`](OwnedLockGuard::valid_until); `None` once one is not
    /// held.
    pub fn valid_until(&self) -> Option<Instant> {
        let ends = self.guards.iter().map(OwnedLockGuard::valid_until);
        ends.min().flatten().filter(|_| self.is_held())
    }

    /// How long every lease is known to last from now (see
    /// [`valid_until`](Self::valid_until)); zero once one is not held.
    pub fn remaining(&self) -> Duration {
        crate::options::left_until(self.valid_until())
    }

    /// The guard of each name, in the order they were taken: its fencing
    /// token, lease and loss signal.
    pub fn guards(&self) -> &[OwnedLockGuard] {
        &self.guards
    }

    /// Whether every lease is still ours, as far as this client knows.
    pub fn is_held(&self) -> bool {
        self.guards.iter().all(OwnedLockGuard::is_held)
    }

    /// The lease-lost signal of every hold (see [`LeaseWatch`]): lost when
    /// any of them is.
    pub fn lost(&self) -> LeaseWatch {
        let all = || LeaseWatch::all(self.guards.iter().map(OwnedLockGuard::lost));
        self.watch.get_or_init(all).clone()
    }

    /// Releases every hold (in the reverse order), checking each was still
    /// ours.
    ///
    /// # Errors
    /// The first error of a release (as [`OwnedLockGuard::unlock`]); the
    /// other holds are released all the same.
    pub fn unlock(mut self) -> Result<()> {
        let mut first = Ok(());
        while let Some(guard) = self.guards.pop() {
            first = first.and(guard.unlock());
        }
        first
    }
}

impl Drop for MultiLockGuard {
    fn drop(&mut self) {
        self.guards.drain(..).rev().for_each(drop);
    }
}

impl fmt::Debug for MultiLockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MultiLockGuard")
            .field("names", &self.names().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

/// A bounded `lock_all` that ran out: [`Error::WaitTimedOut`] naming
/// every name.
pub(crate) fn timed_out<S: AsRef<str>>(names: &[S], waited: Option<Duration>) -> Error {
    Error::WaitTimedOut {
        name: names
            .iter()
            .map(AsRef::as_ref)
            .collect::<Vec<_>>()
            .join(", "),
        waited: waited.unwrap_or_default(),
    }
}

/// The names in the one order every caller takes them: sorted, each once.
///
/// # Errors
/// [`Error::InvalidArgument`] for no name at all or a name the lock path
/// refuses (empty, too long).
pub(crate) fn canonical<S: AsRef<str>>(names: &[S]) -> Result<Vec<&str>> {
    let mut sorted: Vec<&str> = names.iter().map(AsRef::as_ref).collect();
    if sorted.is_empty() {
        return Err(Error::invalid("lock_all needs at least one name"));
    }
    for name in &sorted {
        check_name(name)?;
    }
    sorted.sort_unstable();
    sorted.dedup();
    Ok(sorted)
}

impl LockClient {
    /// Takes every lock in `names` — waiting as long as it takes — or none:
    /// a transfer that needs `acct:1` and `acct:2`. The names are taken in
    /// one order whatever order they are given in (sorted), so two callers
    /// wanting the same names cannot deadlock; names on different cluster
    /// nodes work. Each hold has an owner of its own (not reentrant).
    ///
    /// ```no_run
    /// # fn main() -> Result<(), leasehold::Error> {
    /// let client = leasehold::LockClient::new("redis://127.0.0.1/")?;
    /// let both = client.lock_all(&["acct:2", "acct:1"])?; // takes acct:1, then acct:2
    /// // … move money from one to the other …
    /// both.unlock()?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`lock`](Self::lock); [`Error::InvalidArgument`] for no name.
    /// Whatever error ends the wait, the names taken so far are released.
    pub fn lock_all<S: AsRef<str>>(&self, names: &[S]) -> Result<MultiLockGuard> {
        self.lock_all_with(names, LockOptions::new())
    }

    /// [`lock_all`](Self::lock_all) waiting at most `wait` for all of them:
    /// `None` when the wait ran out, and then none of them is held.
    ///
    /// # Errors
    /// As [`lock_all`](Self::lock_all).
    pub fn try_lock_all_for<S: AsRef<str>>(
        &self,
        names: &[S],
        wait: Duration,
    ) -> Result<Option<MultiLockGuard>> {
        self.take_all(names, &LockOptions::new(), Some(deadline_after(wait)))
    }

    /// One attempt at every name of `names` (in the canonical order): the
    /// guard, or `None` when one of them is held elsewhere — and then none
    /// of them is held.
    ///
    /// # Errors
    /// As [`lock_all`](Self::lock_all).
    pub fn try_lock_all<S: AsRef<str>>(&self, names: &[S]) -> Result<Option<MultiLockGuard>> {
        self.take_all(names, &LockOptions::new(), Some(Instant::now()))
    }

    /// [`lock_all`](Self::lock_all) waiting until `deadline` for all of
    /// them: `None` when it passed, and then none of them is held.
    ///
    /// # Errors
    /// As [`lock_all`](Self::lock_all).
    pub fn try_lock_all_until<S: AsRef<str>>(
        &self,
        names: &[S],
        deadline: Instant,
    ) -> Result<Option<MultiLockGuard>> {
        self.take_all(names, &LockOptions::new(), Some(deadline))
    }

    /// [`lock_all_with`](Self::lock_all_with), but `None` when the wait
    /// runs out; without [`LockOptions::wait`] one attempt at every name.
    ///
    /// # Errors
    /// As [`lock_all_with`](Self::lock_all_with).
    pub fn try_lock_all_with<S: AsRef<str>>(
        &self,
        names: &[S],
        options: LockOptions,
    ) -> Result<Option<MultiLockGuard>> {
        let wait = options.wait_time().unwrap_or_default();
        self.take_all(names, &options, Some(deadline_after(wait)))
    }

    /// [`lock_all`](Self::lock_all) with options for every name: the kind
    /// (fair, read, write), fencing, an explicit lease, a bounded wait for
    /// all of them together (running out is [`Error::WaitTimedOut`]), a
    /// cancel handle. An explicit lease counts from when each name was
    /// taken: one that ran out while a later name was waited for is never
    /// returned — everything is given back and the names taken again, so
    /// give a lease that outlasts the wait for the others (after three
    /// sets whose holds ran out, [`Error::LeaseExpiredOnArrival`]; past
    /// the wait's deadline, as it running out).
    ///
    /// # Errors
    /// As [`lock_with`](Self::lock_with).
    pub fn lock_all_with<S: AsRef<str>>(
        &self,
        names: &[S],
        options: LockOptions,
    ) -> Result<MultiLockGuard> {
        let waited = options.wait_time();
        let all = self.take_all(names, &options, waited.map(deadline_after))?;
        all.ok_or_else(|| timed_out(names, waited))
    }

    /// Every name in the canonical order until `deadline` (one for all);
    /// `None` when it passed — what was taken is released by the drop. A
    /// hold that is no longer ours by the time the last name is taken (an
    /// explicit lease that ran out while a later name was waited for) is
    /// never returned: everything is given back and taken again — while the
    /// deadline allows, and at most [`SETS_MAX`] times (see [`complete`]).
    fn take_all<S: AsRef<str>>(
        &self,
        names: &[S],
        options: &LockOptions,
        deadline: Option<Instant>,
    ) -> Result<Option<MultiLockGuard>> {
        let names = canonical(names)?;
        for tries in 1.. {
            let started = Instant::now();
            let mut all = MultiLockGuard {
                watch: std::sync::OnceLock::new(),
                guards: Vec::with_capacity(names.len()),
            };
            for name in &names {
                match self.take(name, options.clone(), deadline)? {
                    Some(guard) => all.guards.push(guard),
                    None => return Ok(None),
                }
            }
            let holds = all.guards.iter().map(|g| (g.name(), g.is_held()));
            match complete(holds, options, started, tries, deadline)? {
                Set::Held => return Ok(Some(all)),
                Set::TimedOut => return Ok(None),
                Set::Again => {}
            }
        }
        Ok(None)
    }
}

/// Sets taken whose holds ran out before a `lock_all` gives up.
pub(crate) const SETS_MAX: u32 = 3;

/// What a `lock_all` does with a complete set of holds (see [`complete`]).
pub(crate) enum Set {
    /// Every hold is ours: the set is returned.
    Held,
    /// A hold ran out, and the deadline passed: `None`.
    TimedOut,
    /// A hold ran out: the set is given back (dropped) and taken again.
    Again,
}

/// A set of holds `(name, held)` was complete, taken from `started` (try
/// `tries`): held, or — a hold's explicit lease ran out while a later name
/// was waited for — taken again while the deadline allows;
/// [`Error::LeaseExpiredOnArrival`] after [`SETS_MAX`] sets (a lease too
/// short to cover taking the names would never do). Both faces' one rule.
pub(crate) fn complete<'g>(
    holds: impl IntoIterator<Item = (&'g str, bool)>,
    options: &LockOptions,
    started: Instant,
    tries: u32,
    deadline: Option<Instant>,
) -> Result<Set> {
    let Some((name, _)) = holds.into_iter().find(|(_, held)| !held) else {
        return Ok(Set::Held);
    };
    if deadline.is_some_and(|d| d <= Instant::now()) {
        return Ok(Set::TimedOut);
    }
    if tries >= SETS_MAX {
        return Err(Error::LeaseExpiredOnArrival {
            name: name.to_owned(),
            lease: options.lease_time().unwrap_or_default(),
            round_trip: started.elapsed(),
            tries,
        });
    }
    tracing::debug!(lock = %name, "leasehold: a hold ran out while lock_all waited for the others; taking them all again");
    Ok(Set::Again)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_taken_sorted_and_once() {
        assert_eq!(
            canonical(&["b", "a", "c", "a"]).unwrap(),
            vec!["a", "b", "c"]
        );
        let empty: [&str; 0] = [];
        assert!(canonical(&empty).unwrap_err().is_invalid_argument());
        assert!(canonical(&["a", ""]).unwrap_err().is_invalid_argument());
    }

    #[test]
    fn the_guard_is_send() {
        fn send<T: Send + 'static>() {}
        send::<MultiLockGuard>();
    }
}
