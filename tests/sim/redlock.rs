//! Redlock under simulation: five independent model Redis nodes (each its
//! own store and engine, their clocks running with the clients'), and
//! model clients that follow `src/redlock.rs` — a round sends the plain
//! acquire (a fresh owner per round, no place) to every node at once; a
//! node's answer counts only within the node timeout; with a majority and
//! validity left (the lease, less the time the round took, less the drift
//! allowance) the round holds until then, else it gives back what it got
//! (owner-checked releases) and tries again after a random delay; an answer
//! that came late, or a reply that was lost, is undone by a release of that
//! node; an unlock releases on every node. Faults: the other simulations'
//! (no clock steps), and nodes restarting empty after being down for the
//! longest lease (redis.io's "delayed restarts").
//!
//! Checked after every step: at most one client whose validity is
//! unexpired, and a majority of nodes keep its hold at least that long; a
//! failed round leaves nothing on any node once every call of it was
//! answered; at the end nothing is left on any node.

use std::collections::HashSet;

use super::lua::Engine;
use super::store::{Reply, Store};
use super::world::{self, Explored, Faults, Model, Scripts, Transit, World};

const KEY: &str = "job";
const NODES: usize = 5;
const MAJORITY: usize = 3;
/// The node timeout: an answer later than this counts as none (a tenth of
/// the shortest lease, as `RedlockBuilder` allows at most; the simulation's
/// steps are coarser than a real network's).
const NODE_TIMEOUT: u64 = 1000;
/// Retries come after a random delay up to this.
const RETRY: u64 = 200;
/// A restarted node is down this long (the longest lease), then empty.
const DOWN: u64 = 30_000;

#[derive(Clone, Debug)]
pub struct Config {
    pub clients: usize,
    pub steps: usize,
    pub faults: Faults,
    /// A client-step mutation: a round without a majority keeps what it
    /// got (its give-back skipped).
    pub skip_give_back: bool,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    Acquire,
    Release,
}

/// One call to one node: what, for which round's owner, when sent.
#[derive(Clone)]
pub struct Call {
    node: usize,
    op: Op,
    owner: String,
    sent_at: u64,
}

impl std::fmt::Debug for Call {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let owner = self.owner.rsplit(':').next().unwrap_or("");
        write!(f, "{:?} {owner} on n{}", self.op, self.node)
    }
}

#[derive(Clone, Debug)]
enum State {
    Idle {
        next_at: u64,
    },
    /// A round in progress: each node's answer (held or not) as it comes.
    Round {
        owner: String,
        started: u64,
        answers: [Option<bool>; NODES],
    },
    Holding {
        owner: String,
        until: u64,
        release_at: u64,
    },
    Crashed,
}

struct Client {
    id: String,
    lease: u64,
    rounds: u64,
    state: State,
    paused_until: u64,
    /// Calls in flight, by owner (a round's acquires and releases).
    calls: Vec<String>,
    /// Owners of failed rounds: once none of their calls is in flight, no
    /// node may hold them.
    failed: HashSet<String>,
}

struct Node {
    engine: Engine,
    /// Its clock when the clients' read 0 (µs).
    start_us: u64,
    /// Down (restarting) until then; it comes back empty.
    down_until: u64,
}

pub struct Sim {
    cfg: Config,
    clients: Vec<Client>,
    nodes: Vec<Node>,
    pub w: World<Call>,
}

impl Sim {
    pub fn new(seed: u64, cfg: Config, scripts: Scripts) -> Sim {
        let mut w = World::new(seed, cfg.faults, scripts);
        let clients = (0..cfg.clients)
            .map(|i| Client {
                id: format!("0000000{i}-0000-8000-8000-00000000000{i}"),
                lease: *w.rng.pick(&[10_000, 30_000]),
                rounds: 0,
                state: State::Idle { next_at: 0 },
                paused_until: 0,
                calls: Vec::new(),
                failed: HashSet::new(),
            })
            .collect();
        let nodes = (0..NODES)
            .map(|_| {
                let mut store = Store::default();
                store.now_us = 1_700_000_000_000_000 + w.rng.below(1_000_000_000);
                Node {
                    start_us: store.now_us,
                    engine: Engine::new(store),
                    down_until: 0,
                }
            })
            .collect();
        Sim {
            cfg,
            clients,
            nodes,
            w,
        }
    }

    /// Node `i`'s clock brought to now (it runs with the clients' from its
    /// own start), and its data dropped if it is back from a restart.
    fn node(&mut self, i: usize) -> &mut Node {
        let now = self.w.now();
        let node = &mut self.nodes[i];
        let mut store = node.engine.store.borrow_mut();
        store.now_us = node.start_us + now * 1000;
        if node.down_until != 0 && node.down_until <= now {
            let now_us = store.now_us;
            *store = Store::default();
            store.now_us = now_us;
            node.down_until = 0;
        }
        drop(store);
        node
    }

    /// Whether node `i` is down (restarting) now.
    fn down(&mut self, i: usize) -> bool {
        self.node(i).down_until > self.w.now()
    }

    fn send(&mut self, c: usize, node: usize, op: Op, owner: &str) {
        let now = self.w.now();
        self.clients[c].calls.push(owner.to_owned());
        let req = Call {
            node,
            op,
            owner: owner.to_owned(),
            sent_at: now,
        };
        self.w.note(format!("c{c} sends {req:?}"));
        self.w.travel(Transit::Request { client: c, req });
    }

    fn act(&mut self, c: usize, acquire: bool) {
        let now = self.w.now();
        let cl = &self.clients[c];
        if cl.paused_until > now {
            return;
        }
        match cl.state.clone() {
            State::Idle { next_at } if acquire && now >= next_at && self.w.rng.chance(40) => {
                let cl = &mut self.clients[c];
                cl.rounds += 1;
                let owner = format!("{}:redlock-{}", cl.id, cl.rounds);
                cl.state = State::Round {
                    owner: owner.clone(),
                    started: now,
                    answers: [None; NODES],
                };
                for node in 0..NODES {
                    self.send(c, node, Op::Acquire, &owner);
                }
            }
            State::Round {
                owner,
                started,
                answers,
            } if now >= started + NODE_TIMEOUT || answers.iter().all(Option::is_some) => {
                let cl = &self.clients[c];
                let held: Vec<usize> = (0..NODES).filter(|&i| answers[i] == Some(true)).collect();
                let drift = cl.lease / 100 + 2;
                let validity = cl.lease.saturating_sub(now - started + drift);
                if held.len() >= MAJORITY && validity > 0 {
                    let cs = 1 + self.w.rng.below(cl.lease / 4);
                    self.clients[c].state = State::Holding {
                        owner,
                        until: started + validity,
                        release_at: now + cs,
                    };
                    self.w.explored.acquired += 1;
                    self.w
                        .note(format!("c{c} holds until {}", started + validity));
                    return;
                }
                // No majority: give back what we got, try again later.
                let next_at = now + 1 + self.w.rng.below(RETRY);
                self.clients[c].state = State::Idle { next_at };
                self.clients[c].failed.insert(owner.clone());
                if !self.cfg.skip_give_back {
                    for node in held {
                        self.send(c, node, Op::Release, &owner);
                    }
                }
            }
            State::Holding {
                owner,
                until,
                release_at,
            } if now >= until || now >= release_at => {
                // Unlock: released on every node.
                self.clients[c].state = State::Idle { next_at: now };
                for node in 0..NODES {
                    self.send(c, node, Op::Release, &owner);
                }
            }
            _ => {}
        }
    }
}

impl Sim {
    /// Call `req` at its node: the plain acquire of a fresh owner with no
    /// place (`attempt_unique`), or the owner-checked release of the
    /// owner's last hold (`release_unique`). A node that is down refuses.
    fn run_call(&mut self, req: &Call) -> Result<Reply, String> {
        if self.down(req.node) {
            return Ok(Reply::Error("ERR connection refused (restarting)".into()));
        }
        let c = self
            .clients
            .iter()
            .position(|cl| req.owner.starts_with(&cl.id));
        let lease = c.map_or(1000, |c| self.clients[c].lease).to_string();
        let (name, keys, argv): (&str, Vec<&str>, Vec<&str>) = match req.op {
            Op::Acquire => (
                "plain acquire",
                vec![KEY, "leasehold_line:{job}", "leasehold_line:{job}:yield"],
                vec![&lease, &req.owner, "0", ""],
            ),
            Op::Release => (
                "plain release",
                vec![
                    KEY,
                    "redisson_lock__channel:{job}",
                    "leasehold_line:{job}",
                    "leasehold_line:{job}:yield",
                    "redisson_lock_token:{job}",
                ],
                vec![">0", &req.owner, "1"],
            ),
        };
        let source = self.w.script(name)?;
        self.w.explored.scripts += 1;
        let keys: Vec<&[u8]> = keys.iter().map(|k| k.as_bytes()).collect();
        let argv: Vec<&[u8]> = argv.iter().map(|a| a.as_bytes()).collect();
        let node = self.node(req.node);
        let reply = node.engine.eval(&source, &keys, &argv);
        node.engine.store.borrow_mut().published.clear();
        if let Reply::Error(e) = &reply {
            return Err(format!("{name} failed on n{}: {e}", req.node));
        }
        Ok(reply)
    }

    fn answer(&mut self, c: usize, req: Call, reply: Reply) {
        let now = self.w.now();
        let cl = &mut self.clients[c];
        if let Some(i) = cl.calls.iter().position(|o| *o == req.owner) {
            cl.calls.swap_remove(i);
        }
        let refused = matches!(reply, Reply::Error(_));
        match req.op {
            Op::Acquire => {
                let held = reply == Reply::Nil;
                if let State::Round { owner, answers, .. } = &mut cl.state {
                    if *owner == req.owner && now <= req.sent_at + NODE_TIMEOUT {
                        answers[req.node] = Some(held);
                        return;
                    }
                }
                // Too late to count: undone on that node.
                if held {
                    self.send(c, req.node, Op::Release, &req.owner);
                }
            }
            // Refused by a node that is down: sent again (it comes back
            // empty, and answers then).
            Op::Release if refused => self.send(c, req.node, Op::Release, &req.owner),
            Op::Release => {}
        }
    }

    /// The invariants, now.
    fn check(&mut self) -> Result<(), String> {
        let now = self.w.now();
        let holders: Vec<(usize, String, u64)> = (0..self.clients.len())
            .filter_map(|c| match &self.clients[c].state {
                State::Holding { owner, until, .. } if *until > now => {
                    Some((c, owner.clone(), *until))
                }
                _ => None,
            })
            .collect();
        if holders.len() > 1 {
            return Err(format!("two holders at once: {holders:?}"));
        }
        for (c, owner, until) in holders {
            let mut keep = 0;
            for i in 0..NODES {
                // A node that is down keeps what it had (it comes back
                // empty only after the longest lease).
                let store = &self.node(i).engine.store;
                let mut store = store.borrow_mut();
                let ours =
                    store.call(&[b"hexists".to_vec(), KEY.into(), owner.clone().into_bytes()]);
                let pttl = match store.call(&[b"pttl".to_vec(), KEY.into()]) {
                    Reply::Int(n) => n,
                    _ => -2,
                };
                if ours == Reply::Int(1) && (pttl < 0 || pttl as u64 >= until - now) {
                    keep += 1;
                }
            }
            if keep < MAJORITY {
                return Err(format!(
                    "c{c} counts on {} ms more, {keep} of {NODES} nodes keep it",
                    until - now
                ));
            }
        }
        // A failed round, once every call of it was answered, is held on no
        // node.
        for c in 0..self.clients.len() {
            let done: Vec<String> = self.clients[c]
                .failed
                .iter()
                .filter(|o| !self.clients[c].calls.contains(o))
                .cloned()
                .collect();
            for owner in done {
                for i in 0..NODES {
                    let store = &self.node(i).engine.store;
                    let held = store.borrow_mut().call(&[
                        b"hexists".to_vec(),
                        KEY.into(),
                        owner.clone().into_bytes(),
                    ]);
                    if held == Reply::Int(1) {
                        return Err(format!("c{c}'s failed round {owner} is left held on n{i}"));
                    }
                }
                self.clients[c].failed.remove(&owner);
            }
        }
        Ok(())
    }

    /// Every client stops: rounds end, holders unlock, what is in flight
    /// lands; then the leases run out and nothing may be left on any node.
    fn wind_down(&mut self) -> Result<(), String> {
        for _ in 0..100_000 {
            let busy = self.clients.iter().any(|cl| {
                !matches!(cl.state, State::Crashed)
                    && (!cl.calls.is_empty()
                        || matches!(cl.state, State::Round { .. } | State::Holding { .. }))
            });
            if !busy && self.w.transit.is_empty() {
                break;
            }
            world::tick(self)?;
            for c in 0..self.clients.len() {
                if let State::Holding { until, .. } = &mut self.clients[c].state {
                    *until = 0; // released at its next act
                }
                self.act(c, false);
            }
            self.check()?;
        }
        self.w.advance(60_000 + DOWN);
        for i in 0..NODES {
            let left = self.node(i).engine.store.borrow_mut().dump();
            if !left.is_empty() {
                let keys: Vec<String> = left
                    .iter()
                    .map(|(k, _)| String::from_utf8_lossy(k).into_owned())
                    .collect();
                return Err(format!("left on n{i} after every lease ran out: {keys:?}"));
            }
        }
        Ok(())
    }
}

impl Model for Sim {
    type Req = Call;

    fn world(&mut self) -> &mut World<Call> {
        &mut self.w
    }

    fn clients(&self) -> usize {
        self.clients.len()
    }

    fn lease(&self, c: usize) -> u64 {
        self.clients[c].lease
    }

    fn crashed(&self, c: usize) -> bool {
        matches!(self.clients[c].state, State::Crashed)
    }

    fn crash(&mut self, c: usize) {
        let cl = &mut self.clients[c];
        cl.state = State::Crashed;
        // What it had in flight is nobody's to finish.
        cl.calls.clear();
        cl.failed.clear();
    }

    fn phase(&self, c: usize) -> u64 {
        let cl = &self.clients[c];
        let round = match &cl.state {
            State::Round { answers, .. } => answers.iter().filter(|a| a.is_some()).count(),
            _ => 0,
        };
        let kind = match cl.state {
            State::Idle { .. } => 0,
            State::Round { .. } => 1,
            State::Holding { .. } => 2,
            State::Crashed => 3,
        };
        (kind << 8) | ((round as u64) << 4) | cl.calls.len().min(15) as u64
    }

    fn paused_until(&self, c: usize) -> u64 {
        self.clients[c].paused_until
    }

    fn pause(&mut self, c: usize, until: u64) {
        self.clients[c].paused_until = until;
    }

    fn act(&mut self, c: usize) -> Result<(), String> {
        if !self.crashed(c) {
            Sim::act(self, c, true);
        }
        Ok(())
    }

    fn run(&mut self, _c: usize, req: &Call) -> Result<Reply, String> {
        self.run_call(req)
    }

    fn sent_at(&self, _c: usize) -> u64 {
        0 // each call carries its own
    }

    fn replied(&mut self, _c: usize) {}

    /// A lost reply: the call may have run. An acquire is undone on its
    /// node (the round counts it as no answer); a release is sent again.
    fn lost(&mut self, c: usize, req: Call) {
        let cl = &mut self.clients[c];
        if let Some(i) = cl.calls.iter().position(|o| *o == req.owner) {
            cl.calls.swap_remove(i);
        }
        self.send(c, req.node, Op::Release, &req.owner);
    }

    fn answer(&mut self, c: usize, req: Call, _sent_at: u64, reply: Reply) -> Result<(), String> {
        Sim::answer(self, c, req, reply);
        Ok(())
    }

    fn message(&mut self, _c: usize, _payload: String) -> Result<(), String> {
        Ok(())
    }

    fn subscribers(&self, _channel: &str) -> Vec<usize> {
        Vec::new()
    }

    /// A node restarts: down for the longest lease, then back empty.
    fn failover(&mut self) {
        let i = self.w.rng.below(NODES as u64) as usize;
        let now = self.w.now();
        if self.down(i) {
            return;
        }
        self.nodes[i].down_until = now + DOWN;
        self.w.explored.failovers += 1;
        self.w
            .note(format!("n{i} restarts (down {DOWN} ms, back empty)"));
    }
}

world::simulation!();

/// Runs `seeds`; the first failure with its seed, the end of its trace and
/// the shortest run found failing so.
pub fn explore(
    seeds: impl IntoIterator<Item = u64>,
    cfg: &Config,
    scripts: &Scripts,
) -> Result<Explored, String> {
    world::explore_with::<Sim>(seeds, cfg, scripts)
}
