//! The fair lock's calls in the exclusive-lock simulation: the arguments
//! `protocol::fair` sends (Redisson's queue, timeouts and leasehold's marks),
//! and its own invariant — arrival order: no acquire takes a free lock
//! while another waiter's live place is first in the queue.

use super::*;

impl Sim {
    /// The fair lock's script of `op` for client `c`, with the arguments
    /// `protocol::fair` sends.
    pub(super) fn run_fair(&mut self, c: usize, op: &Op) -> Result<Reply, String> {
        let cl = &self.clients[c];
        let owner = cl.owner.clone();
        let acquire = |lease: u64, place: &str, alive: &str| {
            let mut keys = vec![KEY, QUEUE, TIMEOUTS, MARKS];
            if cl.fenced {
                keys.push(TOKENS);
            }
            let queue_lease = lease.clamp(300, Lock::Fair.place_lease()).to_string();
            let argv = vec![
                lease.to_string(),
                owner.clone(),
                queue_lease,
                place.into(),
                alive.into(),
            ];
            ("fair acquire", keys, argv)
        };
        let release = |keep: &str, last: &str| {
            let keys = vec![KEY, QUEUE, TIMEOUTS, CHANNEL, MARKS, TOKENS];
            let argv = vec!["0".into(), keep.into(), owner.clone(), last.into()];
            ("fair release", keys, argv)
        };
        let (name, keys, argv) = match op {
            Op::Acquire { place } => acquire(cl.lease, place, "0"),
            // The first guard is alive.
            Op::Reenter { lease } => acquire(*lease, "", "1"),
            Op::Unhold { keep } => release(keep, "0"),
            Op::Release => release(">0", "1"),
            Op::Renew => (
                "renew",
                vec![KEY],
                vec![cl.lease.to_string(), owner.clone()],
            ),
            Op::Leave { .. } => (
                "fair cancel",
                vec![KEY, QUEUE, TIMEOUTS, CHANNEL, MARKS],
                vec!["0".into(), owner.clone()],
            ),
        };
        // Arrival order: no acquire takes a free lock while another
        // waiter's live place is first in the queue. (Claiming a grant is
        // not taking: the lock was set to the claimant.)
        let free = self
            .w
            .engine
            .store
            .borrow_mut()
            .entry(KEY.as_bytes())
            .is_none();
        let first = self.live_first().filter(|_| free);
        let reply = self.eval(name, &keys, &argv)?;
        let took = reply == Reply::Nil || matches!(&reply, Reply::Array(t) if t.len() == 1);
        match first {
            Some(first) if took && first != owner && matches!(op, Op::Acquire { .. }) => Err(
                format!("c{c} took the fair lock ahead of {first}, first in line and alive"),
            ),
            _ => Ok(reply),
        }
    }

    /// The owner whose place is first in the fair queue, if that place is
    /// alive (its mark names a time still to come on Redis's clock).
    fn live_first(&mut self) -> Option<String> {
        let mut store = self.w.engine.store.borrow_mut();
        let now = store.now_us / 1000;
        let Reply::Bulk(first) = store.call(&[b"lindex".to_vec(), QUEUE.into(), b"0".to_vec()])
        else {
            return None;
        };
        let Reply::Bulk(mark) = store.call(&[b"hget".to_vec(), MARKS.into(), first.clone()]) else {
            return None;
        };
        let mark = String::from_utf8_lossy(&mark).into_owned();
        let until: u64 = mark.rsplit_once(' ')?.1.parse().ok()?;
        (until > now).then(|| String::from_utf8_lossy(&first).into_owned())
    }
}
