//! The client's registration: a small hash `<prefix>leasehold_client:<uuid>`
//! saying who the client is (host, pid, its `client_name`, the library's
//! version, when it started), so an operator's `inspect` can turn an owner
//! `<uuid>:<n>` into "billing-worker-3 on host-a, pid 4242, thread n".
//!
//! The renewal thread writes it — never the lock path, so an uncontended
//! lock + unlock stays two round trips — while the client is active: while
//! it renews any lease, and until the end of the longest lease it took or
//! asked for (explicit leases included; each attempt and acquire says so
//! with [`Activity::touch`], two atomics), so waiters are named too. It expires [`TTL`] after the thread last wrote it, so a
//! killed process's registration goes away by itself.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// How long a registration lives unless written again; it is written
/// again every third of this while the client is active.
pub(crate) const TTL: Duration = Duration::from_secs(6);

/// Who the client is, and where that is written.
#[derive(Debug, Clone)]
pub(crate) struct Registration {
    /// `<prefix>leasehold_client:<uuid>`.
    pub(crate) key: String,
    /// host, pid, name, version, started (unix ms).
    pub(crate) fields: Vec<(&'static str, String)>,
}

impl Registration {
    /// The registration of client `id` under `key_prefix`, named `name`.
    pub(crate) fn new(key_prefix: &str, id: &uuid::Uuid, name: Option<&str>) -> Self {
        let started = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        let mut fields = vec![
            ("host", host_name().to_owned()),
            ("pid", std::process::id().to_string()),
            ("version", crate::VERSION.to_owned()),
            ("started", started.to_string()),
        ];
        if let Some(name) = name {
            fields.push(("name", name.to_owned()));
        }
        Registration {
            key: crate::names::client_key(key_prefix, &id.to_string()),
            fields,
        }
    }

    /// The commands that write it (`HSET`, `PEXPIRE`), for a pipeline.
    pub(crate) fn write(&self, pipe: &mut redis::Pipeline) {
        for cmd in self.commands() {
            pipe.add_command(cmd).ignore();
        }
    }

    /// The commands that write it, one by one (riding on a renewal round).
    pub(crate) fn commands(&self) -> [redis::Cmd; 2] {
        let mut hset = redis::cmd("HSET");
        hset.arg(&self.key);
        for (field, value) in &self.fields {
            hset.arg(*field).arg(value);
        }
        let mut pexpire = redis::cmd("PEXPIRE");
        pexpire.arg(&self.key).arg(crate::protocol::millis(TTL));
        [hset, pexpire]
    }
}

/// The host's name: the kernel's (Linux), `HOSTNAME` / `COMPUTERNAME`, or
/// `unknown` — read once per process (as ShedLock's `Utils.getHostname`):
/// every client's registration and every scheduled job's run name it.
pub(crate) fn host_name() -> &'static str {
    static HOST: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    HOST.get_or_init(|| {
        std::fs::read_to_string("/proc/sys/kernel/hostname")
            .ok()
            .map(|h| h.trim().to_owned())
            .filter(|h| !h.is_empty())
            .or_else(|| std::env::var("HOSTNAME").ok())
            .or_else(|| std::env::var("COMPUTERNAME").ok())
            .unwrap_or_else(|| "unknown".to_owned())
    })
}

/// What the lock path tells the renewal thread (ms since `base`).
pub(crate) struct Activity {
    base: Instant,
    /// The client holds or may hold something until then.
    active_until: AtomicU64,
    /// The registration in Redis is fresh (written less than a third of
    /// [`TTL`] ago) until then.
    fresh_until: AtomicU64,
    /// A wake-up for the registration is on its way to the thread.
    wake_sent: AtomicBool,
    /// Writes that failed in a row (the registration's node not
    /// answering): each waits twice as long before the next.
    failures: AtomicU32,
}

impl Activity {
    pub(crate) fn new() -> Self {
        Activity {
            base: Instant::now(),
            active_until: AtomicU64::new(0),
            fresh_until: AtomicU64::new(0),
            wake_sent: AtomicBool::new(false),
            failures: AtomicU32::new(0),
        }
    }

    fn ms(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.base).as_millis()).unwrap_or(u64::MAX)
    }

    fn instant(&self, ms: u64) -> Instant {
        self.base + Duration::from_millis(ms)
    }

    /// A lock was taken at `now` with `lease`: the client is active until
    /// the lease (at least [`TTL`]) ends. True when the thread should be
    /// woken to write the registration (once until it did).
    pub(crate) fn touch(&self, now: Instant, lease: Duration) -> bool {
        let now_ms = self.ms(now);
        let until =
            now_ms.saturating_add(u64::try_from(lease.max(TTL).as_millis()).unwrap_or(u64::MAX));
        self.active_until.fetch_max(until, Ordering::Relaxed);
        now_ms >= self.fresh_until.load(Ordering::Relaxed)
            && !self.wake_sent.swap(true, Ordering::AcqRel)
    }

    /// When the thread should write the registration next (`None`: not
    /// active, or while it renews leases: `renewing` keeps it active).
    pub(crate) fn due(&self, now: Instant, renewing: bool) -> Option<Instant> {
        let active = renewing || self.ms(now) < self.active_until.load(Ordering::Relaxed);
        active.then(|| self.instant(self.fresh_until.load(Ordering::Relaxed)))
    }

    /// Whether the registration was never written yet (nor tried): a new
    /// client's first is written at once, not left to a round.
    pub(crate) fn never_written(&self) -> bool {
        self.fresh_until.load(Ordering::Relaxed) == 0
    }

    /// The registration's write ended at `at`: written (the next a third
    /// of [`TTL`] later), or failed — tried again a second later, twice
    /// that after each failure in a row, at most [`TTL`]: a node that does
    /// not answer holds the thread a socket timeout each time, and the
    /// leases it renews on the other nodes must not wait behind it most
    /// of the time.
    pub(crate) fn written(&self, at: Instant, ok: bool) {
        let wait = if ok {
            self.failures.store(0, Ordering::Relaxed);
            TTL / 3
        } else {
            let failed = self.failures.fetch_add(1, Ordering::Relaxed).min(16);
            Duration::from_secs(1u64 << failed).min(TTL)
        };
        let next = at + wait;
        self.fresh_until.store(self.ms(next), Ordering::Relaxed);
        self.wake_sent.store(false, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lock_path_wakes_the_thread_once_until_it_wrote() {
        let a = Activity::new();
        let now = Instant::now();
        assert_eq!(a.due(now, false), None, "idle: nothing to write");
        assert!(a.touch(now, Duration::from_millis(100)));
        assert!(!a.touch(now, Duration::from_millis(100)), "one wake-up");
        assert!(a.due(now, false).is_some_and(|d| d <= now));
        a.written(now, true);
        assert!(!a.touch(now + Duration::from_secs(1), Duration::from_secs(60)));
        // Active until the 60 s lease ends, written every TTL / 3.
        assert_eq!(
            a.due(now, false),
            Some(now + TTL / 3).map(|d| a.instant(a.ms(d)))
        );
        assert!(a.due(now + Duration::from_secs(59), false).is_some());
        assert_eq!(a.due(now + Duration::from_secs(62), false), None);
        assert!(
            a.due(now + Duration::from_secs(62), true).is_some(),
            "renewing"
        );
    }

    #[test]
    fn the_registration_says_who_and_where() {
        let id = uuid::Uuid::nil();
        let r = Registration::new("billing:", &id, Some("worker-3"));
        assert_eq!(r.key, format!("billing:leasehold_client:{id}"));
        let field = |f: &str| {
            r.fields
                .iter()
                .find(|(k, _)| *k == f)
                .map(|(_, v)| v.clone())
        };
        assert_eq!(field("pid"), Some(std::process::id().to_string()));
        assert_eq!(field("name").as_deref(), Some("worker-3"));
        assert!(field("host").is_some_and(|h| !h.is_empty()));
    }

    /// A registration whose node does not answer is tried again a second
    /// after the failed write ended, then twice as long each time (at most
    /// the TTL): the thread is not held by it round after round.
    #[test]
    fn failed_writes_are_tried_again_later_and_later() {
        let a = Activity::new();
        let now = Instant::now();
        assert!(a.touch(now, Duration::from_secs(60)));
        // To the millisecond the activity keeps.
        let after = |ended: Instant| {
            let d = a.due(ended, false).unwrap() - ended;
            Duration::from_millis(((d.as_micros() + 500) / 1_000) as u64)
        };
        a.written(now, false);
        assert_eq!(after(now), Duration::from_secs(1));
        a.written(now, false);
        assert_eq!(after(now), Duration::from_secs(2));
        a.written(now, false);
        assert_eq!(after(now), Duration::from_secs(4));
        a.written(now, false);
        assert_eq!(after(now), TTL);
        a.written(now, true);
        assert_eq!(after(now), TTL / 3);
        a.written(now, false);
        assert_eq!(after(now), Duration::from_secs(1), "counted anew");
    }
}
