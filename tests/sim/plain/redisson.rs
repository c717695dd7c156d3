//! Redisson's clients in the plain-lock simulation: its `RLock` acquire,
//! release and renewal, played from the scripts `tests/support/redisson.rs`
//! carries (Redisson's own; its renewal from `RedissonBaseLock`), waiting
//! on the unlock channel — beside leasehold's clients, which hear that
//! channel too while another library holds the lock, and whose releases
//! leave the lock to other libraries' waiters now and then (`PUBSUB
//! NUMSUB` counts them: the simulation declares who listens).

use super::*;
use crate::support::redisson::{ACQUIRE, RELEASE};

/// Redisson's `RLock` renewal (`RedissonBaseLock.renewExpirationAsync`):
/// the lease set again while the owner's field is there. KEYS: lock. ARGV:
/// lease ms, owner.
const RENEW: &str = "if (redis.call('hexists', KEYS[1], ARGV[2]) == 1) then \
    redis.call('pexpire', KEYS[1], ARGV[1]); return 1; end; return 0;";

/// Redisson's scripts beside the library's.
pub(super) fn add_scripts(scripts: &mut Scripts) {
    scripts.insert("redisson acquire", ACQUIRE.to_owned());
    scripts.insert("redisson release", RELEASE.to_owned());
    scripts.insert("redisson renew", RENEW.to_owned());
}

impl Sim {
    /// Redisson client `c`'s script of `op`, as Redisson sends it.
    pub(super) fn run_redisson(&mut self, c: usize, op: &Op) -> Result<Reply, String> {
        let cl = &mut self.clients[c];
        let (lease, owner) = (cl.lease.to_string(), cl.owner.clone());
        let (name, keys, argv) = match op {
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
}
