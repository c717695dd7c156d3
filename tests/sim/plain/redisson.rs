//! Redisson's clients in the exclusive-lock simulation: its `RLock` and
//! `RFairLock` acquire and release and its renewal, played from the scripts
//! `tests/support/redisson.rs` carries (Redisson's own; its renewal from
//! `RedissonBaseLock`). On the plain lock it waits on the unlock channel —
//! beside leasehold's clients, which hear that channel too while another
//! library holds the lock, and whose releases leave the lock to other
//! libraries' waiters now and then (`PUBSUB NUMSUB` counts them: the
//! simulation declares who listens); on the fair lock it waits in the same
//! queue (its place unmarked, its timeout chained in 300 s steps, each of
//! its acquires taking 300 s off every timeout) on its own channel.

use super::*;
use crate::support::redisson::{ACQUIRE, FAIR_ACQUIRE, FAIR_RELEASE, RELEASE};

/// Redisson's `RLock` renewal (`RedissonBaseLock.renewExpirationAsync`):
/// the lease set again while the owner's field is there. KEYS: lock. ARGV:
/// lease ms, owner.
const RENEW: &str = "if (redis.call('hexists', KEYS[1], ARGV[2]) == 1) then \
    redis.call('pexpire', KEYS[1], ARGV[1]); return 1; end; return 0;";

/// Redisson's scripts beside the library's.
pub(super) fn add_scripts(scripts: &mut Scripts) {
    scripts.insert("redisson acquire", ACQUIRE.to_owned());
    scripts.insert("redisson release", RELEASE.to_owned());
    scripts.insert("redisson fair acquire", FAIR_ACQUIRE.to_owned());
    scripts.insert("redisson fair release", FAIR_RELEASE.to_owned());
    scripts.insert("redisson renew", RENEW.to_owned());
}

impl Sim {
    /// Redisson client `c`'s script of `op`, as Redisson sends it.
    pub(super) fn run_redisson(&mut self, c: usize, op: &Op) -> Result<Reply, String> {
        // Redisson's fair lock sends its wall clock (the servers' here).
        let clock = (self.w.start_ms + self.w.now()).to_string();
        let fair = self.cfg.lock == Lock::Fair;
        let cl = &mut self.clients[c];
        let (lease, owner) = (cl.lease.to_string(), cl.owner.clone());
        let (name, keys, argv) = match op {
            Op::Acquire { .. } if fair => (
                "redisson fair acquire",
                [KEY, QUEUE, TIMEOUTS].map(String::from).to_vec(),
                vec![lease, owner, "300000".into(), clock],
            ),
            Op::Release if fair => {
                cl.unlocks += 1;
                let latch = format!("redisson_unlock_latch:{{job}}:{}-{}", cl.id, cl.unlocks);
                let keys = [KEY, QUEUE, TIMEOUTS, CHANNEL, &latch].map(String::from);
                let argv = ["0", &lease, &owner, &clock, "publish", "3000"].map(String::from);
                ("redisson fair release", keys.to_vec(), argv.to_vec())
            }
            Op::Acquire { .. } => ("redisson acquire", vec![KEY.to_owned()], vec![lease, owner]),
            Op::Renew => ("redisson renew", vec![KEY.to_owned()], vec![lease, owner]),
            Op::Release => {
                // A request id of its own per unlock (Redisson's unlock
                // latch: a repeated one would answer the earlier unlock).
                cl.unlocks += 1;
                let latch = format!("redisson_unlock_latch:{{job}}:{}-{}", cl.id, cl.unlocks);
                let keys = vec![KEY.to_owned(), CHANNEL.to_owned(), latch];
                let argv = ["0", &lease, &owner, "publish", "3000"].map(String::from);
                ("redisson release", keys, argv.to_vec())
            }
            other => return Err(format!("c{c} (Redisson's) cannot {other:?}")),
        };
        let keys: Vec<&str> = keys.iter().map(|k| k.as_str()).collect();
        self.eval(name, &keys, &argv)
    }

    /// The clients listening on the unlock channel: Redisson's waiting
    /// clients, and leasehold's whose last attempt found another library's
    /// holder (the `f` flag) — while they wait or try.
    pub(super) fn unlock_listeners(&self) -> Vec<usize> {
        (0..self.clients.len())
            .filter(|&c| {
                let cl = &self.clients[c];
                let waits = matches!(cl.state, State::Waiting { .. })
                    || matches!(cl.inflight, Some((Op::Acquire { .. }, _)));
                waits && (cl.redisson || cl.foreign)
            })
            .collect()
    }

    /// What `PUBSUB NUMSUB` of the unlock channel answers, declared to the
    /// model Redis before a script runs.
    pub(super) fn declare_unlock_listeners(&mut self) {
        let n = self.unlock_listeners().len() as i64;
        let mut store = self.w.engine.store.borrow_mut();
        store.subscribers.insert(CHANNEL.as_bytes().to_vec(), n);
    }

    /// Fair lock: a Redisson waiter is first in the queue. Its turn lasts
    /// until it takes the lock — woken by a message, or (the message lost)
    /// when its own wait runs out, up to Redisson's 300 s step — or until
    /// its timeout if it died: Redisson's protocol, not leasehold's bound.
    pub(super) fn redisson_first(&mut self) -> bool {
        if self.cfg.lock != Lock::Fair || self.cfg.redisson == 0 {
            return false;
        }
        let first = self.w.redis(&[b"lindex", QUEUE.as_bytes(), b"0"]);
        let Reply::Bulk(first) = first else {
            return false;
        };
        self.w.redis(&[b"hexists", MARKS.as_bytes(), &first]) == Reply::Int(0)
    }
}
