//! What every simulation shares: the seeded schedule of steps and faults,
//! the model Redis with its Lua engine and the scripts it runs, the
//! clients' clock, the network (requests, replies and messages on their
//! way, held up, reordered between clients, lost), what a run explored and
//! its trace. A simulation ([`Model`]) brings its clients: what each does
//! when it acts, which script a request runs, what it makes of a reply, a
//! lost reply and a message.

use std::collections::{HashMap, HashSet};
use std::fmt::Debug;
use std::hash::{DefaultHasher, Hash, Hasher};

use super::lua::Engine;
use super::store::{Reply, Store, Val};
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
    /// A message arrives twice (a subscriber reconnecting while a publish
    /// is in flight, a proxy retrying): the copy later, held up like any
    /// other — a grant heard again after its waiter used it, gave it up or
    /// took another place.
    pub duplicate_message: u64,
    pub pause: u64,
    pub crash: u64,
    /// The primary fails over to its replica, which has the writes up to
    /// its last catch-up (replication is asynchronous: it catches up about
    /// every other step, and at once when a client waits for it with
    /// `WAIT`): what the primary wrote since is lost.
    pub failover: u64,
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
    pub duplicated_messages: u64,
    pub pauses: u64,
    pub crashes: u64,
    pub failovers: u64,
    /// Distinct states seen after a step (see [`World::see`]): what is in
    /// Redis, abstracted from clocks, tokens and which client is which
    /// number, and each client's phase.
    pub states: u64,
}

impl Explored {
    /// `other`'s counts added to these.
    pub fn add(&mut self, o: &Explored) {
        self.steps += o.steps;
        self.clock_jumps += o.clock_jumps;
        self.delays += o.delays;
        self.scripts += o.scripts;
        self.acquired += o.acquired;
        self.grants += o.grants;
        self.lost_replies += o.lost_replies;
        self.lost_messages += o.lost_messages;
        self.duplicated_messages += o.duplicated_messages;
        self.pauses += o.pauses;
        self.crashes += o.crashes;
        self.failovers += o.failovers;
    }
}

/// Something on its way: a request to Redis, a reply to a client, a
/// message to a subscriber.
pub enum Transit<R> {
    Request {
        client: usize,
        req: R,
    },
    Reply {
        client: usize,
        req: R,
        sent_at: u64,
        reply: Reply,
    },
    Message {
        client: usize,
        payload: String,
    },
}

pub struct World<R> {
    pub rng: Rng,
    pub faults: Faults,
    scripts: Scripts,
    pub engine: Engine,
    /// The clients' clock (see [`World::now`]).
    real: u64,
    /// The servers' clock when the clients' read 0 (ms): a client that
    /// sends its wall clock (Redisson's fair lock) sends this plus `now`.
    pub start_ms: u64,
    /// What is on its way, and the virtual ms before which it cannot
    /// arrive.
    pub transit: Vec<(u64, Transit<R>)>,
    pub explored: Explored,
    pub trace: Vec<String>,
    /// The replica's copy of the data (with failovers on).
    replica: Store,
    /// The abstract states seen (see [`World::see`]).
    pub states: HashSet<u64>,
    /// How far Redis's clock stepped back in all (the wind-down lets that
    /// much more time pass: an expiry set before a step back comes later).
    pub stepped_back_ms: u64,
}

impl<R: Clone + Debug> World<R> {
    pub fn new(seed: u64, faults: Faults, scripts: Scripts) -> Self {
        let mut rng = Rng::new(seed);
        let mut store = Store::default();
        store.now_us = 1_700_000_000_000_000 + rng.below(1_000_000_000);
        World {
            rng,
            faults,
            scripts,
            start_ms: store.now_us / 1000,
            replica: store.clone(),
            stepped_back_ms: 0,
            states: HashSet::new(),
            engine: Engine::new(store),
            real: 0,
            transit: Vec::new(),
            explored: Explored::default(),
            trace: Vec::new(),
        }
    }

    /// The clients' clock (ms; monotonic, as `Instant` is). Redis's clock
    /// runs with it, but may jump back (a fault).
    pub fn now(&self) -> u64 {
        self.real
    }

    pub fn advance(&mut self, ms: u64) {
        self.real += ms;
        self.engine.store.borrow_mut().advance(ms);
    }

    pub fn note(&mut self, what: String) {
        let line = format!("{:>7} {what}", self.now() % 10_000_000);
        self.trace.push(line);
    }

    /// The last `n` lines of the trace.
    pub fn tail(&self, n: usize) -> String {
        self.trace[self.trace.len().saturating_sub(n)..].join("\n")
    }

    /// Puts `t` on its way: at once, or (a fault) held up a while.
    pub fn travel(&mut self, t: Transit<R>) {
        let mut due = self.now();
        if self.rng.chance(self.faults.delay) {
            due += if self.rng.chance(50) {
                self.rng.below(1_000)
            } else {
                self.rng.below(20_000)
            };
            self.explored.delays += 1;
        }
        self.transit.push((due, t));
    }

    /// Records the state after a step: every key of the model Redis (its
    /// name, type and size; a hash's fields, a list's items, a short
    /// string's value — digits dropped, so clients, places and times are
    /// not told apart; a count of 0–99 kept) and the clients' `phases`.
    /// Keys and fields in no order (their hashes summed): cheap enough for
    /// every step.
    pub fn see(&mut self, phases: &[u64]) {
        // FNV-1a: cheap enough per byte in a debug build.
        fn one(parts: &[&[u8]]) -> u64 {
            let mut h: u64 = 0xcbf2_9ce4_8422_2325;
            for b in parts {
                let short = b.len() <= 2;
                for &c in b
                    .iter()
                    .filter(|c| short || !c.is_ascii_digit())
                    .chain(&[0xff])
                {
                    h = (h ^ u64::from(c)).wrapping_mul(0x0100_0000_01b3);
                }
            }
            h
        }
        let mut sum = {
            let mut h = DefaultHasher::new();
            phases.hash(&mut h);
            h.finish()
        };
        for (key, entry) in self.engine.store.borrow_mut().live() {
            let content = match &entry.val {
                Val::Str(v) => one(&[v]),
                Val::Hash(f) => f
                    .iter()
                    .fold(1, |acc: u64, (k, v)| acc.wrapping_add(one(&[k, v]))),
                Val::List(l) => {
                    let items: Vec<&[u8]> = l.iter().map(|i| &i[..]).collect();
                    one(&items).wrapping_add(2)
                }
                Val::ZSet(z) => (z.len() as u64).wrapping_add(3),
            };
            sum = sum.wrapping_add(one(&[key]).wrapping_mul(31).wrapping_add(content));
        }
        self.states.insert(sum);
    }

    /// The replica catches up with the primary (a `WAIT` that the replica
    /// acknowledged: the writes so far are on it).
    pub fn replicate(&mut self) {
        self.replica = self.engine.store.borrow().clone();
        self.replica.published.clear();
    }

    /// The replica becomes the primary: the writes it had not received are
    /// lost (its clock, subscribers and what is in flight are the same).
    pub fn failover(&mut self) {
        let mut store = self.engine.store.borrow_mut();
        let (now_us, subscribers) = (store.now_us, store.subscribers.clone());
        *store = self.replica.clone();
        store.now_us = now_us;
        store.subscribers = subscribers;
        drop(store);
        self.explored.failovers += 1;
        self.note("failover: the replica is the primary".to_owned());
    }

    /// Whether a request or reply of client `c` is held up on the network
    /// (the client is cut off: it cannot be expected to make progress).
    pub fn held_up(&self, c: usize) -> bool {
        let now = self.now();
        self.transit.iter().any(|(due, t)| {
            *due > now
                && match t {
                    Transit::Request { client, .. } | Transit::Reply { client, .. } => *client == c,
                    Transit::Message { .. } => false,
                }
        })
    }

    /// Script `name` run at Redis; an error reply fails the simulation.
    pub fn eval(&mut self, name: &str, keys: &[&str], argv: &[&[u8]]) -> Result<Reply, String> {
        self.explored.scripts += 1;
        let source = self.scripts.get(name).ok_or(format!("no script {name}"))?;
        let keys: Vec<&[u8]> = keys.iter().map(|k| k.as_bytes()).collect();
        let reply = self.engine.eval(source, &keys, argv);
        if let Reply::Error(e) = &reply {
            return Err(format!("{name} failed: {e}"));
        }
        Ok(reply)
    }

    /// The source of script `name` (to run on another server's engine).
    pub fn script(&self, name: &str) -> Result<String, String> {
        self.scripts
            .get(name)
            .cloned()
            .ok_or(format!("no script {name}"))
    }

    /// A command on the model Redis, as the checks look at it.
    pub fn redis(&mut self, args: &[&[u8]]) -> Reply {
        let args: Vec<Vec<u8>> = args.iter().map(|a| a.to_vec()).collect();
        self.engine.store.borrow_mut().call(&args)
    }

    /// Whether `key` exists.
    pub fn exists(&mut self, key: &str) -> bool {
        self.engine
            .store
            .borrow_mut()
            .entry(key.as_bytes())
            .is_some()
    }

    /// The keys left in Redis but `kept`.
    pub fn left(&mut self, kept: &[&str]) -> Vec<String> {
        self.engine
            .store
            .borrow_mut()
            .dump()
            .into_iter()
            .map(|(k, _)| String::from_utf8_lossy(&k).into_owned())
            .filter(|k| !kept.contains(&k.as_str()))
            .collect()
    }
}

/// A simulation's clients, as the world drives them.
pub trait Model {
    /// A request as it travels: what the client asked for.
    type Req: Clone + Debug;
    fn world(&mut self) -> &mut World<Self::Req>;
    fn clients(&self) -> usize;
    /// The client's lease (a pause lasts up to three of them).
    fn lease(&self, c: usize) -> u64;
    fn crashed(&self, c: usize) -> bool;
    /// Client `c`'s phase, as [`World::see`] tells states apart.
    fn phase(&self, c: usize) -> u64;
    fn crash(&mut self, c: usize);
    fn paused_until(&self, c: usize) -> u64;
    fn pause(&mut self, c: usize, until: u64);
    /// Client `c` does what is due (nothing while a call is in flight,
    /// paused or crashed).
    fn act(&mut self, c: usize) -> Result<(), String>;
    /// The script of `req` of client `c`, run at Redis.
    fn run(&mut self, c: usize, req: &Self::Req) -> Result<Reply, String>;
    /// When client `c` sent the request in flight.
    fn sent_at(&self, c: usize) -> u64;
    /// Client `c` has its reply (or knows it lost it): nothing in flight.
    fn replied(&mut self, c: usize);
    /// A reply that never came.
    fn lost(&mut self, c: usize, req: Self::Req);
    fn answer(
        &mut self,
        c: usize,
        req: Self::Req,
        sent_at: u64,
        reply: Reply,
    ) -> Result<(), String>;
    fn message(&mut self, c: usize, payload: String) -> Result<(), String>;
    /// The clients listening on `channel`.
    fn subscribers(&self, channel: &str) -> Vec<usize>;
    /// The `failover` fault: the primary fails over to its replica (a
    /// simulation of several servers may restart one instead).
    fn failover(&mut self) {
        self.world().failover();
    }
}

/// The parts of [`Model`] that a simulation whose clients each have a
/// `lease`, a `paused_until`, a `state` with `State::Crashed` and one call
/// in flight (`inflight`: the call and when it was sent) writes the same
/// way; its `Req` is `$req`.
macro_rules! one_call_clients {
    ($req:ty) => {
        type Req = $req;

        fn world(&mut self) -> &mut World<$req> {
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
            self.clients[c].state = State::Crashed;
        }

        fn phase(&self, c: usize) -> u64 {
            let cl = &self.clients[c];
            let mut h = std::hash::DefaultHasher::new();
            std::hash::Hash::hash(&std::mem::discriminant(&cl.state), &mut h);
            std::hash::Hash::hash(&cl.inflight.is_some(), &mut h);
            std::hash::Hasher::finish(&h)
        }

        fn paused_until(&self, c: usize) -> u64 {
            self.clients[c].paused_until
        }

        fn pause(&mut self, c: usize, until: u64) {
            self.clients[c].paused_until = until;
        }

        fn sent_at(&self, c: usize) -> u64 {
            self.clients[c].inflight.as_ref().map_or(0, |i| i.1)
        }

        fn replied(&mut self, c: usize) {
            self.clients[c].inflight = None;
        }
    };
}
pub(crate) use one_call_clients;

/// [`Simulation`] and [`Knobs`] for a simulation's `Sim` and its `Config`
/// (with `steps`, `clients` and `faults`), over `Sim`'s own `new`, `check`
/// and `wind_down`: written alike by every simulation.
macro_rules! simulation {
    () => {
        impl world::Simulation for Sim {
            type Config = Config;

            fn new(seed: u64, cfg: Config, scripts: Scripts) -> Sim {
                Sim::new(seed, cfg, scripts)
            }

            fn steps(&self) -> usize {
                self.cfg.steps
            }

            fn check(&mut self) -> Result<(), String> {
                Sim::check(self)
            }

            fn wind_down(&mut self) -> Result<(), String> {
                Sim::wind_down(self)
            }
        }

        impl world::Knobs for Config {
            fn knobs(&mut self) -> (&mut usize, &mut usize, &mut Faults) {
                (&mut self.steps, &mut self.clients, &mut self.faults)
            }
        }
    };
}
pub(crate) use simulation;

/// One step of the schedule: the clock advances, a client acts, something
/// on its way arrives — or (with `faults`) Redis's clock steps back, a
/// client pauses or crashes.
pub fn step<M: Model>(m: &mut M, faults: bool) -> Result<(), String> {
    let clients = m.clients() as u64;
    let w = m.world();
    w.explored.steps += 1;
    let f = w.faults;
    if f.failover > 0 && w.rng.chance(50) {
        w.replicate();
    }
    match w.rng.below(100) {
        0 if faults && w.rng.chance(f.clock_back) => {
            let back = w.rng.below(2_000) * 1000;
            w.engine.store.borrow_mut().now_us -= back;
            w.stepped_back_ms += back / 1000;
            w.explored.clock_jumps += 1;
            w.note(format!("redis's clock steps back {} ms", back / 1000));
        }
        1 if faults && f.failover > 0 && w.rng.chance(f.failover) => m.failover(),
        0..=24 => {
            let ms = if w.rng.chance(5) {
                w.rng.below(4000)
            } else {
                w.rng.below(60)
            };
            w.advance(ms);
        }
        25..=54 => {
            let c = w.rng.below(clients) as usize;
            m.act(c)?;
        }
        55..=94 => {
            let now = w.now();
            let due: Vec<usize> = (0..w.transit.len())
                .filter(|&i| w.transit[i].0 <= now)
                .collect();
            if !due.is_empty() {
                let i = due[w.rng.below(due.len() as u64) as usize];
                let (_, t) = w.transit.swap_remove(i);
                deliver(m, t, faults)?;
            }
        }
        95..=97 if faults && f.pause > 0 && w.rng.chance(f.pause) => {
            let c = w.rng.below(clients) as usize;
            let lease = m.lease(c);
            let w = m.world();
            let ms = w.rng.below(3 * lease);
            let until = w.now() + ms;
            w.explored.pauses += 1;
            w.note(format!("c{c} paused {ms} ms"));
            m.pause(c, until);
        }
        98..=99 if faults && f.crash > 0 && w.rng.chance(f.crash) => {
            let c = w.rng.below(clients) as usize;
            if !m.crashed(c) {
                m.crash(c);
                let w = m.world();
                w.explored.crashes += 1;
                w.note(format!("c{c} crashed"));
            }
        }
        _ => {}
    }
    Ok(())
}

/// `t` arrives: a request runs its script at Redis (and what the script
/// published goes out), a reply or message reaches its client — unless the
/// client crashed, is paused (it waits), or (with `faults`) it is lost.
pub fn deliver<M: Model>(m: &mut M, t: Transit<M::Req>, faults: bool) -> Result<(), String> {
    match t {
        Transit::Request { client, req } => {
            let reply = m.run(client, &req)?;
            let sent_at = m.sent_at(client);
            m.world()
                .note(format!("redis ran c{client} {req:?} → {reply:?}"));
            publish(m);
            m.world().travel(Transit::Reply {
                client,
                req,
                sent_at,
                reply,
            });
        }
        Transit::Reply {
            client,
            req,
            sent_at,
            reply,
        } => {
            if m.crashed(client) {
                return Ok(());
            }
            if m.paused_until(client) > m.world().now() {
                m.world().travel(Transit::Reply {
                    client,
                    req,
                    sent_at,
                    reply,
                });
                return Ok(());
            }
            m.replied(client);
            let w = m.world();
            if faults && w.rng.chance(w.faults.lost_reply) {
                w.explored.lost_replies += 1;
                w.note(format!("c{client} lost the reply to {req:?}"));
                m.lost(client, req);
                return Ok(());
            }
            m.answer(client, req, sent_at, reply)?;
        }
        Transit::Message { client, payload } => {
            if m.crashed(client) {
                return Ok(());
            }
            if m.paused_until(client) > m.world().now() {
                m.world().travel(Transit::Message { client, payload });
                return Ok(());
            }
            let w = m.world();
            if faults && w.rng.chance(w.faults.lost_message) {
                w.explored.lost_messages += 1;
                w.note(format!("c{client} lost the message {payload}"));
                return Ok(());
            }
            // (No draw when off: the seeds' schedules stay as they were.)
            if faults && w.faults.duplicate_message > 0 && w.rng.chance(w.faults.duplicate_message)
            {
                w.explored.duplicated_messages += 1;
                w.note(format!("c{client} will hear {payload} again"));
                w.travel(Transit::Message {
                    client,
                    payload: payload.clone(),
                });
            }
            m.message(client, payload)?;
        }
    }
    Ok(())
}

/// What the scripts published goes to its subscribers.
fn publish<M: Model>(m: &mut M) {
    let published = std::mem::take(&mut m.world().engine.store.borrow_mut().published);
    for (channel, payload) in published {
        let channel = String::from_utf8_lossy(&channel).into_owned();
        for c in m.subscribers(&channel) {
            let payload = String::from_utf8_lossy(&payload).into_owned();
            let w = m.world();
            w.explored.grants += 1;
            w.travel(Transit::Message { client: c, payload });
        }
    }
}

/// The wind-down's tick: 10 ms pass and one thing due arrives (no faults).
pub fn tick<M: Model>(m: &mut M) -> Result<(), String> {
    let w = m.world();
    w.advance(10);
    let now = w.now();
    if let Some(i) = w.transit.iter().position(|(due, _)| *due <= now) {
        let (_, t) = w.transit.swap_remove(i);
        deliver(m, t, false)?;
    }
    Ok(())
}

/// What the shrinker may turn down in a simulation's configuration: the
/// steps of the schedule, the clients, the faults.
pub trait Knobs: Clone + Debug {
    fn knobs(&mut self) -> (&mut usize, &mut usize, &mut Faults);
}

/// A simulation a seed and a configuration make: its invariants (checked
/// after every step) and its wind-down (every client stops, what is in
/// flight lands, the leases run out: what may be left).
pub trait Simulation: Model + Sized {
    type Config: Knobs;
    fn new(seed: u64, cfg: Self::Config, scripts: Scripts) -> Self;
    fn steps(&self) -> usize;
    fn check(&mut self) -> Result<(), String>;
    fn wind_down(&mut self) -> Result<(), String>;
}

/// Runs `sim`'s schedule, its invariants checked after every step, then
/// its wind-down; the first broken invariant.
pub fn run<S: Simulation>(sim: &mut S) -> Result<(), String> {
    for _ in 0..sim.steps() {
        step(sim, true)?;
        sim.check()?;
        let phases: Vec<u64> = (0..sim.clients()).map(|c| sim.phase(c)).collect();
        sim.world().see(&phases);
    }
    sim.wind_down()
}

/// Runs `seeds` of simulation `S` with `cfg` on `scripts` (see
/// [`explore`]).
pub fn explore_with<S: Simulation>(
    seeds: impl IntoIterator<Item = u64>,
    cfg: &S::Config,
    scripts: &Scripts,
) -> Result<Explored, String> {
    explore(seeds, cfg, |seed, cfg| {
        let mut sim = S::new(seed, cfg.clone(), scripts.clone());
        let result = run(&mut sim);
        let w = sim.world();
        Run {
            result,
            explored: w.explored.clone(),
            states: std::mem::take(&mut w.states),
            trace: std::mem::take(&mut w.trace),
        }
    })
}

/// One run: how it ended, what it explored (and the states it saw), its
/// trace.
pub struct Run {
    pub result: Result<(), String>,
    pub explored: Explored,
    pub states: HashSet<u64>,
    pub trace: Vec<String>,
}

/// Runs `seeds` with `cfg` (`run` one of them); the first failure with its
/// seed, the end of its trace, and the shortest run found that fails the
/// same way ([`shrink`]) with its whole trace.
pub fn explore<C: Knobs>(
    seeds: impl IntoIterator<Item = u64>,
    cfg: &C,
    run: impl Fn(u64, &C) -> Run,
) -> Result<Explored, String> {
    let mut total = Explored::default();
    let mut states = HashSet::new();
    for seed in seeds {
        let r = run(seed, cfg);
        states.extend(r.states);
        if let Err(e) = r.result {
            let n = super::tail_lines();
            let tail = r.trace[r.trace.len().saturating_sub(n)..].join("\n");
            let (small, trace) = shrink(seed, cfg, &e, &run);
            return Err(format!(
                "seed {seed}: {e}\n(replay: the same seed; the end of its trace)\n{tail}\n\
                 shortest run found failing so, {} lines: {small:?}\n{}",
                trace.len(),
                trace[trace.len().saturating_sub(4 * n)..].join("\n"),
            ));
        }
        total.add(&r.explored);
    }
    total.states = states.len() as u64;
    Ok(total)
}

/// The same failure, digits aside ("c2 counts on 2999 ms more" is "c0
/// counts on 40 ms more").
fn shape(e: &str) -> String {
    let first = e.lines().next().unwrap_or("");
    first.chars().filter(|c| !c.is_ascii_digit()).collect()
}

/// Shrinks a failing run of `seed`: fewer steps (the schedule is the same
/// up to where it stops, so a failure at step k needs k steps), then each
/// fault turned off, then fewer clients, then fewer steps again — keeping
/// each change that still fails the same way. Bounded: at most 60 runs.
/// The smallest configuration found and its trace.
pub fn shrink<C: Knobs>(
    seed: u64,
    cfg: &C,
    err: &str,
    run: &impl Fn(u64, &C) -> Run,
) -> (C, Vec<String>) {
    let want = shape(err);
    let mut budget = 60;
    let mut fails = |c: &C| -> Option<Vec<String>> {
        if budget == 0 {
            return None;
        }
        budget -= 1;
        let r = run(seed, c);
        match r.result {
            Err(e) if shape(&e) == want => Some(r.trace),
            _ => None,
        }
    };
    let mut best = cfg.clone();
    let mut trace = fails(&best).unwrap_or_default();
    let fewer_steps = |best: &mut C,
                       trace: &mut Vec<String>,
                       fails: &mut dyn FnMut(&C) -> Option<Vec<String>>| {
        let (mut lo, mut hi) = (1, *best.knobs().0);
        while lo < hi {
            let mid = (lo + hi) / 2;
            let mut c = best.clone();
            *c.knobs().0 = mid;
            match fails(&c) {
                Some(t) => {
                    hi = mid;
                    *best = c;
                    *trace = t;
                }
                None => lo = mid + 1,
            }
        }
    };
    fewer_steps(&mut best, &mut trace, &mut fails);
    for i in 0..7 {
        let mut c = best.clone();
        let f = c.knobs().2;
        let knob = [
            &mut f.clock_back,
            &mut f.delay,
            &mut f.lost_reply,
            &mut f.lost_message,
            &mut f.duplicate_message,
            &mut f.pause,
            &mut f.crash,
        ];
        if *knob[i] == 0 {
            continue;
        }
        *knob[i] = 0;
        if let Some(t) = fails(&c) {
            best = c;
            trace = t;
        }
    }
    for n in 1..*best.clone().knobs().1 {
        let mut c = best.clone();
        *c.knobs().1 = n;
        if let Some(t) = fails(&c) {
            best = c;
            trace = t;
            break;
        }
    }
    fewer_steps(&mut best, &mut trace, &mut fails);
    (best, trace)
}
