//! [`Pending`]: one client's background work still under way — a dropped
//! guard's or permit's release, a dropped wait's leave or undo — counted,
//! so that the client's last handle (or its `close`) can see it through
//! before the program ends: a short program whose guard is dropped as
//! `main` returns must not leave its lock held for a whole lease.

use std::sync::Arc;
use std::time::Instant;

use crate::sync::Mutex;

use super::{Park, Signal};

/// Jobs under way, and the signal their end is told on.
#[derive(Default)]
pub(crate) struct Pending {
    jobs: Mutex<usize>,
    idle: Signal,
}

/// One job under way: counted until it is dropped.
pub(crate) struct Job(Arc<Pending>);

impl Drop for Job {
    fn drop(&mut self) {
        let mut jobs = self.0.jobs.lock();
        *jobs = jobs.saturating_sub(1);
        if *jobs == 0 {
            self.0.idle.notify_all();
        }
    }
}

impl Pending {
    /// A job starts; it is under way until the returned [`Job`] drops.
    pub(crate) fn start(self: &Arc<Self>) -> Job {
        *self.jobs.lock() += 1;
        Job(Arc::clone(self))
    }

    /// Waits (a thread blocks, a task parks) until no job is under way, or
    /// `until`; whether none is.
    pub(crate) async fn idle(&self, park: Park, until: Instant) -> bool {
        self.idle
            .wait(park, &self.jobs, Some(until), |jobs| {
                (*jobs == 0).then_some(())
            })
            .await
            .is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::park::block_on;
    use std::time::Duration;

    #[test]
    fn idle_once_every_job_ended_or_at_the_bound() {
        let pending = Arc::new(Pending::default());
        let soon = || Instant::now() + Duration::from_millis(20);
        assert!(block_on(pending.idle(Park::Thread, soon())));
        let (a, b) = (pending.start(), pending.start());
        assert!(
            !block_on(pending.idle(Park::Thread, soon())),
            "two under way"
        );
        drop(a);
        let waiter = {
            let pending = Arc::clone(&pending);
            std::thread::spawn(move || {
                block_on(pending.idle(Park::Thread, Instant::now() + Duration::from_secs(30)))
            })
        };
        std::thread::sleep(Duration::from_millis(20));
        drop(b);
        assert!(waiter.join().unwrap(), "woken when the last one ended");
    }
}
