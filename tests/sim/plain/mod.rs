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

use std::collections::HashMap;

mod checks;
mod fair;
mod replies;

use super::lua::Engine;
use super::store::{Reply, Store};
use super::Rng;

/// The scripts a run uses, by name (the library's, or mutated copies).
pub type Scripts = HashMap<&'static str, String>;

/// The library's scripts as it sends them.
pub fn shipped() -> Scripts {
    leasehold::scripts::all()
        .into_iter()
        .map(|(name, source)| (name, source.to_owned()))
        .collect()
}

const KEY: &str = "job";
const LINE: &str = "leasehold_line:{job}";
const PLACES: &str = "leasehold_line:{job}:places";
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
    /// How long a place lives unconfirmed, at most (`plain::PLACE_LEASE`,
    /// `fair::QUEUE_LEASE`).
    fn place_lease(self) -> u64 {
        match self {
            Lock::Plain => 3000,
            Lock::Fair => 5000,
        }
    }
}

/// How much goes wrong, in percent of the chances it gets.
#[derive(Clone, Copy, Debug)]
pub struct Faults {
    /// Redis's clock steps back up to 2 s (NTP, a failover to a node whose
    /// clock is behind): leases in Redis last longer, tokens floored by the
    /// clock must still grow.
    pub clock_back: u64,
    /// A request, reply or message held up on the network for up to twice
    /// the longest lease.
    pub delay: u64,
    pub lost_reply: u64,
    pub lost_message: u64,
    pub pause: u64,
    pub crash: u64,
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
    /// A client-step mutation: a guard's release sets the lease it had
    /// itself (Redisson's, and the defect of the "Promises broken" issue),
    /// not what the remaining guard counts on.
    pub keep_released_lease: bool,
}

#[derive(Clone, Debug, PartialEq)]
enum Op {
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

/// Something on its way: a request to Redis, a reply to a client, a
/// message to a subscriber.
enum Transit {
    Request {
        client: usize,
        op: Op,
    },
    Reply {
        client: usize,
        op: Op,
        sent_at: u64,
        reply: Reply,
    },
    Message {
        client: usize,
        payload: String,
    },
}

/// What a run explored.
#[derive(Debug, Default, Clone)]
pub struct Explored {
    pub steps: u64,
    pub clock_jumps: u64,
    pub delays: u64,
    pub scripts: u64,
    pub acquired: u64,
    pub grants: u64,
    pub lost_replies: u64,
    pub lost_messages: u64,
    pub pauses: u64,
    pub crashes: u64,
}

pub struct Sim {
    rng: Rng,
    cfg: Config,
    scripts: Scripts,
    engine: Engine,
    clients: Vec<Client>,
    /// What is on its way, and the virtual ms before which it cannot
    /// arrive.
    transit: Vec<(u64, Transit)>,
    /// Since when the lock has been free while a live, unpaused client waits.
    free_since: Option<u64>,
    /// The last fencing token a holder counted on: each next one is larger.
    last_token: u64,
    /// The clients' clock (see [`Sim::now`]).
    real: u64,
    pub explored: Explored,
    pub trace: Vec<String>,
}

impl Sim {
    pub fn new(seed: u64, cfg: Config, scripts: Scripts) -> Sim {
        let mut rng = Rng::new(seed);
        let mut store = Store::default();
        store.now_us = 1_700_000_000_000_000 + rng.below(1_000_000_000);
        let clients = (0..cfg.clients)
            .map(|i| {
                // A leasehold client id: a UUID of version 8 (the 15th
                // character), as `names::new_client_id` makes them.
                let id = format!("0000000{i}-0000-8000-8000-00000000000{i}");
                let lease = *rng.pick(&[900, 3000, 10_000]);
                let fenced = cfg.fenced && rng.chance(50);
                Client {
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
            rng,
            cfg,
            scripts,
            engine: Engine::new(store),
            clients,
            transit: Vec::new(),
            free_since: None,
            last_token: 0,
            real: 0,
            explored: Explored::default(),
            trace: Vec::new(),
        }
    }

    /// The clients' clock (ms; monotonic, as `Instant` is). Redis's clock
    /// runs with it, but may jump back (a fault).
    fn now(&self) -> u64 {
        self.real
    }

    fn advance(&mut self, ms: u64) {
        self.real += ms;
        self.engine.store.borrow_mut().advance(ms);
    }

    fn note(&mut self, what: String) {
        let line = format!("{:>7} {what}", self.now() % 10_000_000);
        self.trace.push(line);
    }

    /// Runs the schedule, then lets every client go and the leases run
    /// out; the first broken invariant, with the trace.
    pub fn run(&mut self) -> Result<(), String> {
        for _ in 0..self.cfg.steps {
            self.step(true)?;
            self.check()?;
        }
        self.wind_down()
    }

    fn step(&mut self, faults: bool) -> Result<(), String> {
        self.explored.steps += 1;
        let f = self.cfg.faults;
        match self.rng.below(100) {
            0 if faults && self.rng.chance(f.clock_back) => {
                let back = self.rng.below(2_000) * 1000;
                self.engine.store.borrow_mut().now_us -= back;
                self.explored.clock_jumps += 1;
                self.note(format!("redis's clock steps back {} ms", back / 1000));
            }
            0..=24 => {
                let ms = if self.rng.chance(5) {
                    self.rng.below(4000)
                } else {
                    self.rng.below(60)
                };
                self.advance(ms);
            }
            25..=54 => {
                let c = self.rng.below(self.clients.len() as u64) as usize;
                self.act(c)?;
            }
            55..=94 => {
                let now = self.now();
                let due: Vec<usize> = (0..self.transit.len())
                    .filter(|&i| self.transit[i].0 <= now)
                    .collect();
                if !due.is_empty() {
                    let i = due[self.rng.below(due.len() as u64) as usize];
                    let (_, t) = self.transit.swap_remove(i);
                    self.deliver(t, faults)?;
                }
            }
            95..=97 if faults && f.pause > 0 && self.rng.chance(f.pause) => {
                let c = self.rng.below(self.clients.len() as u64) as usize;
                let ms = self.rng.below(3 * self.clients[c].lease);
                self.clients[c].paused_until = self.now() + ms;
                self.explored.pauses += 1;
                self.note(format!("c{c} paused {ms} ms"));
            }
            98..=99 if faults && f.crash > 0 && self.rng.chance(f.crash) => {
                let c = self.rng.below(self.clients.len() as u64) as usize;
                if !matches!(self.clients[c].state, State::Crashed) {
                    self.clients[c].state = State::Crashed;
                    self.explored.crashes += 1;
                    self.note(format!("c{c} crashed"));
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// Client `c` does what is due.
    fn act(&mut self, c: usize) -> Result<(), String> {
        let now = self.now();
        let cl = &self.clients[c];
        if cl.inflight.is_some() || cl.paused_until > now || matches!(cl.state, State::Crashed) {
            return Ok(());
        }
        let op = match cl.state.clone() {
            State::Idle if cl.unsettled.is_some() => {
                // The undo of a lost reply comes before any acquire: leave
                // the place, then release (both owner-checked).
                let place = self.clients[c].unsettled.take().unwrap();
                Op::Leave { place }
            }
            State::Idle => {
                if !self.rng.chance(40) {
                    return Ok(());
                }
                let cl = &mut self.clients[c];
                cl.places += 1;
                cl.sent_with_place = 0;
                cl.stale_grants = false;
                let grant = cl.lease.min(GRANT_LEASE);
                let place = cl.lease.clamp(300, self.cfg.lock.place_lease());
                let f = if cl.fenced { "f" } else { "" };
                Op::Acquire {
                    place: format!("{}#{}@{grant}/{place}{f}", cl.owner, cl.places),
                }
            }
            State::Waiting { place, confirm_at } if now >= confirm_at => Op::Acquire { place },
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
                if self.cfg.reentry && cl.inner.is_none() && until > now && self.rng.chance(10) =>
            {
                Op::Reenter {
                    lease: *self.rng.pick(&[500, 2_000, 15_000]),
                }
            }
            State::Holding { renew_at, .. } if now >= renew_at => Op::Renew,
            _ => return Ok(()),
        };
        self.send(c, op);
        Ok(())
    }

    /// Puts `t` on its way: at once, or (a fault) held up a while.
    fn travel(&mut self, t: Transit) {
        let mut due = self.now();
        if self.rng.chance(self.cfg.faults.delay) {
            due += if self.rng.chance(50) {
                self.rng.below(1_000)
            } else {
                self.rng.below(20_000)
            };
            self.explored.delays += 1;
        }
        self.transit.push((due, t));
    }

    fn send(&mut self, c: usize, op: Op) {
        let now = self.now();
        if matches!(op, Op::Acquire { .. }) {
            let cl = &mut self.clients[c];
            cl.grants.clear();
            cl.sent_with_place += 1;
        }
        self.note(format!("c{c} sends {op:?}"));
        self.clients[c].inflight = Some((op.clone(), now));
        self.travel(Transit::Request { client: c, op });
    }

    fn deliver(&mut self, t: Transit, faults: bool) -> Result<(), String> {
        match t {
            Transit::Request { client, op } => {
                let reply = self.run_script(client, &op)?;
                let sent_at = self.clients[client].inflight.as_ref().map_or(0, |i| i.1);
                self.note(format!("redis ran c{client} {op:?} → {reply:?}"));
                self.publish();
                self.travel(Transit::Reply {
                    client,
                    op,
                    sent_at,
                    reply,
                });
            }
            Transit::Reply {
                client,
                op,
                sent_at,
                reply,
            } => {
                let cl = &self.clients[client];
                if matches!(cl.state, State::Crashed) {
                    return Ok(());
                }
                if cl.paused_until > self.now() {
                    self.travel(Transit::Reply {
                        client,
                        op,
                        sent_at,
                        reply,
                    });
                    return Ok(());
                }
                self.clients[client].inflight = None;
                if faults && self.rng.chance(self.cfg.faults.lost_reply) {
                    self.explored.lost_replies += 1;
                    self.note(format!("c{client} lost the reply to {op:?}"));
                    self.lost(client, op);
                    return Ok(());
                }
                self.answer(client, op, sent_at, reply)?;
            }
            Transit::Message { client, payload } => {
                let cl = &self.clients[client];
                if matches!(cl.state, State::Crashed) {
                    return Ok(());
                }
                if cl.paused_until > self.now() {
                    self.travel(Transit::Message { client, payload });
                    return Ok(());
                }
                if faults && self.rng.chance(self.cfg.faults.lost_message) {
                    self.explored.lost_messages += 1;
                    self.note(format!("c{client} lost the message {payload}"));
                    return Ok(());
                }
                self.clients[client].grants.push(payload);
                self.take_grants(client)?;
            }
        }
        Ok(())
    }

    /// The script of `op` for client `c`, run at Redis.
    fn run_script(&mut self, c: usize, op: &Op) -> Result<Reply, String> {
        self.explored.scripts += 1;
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
                vec![KEY, LINE, PLACES, YIELD, TOKENS],
                vec![lease, owner, "0".into(), place.clone(), "1".into()],
            ),
            Op::Acquire { place } => (
                "plain acquire",
                vec![KEY, LINE, PLACES, YIELD],
                vec![lease, owner, "0".into(), place.clone()],
            ),
            Op::Reenter { lease } if cl.fenced => (
                "plain fenced acquire",
                vec![KEY, LINE, PLACES, YIELD, TOKENS],
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
                vec![KEY, LINE, PLACES, YIELD],
                vec![lease.to_string(), owner, "1".into(), String::new()],
            ),
            Op::Unhold { keep } => (
                "plain release",
                vec![KEY, CHANNEL, LINE, PLACES, YIELD, TOKENS],
                vec![keep.clone(), owner, "0".into()],
            ),
            Op::Renew => ("renew", vec![KEY], vec![lease, owner]),
            Op::Release => (
                "plain release",
                vec![KEY, CHANNEL, LINE, PLACES, YIELD, TOKENS],
                vec![">0".into(), owner, "1".into()],
            ),
            Op::Leave { place } => (
                "plain leave",
                vec![KEY, LINE, PLACES],
                vec![place.clone(), owner],
            ),
        };
        self.eval(name, &keys, &argv)
    }

    fn eval(&mut self, name: &str, keys: &[&str], argv: &[String]) -> Result<Reply, String> {
        let source = self.scripts.get(name).ok_or(format!("no script {name}"))?;
        let keys: Vec<&[u8]> = keys.iter().map(|k| k.as_bytes()).collect();
        let argv: Vec<&[u8]> = argv.iter().map(|a| a.as_bytes()).collect();
        let reply = self.engine.eval(source, &keys, &argv);
        if let Reply::Error(e) = &reply {
            return Err(format!("{name} failed: {e}"));
        }
        Ok(reply)
    }

    /// What the scripts published goes to its subscribers: a grant to the
    /// client whose channel it names (every waiting client listens on its
    /// own); the unlock message to nobody (no other library here).
    fn publish(&mut self) {
        let published = std::mem::take(&mut self.engine.store.borrow_mut().published);
        for (channel, payload) in published {
            let channel = String::from_utf8_lossy(&channel).into_owned();
            let payload = String::from_utf8_lossy(&payload).into_owned();
            let to = |cl: &Client| match self.cfg.lock {
                Lock::Plain => channel.strip_prefix(GRANT_PREFIX) == Some(&cl.id),
                Lock::Fair => {
                    channel
                        .strip_prefix(CHANNEL)
                        .and_then(|c| c.strip_prefix(':'))
                        == Some(&cl.owner)
                }
            };
            {
                if let Some(c) = self.clients.iter().position(to) {
                    self.explored.grants += 1;
                    self.travel(Transit::Message { client: c, payload });
                }
            }
        }
    }

    /// The guard is dropped: out of the critical section, the release on
    /// its way.
    fn send_release(&mut self, c: usize) {
        self.clients[c].state = State::Idle;
        self.send(c, Op::Release);
    }
}

/// Runs `seeds` with `cfg` on `scripts`; the first failure with its seed
/// and the end of its trace.
pub fn explore(
    seeds: impl IntoIterator<Item = u64>,
    cfg: &Config,
    scripts: &Scripts,
) -> Result<Explored, String> {
    let mut total = Explored::default();
    for seed in seeds {
        let mut sim = Sim::new(seed, cfg.clone(), scripts.clone());
        if let Err(e) = sim.run() {
            let tail = sim.trace[sim.trace.len().saturating_sub(
                std::env::var("SIM_TAIL")
                    .ok()
                    .and_then(|t| t.parse().ok())
                    .unwrap_or(25),
            )..]
                .join("\n");
            return Err(format!(
                "seed {seed} ({:?} lock): {e}\n(replay: the same seed)\n{tail}",
                cfg.lock
            ));
        }
        let e = &sim.explored;
        total.steps += e.steps;
        total.clock_jumps += e.clock_jumps;
        total.delays += e.delays;
        total.scripts += e.scripts;
        total.acquired += e.acquired;
        total.grants += e.grants;
        total.lost_replies += e.lost_replies;
        total.lost_messages += e.lost_messages;
        total.pauses += e.pauses;
        total.crashes += e.crashes;
    }
    Ok(total)
}
