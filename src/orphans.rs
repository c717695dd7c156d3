//! Holds a lost reply may have left behind, and when they are undone.
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
//! undo. [`Holds`] counts the live holds of fair, read and write locks for
//! that (the plain lock's in-process queue knows its own).
//!
//! An undo counts once it has been answered twice in a row: the first answer
//! may come from an undo Redis ran before the lost acquire (both waiting in
//! Redis's buffers while it was paused); the second was sent after Redis had
//! read everything sent before the first answer.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use parking_lot::Mutex;

use crate::error::Result;
use crate::options::Kind;

/// An acquire attempt whose reply was lost: what undoing it takes.
pub(crate) struct Orphan {
    pub(crate) kind: Kind,
    pub(crate) key: String,
    pub(crate) owner: String,
    /// The lease the attempt asked for (what a release refreshes, and how
    /// long its hold can live at most).
    pub(crate) lease: std::time::Duration,
    /// The waiting place the attempt may have taken (plain: in line).
    pub(crate) place: Option<String>,
    /// After this, whatever the attempt took has expired: nothing to undo.
    pub(crate) until: Instant,
}

struct Entry {
    orphan: Orphan,
    /// Undos answered in a row (done at 2).
    answered: Mutex<u8>,
}

/// The orphans of one client, by key and owner.
#[derive(Default)]
pub(crate) struct Orphans {
    /// How many are pending: the acquire path looks at nothing else when
    /// there are none.
    count: AtomicUsize,
    map: Mutex<HashMap<(String, String), Arc<Entry>>>,
}

impl Orphans {
    /// Records `orphan` (replacing an older one of the same owner and key).
    pub(crate) fn add(&self, orphan: Orphan) {
        let id = (orphan.key.clone(), orphan.owner.clone());
        let entry = Arc::new(Entry {
            orphan,
            answered: Mutex::new(0),
        });
        let mut map = self.map.lock();
        if map.insert(id, entry).is_none() {
            self.count.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Whether any orphan is pending.
    pub(crate) fn any(&self) -> bool {
        self.count.load(Ordering::Relaxed) > 0
    }

    /// Before an acquire of `owner` on `key`: undoes its orphan there, if
    /// any, with `undo` (waiting for a background undo in flight). An error
    /// means Redis did not answer; the orphan stays.
    pub(crate) fn settle(
        &self,
        key: &str,
        owner: &str,
        undo: impl Fn(&Orphan) -> Result<()>,
    ) -> Result<()> {
        if !self.any() {
            return Ok(());
        }
        let entry = self
            .map
            .lock()
            .get(&(key.to_owned(), owner.to_owned()))
            .cloned();
        match entry {
            Some(entry) => self.finish(&entry, &undo),
            None => Ok(()),
        }
    }

    /// Undoes every pending orphan once more (the background pass); true
    /// while some remain.
    pub(crate) fn pass(&self, undo: impl Fn(&Orphan) -> Result<()>) -> bool {
        let entries: Vec<Arc<Entry>> = self.map.lock().values().cloned().collect();
        for entry in entries {
            if let Err(e) = self.finish(&entry, &undo) {
                tracing::debug!(key = %entry.orphan.key, error = ?e, "leasehold: undoing a hold whose reply was lost failed; trying again");
            }
        }
        self.any()
    }

    /// Undoes `entry` until answered twice (or expired), then forgets it.
    fn finish(&self, entry: &Arc<Entry>, undo: &impl Fn(&Orphan) -> Result<()>) -> Result<()> {
        let mut answered = entry.answered.lock();
        while *answered < 2 && Instant::now() < entry.orphan.until {
            undo(&entry.orphan)?;
            *answered += 1;
        }
        *answered = 2;
        let id = (entry.orphan.key.clone(), entry.orphan.owner.clone());
        let mut map = self.map.lock();
        if map.get(&id).is_some_and(|e| Arc::ptr_eq(e, entry)) {
            map.remove(&id);
            self.count.fetch_sub(1, Ordering::Relaxed);
        }
        Ok(())
    }
}

/// Live holds of fair, read and write locks in this client, by key and hash
/// field: whether an acquire is its owner's first hold, and a release its
/// last. Looked up without allocating (the acquire and release paths).
#[derive(Default)]
pub(crate) struct Holds {
    map: Mutex<HashMap<String, HashMap<String, u32>>>,
}

impl Holds {
    pub(crate) fn add(&self, key: &str, field: &str) {
        let mut map = self.map.lock();
        let fields = match map.get_mut(key) {
            Some(fields) => fields,
            None => map.entry(key.to_owned()).or_default(),
        };
        match fields.get_mut(field) {
            Some(n) => *n += 1,
            None => {
                fields.insert(field.to_owned(), 1);
            }
        }
    }

    /// One hold fewer; true when it was the field's last.
    pub(crate) fn remove(&self, key: &str, field: &str) -> bool {
        let mut map = self.map.lock();
        let Some(fields) = map.get_mut(key) else {
            return true;
        };
        let last = match fields.get_mut(field) {
            Some(n) if *n > 1 => {
                *n -= 1;
                false
            }
            _ => {
                fields.remove(field);
                true
            }
        };
        if fields.is_empty() {
            map.remove(key);
        }
        last
    }

    /// Whether `field` holds `key` through a live guard of this client.
    pub(crate) fn holds(&self, key: &str, field: &str) -> bool {
        self.map
            .lock()
            .get(key)
            .is_some_and(|fields| fields.contains_key(field))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;
    use std::cell::Cell;
    use std::time::Duration;

    fn orphan(key: &str, owner: &str, until: Instant) -> Orphan {
        Orphan {
            kind: Kind::Plain,
            key: key.into(),
            owner: owner.into(),
            lease: Duration::from_secs(30),
            place: None,
            until,
        }
    }

    fn down() -> Error {
        Error::invalid("redis is down")
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
            .settle("k", "other", |_| {
                sent.set(sent.get() + 1);
                Ok(())
            })
            .unwrap();
        assert_eq!(sent.get(), 0);
        // Redis down: the owner's acquire fails, the orphan stays.
        assert!(orphans.settle("k", "o", |_| Err(down())).is_err());
        assert!(orphans.any());
        // Redis back: answered twice, then forgotten.
        orphans
            .settle("k", "o", |o| {
                assert_eq!(o.key, "k");
                sent.set(sent.get() + 1);
                Ok(())
            })
            .unwrap();
        assert_eq!(sent.get(), 2);
        assert!(!orphans.any());
        orphans
            .settle("k", "o", |_| panic!("nothing left to undo"))
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

    #[test]
    fn holds_count_per_key_and_field() {
        let holds = Holds::default();
        holds.add("k", "o");
        holds.add("k", "o");
        assert!(!holds.remove("k", "o"), "one hold remains");
        assert!(holds.holds("k", "o"));
        assert!(!holds.holds("k", "o:write"));
        assert!(holds.remove("k", "o"), "the last");
        assert!(!holds.holds("k", "o"));
    }
}
