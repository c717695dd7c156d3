//! The exclusive locks under simulation — the plain lock and (`Lock::Fair`)
//! the fair lock: model clients that follow the protocol as `docs/wire.md`
//! and the raw layer describe it — acquire with a place in the line or
//! queue (`<owner>#<n>@<grant ms>/<place ms>`), confirm the place every
//! third of its lease, take a grant from the client's channel (held from
//! the send time of the last attempt that confirmed the place, for the
//! grant's lease, unless a confirmation found the place new again), renew a
//! watchdog lease every third of it, re-enter with a second guard, release
//! (owner-checked, the owner's last hold), and undo a call whose reply was
//! lost (leave the place, release) before the owner's next acquire —
//! against the exact scripts the library sends, over the model Redis, with
//! a seeded schedule of faults: requests and replies delayed and reordered
//! between clients, replies lost, grant messages delayed or lost, clients
//! paused past their lease (their clock stops, Redis's runs) and crashed,
//! Redis's clock stepping back.
//!
//! Here: the clients, the schedule and the calls; `replies`: what a client
//! does with what comes back; `fair`: the fair lock's calls and its arrival
//! order; `checks`: the invariants after every step and the wind-down.

mod checks;
mod fair;
mod redisson;
mod replies;

use super::store::Reply;
use super::world::{self, Model, Transit, World};
pub use super::world::{shipped, Explored, Faults, Scripts};

const KEY: &str = "job";
const LINE: &str = "leasehold_line:{job}";
const YIELD: &str = "leasehold_line:{job}:yield";
const CHANNEL: &str = "redisson_lock__channel:{job}";
const TOKENS: &str = "redisson_lock_token:{job}";
const GRANT_PREFIX: &str = "leasehold_grant:{job}:";
const GRANT_LEASE: u64 = 3000;
// The fair lock's (Redisson's layout, and leasehold's marks of its places).
const QUEUE: &str = "redisson_lock_queue:{job}";
const TIMEOUTS: &str = "redisson_lock_timeout:{job}";
const MARKS: &str = "leasehold_fair:{job}";

/// Which exclusive lock the clients take.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Lock {
    /// The line of waiting clients, grants on each client's grant channel.
    Plain,
    /// Redisson's fair queue with leasehold's marks, grants on each
    /// waiter's own channel.
    Fair,
}

impl Lock {
    /// How long a place lives unconfirmed, at most (`line::PLACE_LEASE`,
    /// `fair::QUEUE_LEASE`).
    fn place_lease(self) -> u64 {
        match self {
            Lock::Plain => 3000,
            Lock::Fair => 5000,
        }
    }
}

#[derive(Clone, Debug)]
pub struct Config {
    pub lock: Lock,
    pub clients: usize,
    pub steps: usize,
    pub faults: Faults,
    /// A client-step mutation: grants are trusted even after the place was
    /// found new again (the rule before the simulator found the delayed
    /// grant that made two holders).
    pub trust_stale_grants: bool,
    /// Half the clients ask for fencing tokens.
    pub fenced: bool,
    /// Holders re-enter now and then with an explicit lease.
    pub reentry: bool,
    /// How many of the clients (the last ones) are Redisson's (plain lock:
    /// its `RLock` scripts, waiting on the unlock channel).
    pub redisson: usize,
    /// Leasehold's clients wait for the replica to acknowledge every
    /// acquire (`replicas(1, ..)`: `WAIT` after the acquire script), and so
    /// take grants by an attempt.
    pub replicas: bool,
    /// A client-step mutation: renewals are not acknowledged by the replica
    /// (the rule before the simulator found a renewal lost by a failover).
    pub unacknowledged_renewals: bool,
    /// A client-step mutation: a guard's release sets the lease it had
    /// itself (Redisson's, and the defect of the "Promises broken" issue),
    /// not what the remaining guard counts on.
    pub keep_released_lease: bool,
    /// A wait rides out a lost acquire with its place, as the client's wait
    /// loop does on a transient error (with no undo first when the owner
    /// has guards alive): its next attempt names its element as unknown
    /// (`0|<place>`), not the one it last knew — the lost attempt may have
    /// rewritten it. Otherwise a lost acquire ends the wait (undone before
    /// the next one).
    pub ride_lost_acquires: bool,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    Acquire {
        place: String,
    },
    Renew,
    Release,
    Leave {
        place: String,
    },
    /// A second guard of the holding owner, with an explicit lease.
    Reenter {
        lease: u64,
    },
    /// One guard released while another of the owner remains: `keep` says
    /// what the remaining one counts on (`protocol::Keep::arg`).
    Unhold {
        keep: String,
    },
}

/// A re-entered guard with an explicit lease: until when its view says it
/// holds, and when it is released.
#[derive(Clone, Copy, Debug)]
struct Inner {
    until: u64,
    release_at: u64,
}

/// `protocol::Keep::arg`'s milliseconds: rounded up, plus one.
fn keep_ms(ms: u64) -> u64 {
    ms + 1
}

#[derive(Clone, Debug)]
enum State {
    Idle,
    Waiting {
        place: String,
        /// Our element in the line (`<until>|<place>`), as the last reply
        /// gave it: what the next attempt sends to confirm the place.
        element: Option<String>,
        confirm_at: u64,
    },
    Holding {
        until: u64,
        renew_at: u64,
        release_at: u64,
    },
    Crashed,
}

struct Client {
    /// A Redisson client (`redisson`).
    redisson: bool,
    /// Leasehold's: its last attempt found another library's holder, so it
    /// hears the unlock channel too.
    foreign: bool,
    /// Redisson's unlocks so far (each has a request id of its own).
    unlocks: u64,
    id: String,
    owner: String,
    lease: u64,
    /// Asks for fencing tokens (a fenced lock).
    fenced: bool,
    /// The token of the hold it counts on.
    token: Option<u64>,
    /// A re-entered guard beside the first.
    inner: Option<Inner>,
    state: State,
    /// The request in flight (one per client: a client waits for its
    /// reply), and when it was sent.
    inflight: Option<(Op, u64)>,
    paused_until: u64,
    /// Undo due before the next acquire: the place an acquire whose reply
    /// was lost may have taken.
    unsettled: Option<String>,
    /// When the last attempt that took or confirmed our place was sent.
    confirmed_at: u64,
    places: u64,
    acquired: u64,
    /// Grant messages received and not yet looked at (taken after each
    /// attempt's reply; those received before an attempt is sent are
    /// dropped: the attempt finds a grant already made).
    grants: Vec<String>,
    /// Attempts sent with the current place; whether a later one found the
    /// place new again (a grant naming it may predate our last attempt:
    /// such grants are taken by an attempt, not held at once).
    sent_with_place: u32,
    stale_grants: bool,
}

pub struct Sim {
    cfg: Config,
    clients: Vec<Client>,
    /// Since when the lock has been free while a live, unpaused client waits.
    free_since: Option<u64>,
    /// The last fencing token a holder counted on: each next one is larger.
    last_token: u64,
    pub w: World<Op>,
}

impl Sim {
    pub fn new(seed: u64, cfg: Config, mut scripts: Scripts) -> Sim {
        if cfg.redisson > 0 {
            redisson::add_scripts(&mut scripts);
        }
        let mut w = World::new(seed, cfg.faults, scripts);
        let rng = &mut w.rng;
        let clients = (0..cfg.clients)
            .map(|i| {
                // A leasehold client id: a UUID of version 8 (the 15th
                // character), as `names::new_client_id` makes them.
                let redisson = i + cfg.redisson >= cfg.clients;
                let id = match redisson {
                    false => format!("0000000{i}-0000-8000-8000-00000000000{i}"),
                    // Redisson's: a UUID of version 4.
                    true => format!("0a0b0c0d-1111-4222-8333-00000000000{i}"),
                };
                let lease = *rng.pick(&[900, 3000, 10_000]);
                let fenced = cfg.fenced && rng.chance(50) && !redisson;
                Client {
                    redisson,
                    foreign: false,
                    unlocks: 0,
                    fenced,
                    token: None,
                    inner: None,
                    owner: format!("{id}:1"),
                    id,
                    lease,
                    state: State::Idle,
                    inflight: None,
                    paused_until: 0,
                    unsettled: None,
                    confirmed_at: 0,
                    places: 0,
                    acquired: 0,
                    grants: Vec::new(),
                    sent_with_place: 0,
                    stale_grants: false,
                }
            })
            .collect();
        Sim {
            cfg,
            clients,
            free_since: None,
            last_token: 0,
            w,
        }
    }

    /// Client `c` does what is due.
    fn act(&mut self, c: usize) -> Result<(), String> {
        let now = self.w.now();
        let cl = &self.clients[c];
        if cl.inflight.is_some() || cl.paused_until > now || matches!(cl.state, State::Crashed) {
            return Ok(());
        }
        let op = match cl.state.clone() {
            State::Idle if cl.unsettled.is_some() => {
                // The undo of a lost reply comes before any acquire: leave
                // the place, then release (both owner-checked; Redisson's
                // has no place).
                let redisson = cl.redisson;
                let place = self.clients[c].unsettled.take().unwrap();
                if redisson {
                    self.send_release(c);
                    return Ok(());
                }
                Op::Leave { place }
            }
            State::Idle => {
                if !self.w.rng.chance(40) {
                    return Ok(());
                }
                let cl = &mut self.clients[c];
                cl.places += 1;
                cl.sent_with_place = 0;
                cl.stale_grants = false;
                cl.foreign = false;
                if cl.redisson {
                    let place = String::new();
                    self.send(c, Op::Acquire { place });
                    return Ok(());
                }
                let grant = cl.lease.min(GRANT_LEASE);
                let place = cl.lease.clamp(300, self.cfg.lock.place_lease());
                let f = if cl.fenced { "f" } else { "" };
                Op::Acquire {
                    place: format!("{}#{}@{grant}/{place}{f}", cl.owner, cl.places),
                }
            }
            State::Waiting {
                place,
                element,
                confirm_at,
            } if now >= confirm_at => Op::Acquire {
                place: element.unwrap_or(place),
            },
            State::Holding { until, .. } if matches!(cl.inner, Some(i) if i.until <= now || now >= i.release_at) =>
            {
                // The re-entered guard is dropped; the first remains (a
                // watchdog: at least what its view still counts on).
                let inner = self.clients[c].inner.take().unwrap();
                let keep = if self.cfg.keep_released_lease {
                    format!("={}", keep_ms(inner.until.saturating_sub(now)))
                } else {
                    format!(">{}", keep_ms(until.saturating_sub(now)))
                };
                Op::Unhold { keep }
            }
            State::Holding {
                until, release_at, ..
            } if until <= now || now >= release_at => {
                if let Some(inner) = self.clients[c].inner.take() {
                    // The first guard goes, the re-entered one remains: its
                    // explicit lease exactly, and no more renewal.
                    let keep = format!("={}", keep_ms(inner.until.saturating_sub(now)));
                    self.clients[c].state = State::Holding {
                        until: inner.until,
                        renew_at: u64::MAX,
                        release_at: inner.release_at,
                    };
                    self.send(c, Op::Unhold { keep });
                    return Ok(());
                }
                // Done — or the lease ran out in our view (the guard is
                // told it is lost): the guard's drop sends the
                // owner-checked release.
                self.send_release(c);
                return Ok(());
            }
            State::Holding { until, .. }
                if self.cfg.reentry
                    && !cl.redisson
                    && cl.inner.is_none()
                    && until > now
                    && self.w.rng.chance(10) =>
            {
                Op::Reenter {
                    lease: *self.w.rng.pick(&[500, 2_000, 15_000]),
                }
            }
            State::Holding { renew_at, .. } if now >= renew_at => Op::Renew,
            _ => return Ok(()),
        };
        self.send(c, op);
        Ok(())
    }

    fn send(&mut self, c: usize, op: Op) {
        let now = self.w.now();
        if matches!(op, Op::Acquire { .. }) {
            let cl = &mut self.clients[c];
            cl.grants.clear();
            cl.sent_with_place += 1;
        }
        self.w.note(format!("c{c} sends {op:?}"));
        self.clients[c].inflight = Some((op.clone(), now));
        self.w.travel(Transit::Request { client: c, req: op });
    }

    /// The script of `op` for client `c`, run at Redis.
    fn run_script(&mut self, c: usize, op: &Op) -> Result<Reply, String> {
        self.declare_unlock_listeners();
        if self.clients[c].redisson {
            return self.run_redisson(c, op);
        }
        let cl = &self.clients[c];
        let lease = cl.lease.to_string();
        let owner = cl.owner.clone();
        if self.cfg.lock == Lock::Fair {
            return self.run_fair(c, op);
        }
        let (name, keys, argv): (&str, Vec<&str>, Vec<String>) = match op {
            // A first hold (no guard alive: `0`); a fenced one mints a
            // token (`Fence::Mint`).
            Op::Acquire { place } if cl.fenced => (
                "plain fenced acquire",
                vec![KEY, LINE, YIELD, TOKENS],
                vec![lease, owner, "0".into(), place.clone(), "1".into()],
            ),
            Op::Acquire { place } => (
                "plain acquire",
                vec![KEY, LINE, YIELD],
                vec![lease, owner, "0".into(), place.clone()],
            ),
            Op::Reenter { lease } if cl.fenced => (
                "plain fenced acquire",
                vec![KEY, LINE, YIELD, TOKENS],
                vec![
                    lease.to_string(),
                    owner,
                    "1".into(), // the first guard is alive
                    String::new(),
                    "0".into(),
                ],
            ),
            Op::Reenter { lease } => (
                "plain acquire",
                vec![KEY, LINE, YIELD],
                vec![lease.to_string(), owner, "1".into(), String::new()],
            ),
            Op::Unhold { keep } => (
                "plain release",
                vec![KEY, CHANNEL, LINE, YIELD, TOKENS],
                vec![keep.clone(), owner, "0".into()],
            ),
            Op::Renew => ("renew", vec![KEY], vec![lease, owner]),
            Op::Release => (
                "plain release",
                vec![KEY, CHANNEL, LINE, YIELD, TOKENS],
                vec![">0".into(), owner, "1".into()],
            ),
            Op::Leave { place } => ("plain leave", vec![KEY, LINE], vec![place.clone(), owner]),
        };
        self.eval(name, &keys, &argv)
    }

    fn eval(&mut self, name: &str, keys: &[&str], argv: &[String]) -> Result<Reply, String> {
        let argv: Vec<&[u8]> = argv.iter().map(|a| a.as_bytes()).collect();
        self.w.eval(name, keys, &argv)
    }

    /// The guard is dropped: out of the critical section, the release on
    /// its way.
    fn send_release(&mut self, c: usize) {
        self.clients[c].state = State::Idle;
        self.send(c, Op::Release);
    }
}

impl Model for Sim {
    world::one_call_clients!(Op);

    fn act(&mut self, c: usize) -> Result<(), String> {
        Sim::act(self, c)
    }

    /// With replica acknowledgement, `WAIT` follows an acquire that took
    /// the hold and ends every renewal batch: the replica has the hold, and
    /// the lease its holder counts on, when the client hears of it.
    fn run(&mut self, c: usize, op: &Op) -> Result<Reply, String> {
        let reply = self.run_script(c, op)?;
        let took = reply == Reply::Nil || matches!(&reply, Reply::Array(t) if t.len() == 1);
        let written = match op {
            Op::Acquire { .. } | Op::Reenter { .. } => took,
            Op::Renew => reply == Reply::Int(1) && !self.cfg.unacknowledged_renewals,
            _ => false,
        };
        if self.cfg.replicas && !self.clients[c].redisson && written {
            self.w.replicate();
        }
        Ok(reply)
    }

    fn lost(&mut self, c: usize, op: Op) {
        Sim::lost(self, c, op)
    }

    fn answer(&mut self, c: usize, op: Op, sent_at: u64, reply: Reply) -> Result<(), String> {
        Sim::answer(self, c, op, sent_at, reply)
    }

    fn message(&mut self, c: usize, payload: String) -> Result<(), String> {
        self.clients[c].grants.push(payload);
        self.take_grants(c)
    }

    /// A grant goes to the client whose channel it names (every waiting
    /// client listens on its own); the unlock message to nobody (no other
    /// library here).
    fn subscribers(&self, channel: &str) -> Vec<usize> {
        if self.cfg.lock == Lock::Plain && channel == CHANNEL {
            return self.unlock_listeners();
        }
        let to = self.clients.iter().position(|cl| match self.cfg.lock {
            Lock::Plain => channel.strip_prefix(GRANT_PREFIX) == Some(&cl.id),
            Lock::Fair => {
                channel
                    .strip_prefix(CHANNEL)
                    .and_then(|c| c.strip_prefix(':'))
                    == Some(&cl.owner)
            }
        });
        to.into_iter().collect()
    }
}

world::simulation!();

/// Runs `seeds` with `cfg` on `scripts`; the first failure with its seed,
/// the end of its trace and the shortest run found failing so.
pub fn explore(
    seeds: impl IntoIterator<Item = u64>,
    cfg: &Config,
    scripts: &Scripts,
) -> Result<Explored, String> {
    world::explore_with::<Sim>(seeds, cfg, scripts).map_err(|e| format!("{:?} lock, {e}", cfg.lock))
}
