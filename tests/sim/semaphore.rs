//! The semaphore under simulation: model clients that follow its protocol
//! as `docs/wire.md` and `raw::permits` describe it — acquire `k` permits
//! with ids of their own and a place in the semaphore's line, confirm the
//! place, take a grant naming their place from the client's grant channel
//! (held from the send time of the attempt that left them waiting, for the
//! grant's lease, if less than half of it is gone), renew the permits every
//! third of the lease, release them, and undo a call whose reply was lost
//! (leave the place, giving back what a grant gave) — against the exact
//! scripts, over the model Redis, with the plain lock's faults ([`Faults`]).
//!
//! Checked after every step: the permits clients count on by their own
//! views never exceed the semaphore's total, and the lease table keeps each
//! counted permit at least as long as its view; at the end, nothing but the
//! counter is left.

use super::store::Reply;
use super::world::{self, Faults, Model, Scripts, Transit, World};

const N: &str = "sem";
const T: &str = "{sem}:timeout";
const C: &str = "redisson_sc:{sem}";
const L: &str = "leasehold_sline:{sem}";
const P: &str = "leasehold_sline:{sem}:places";
const GRANT_PREFIX: &str = "leasehold_sgrant:{sem}:";
const PERMITS: u64 = 2;
const PLACE_LEASE: u64 = 3000;
const GRANT_LEASE: u64 = 3000;

#[derive(Clone, Debug)]
pub struct Config {
    pub clients: usize,
    pub steps: usize,
    pub faults: Faults,
    /// A client-step mutation: a grant's permits counted on though the
    /// waiter's place was found new since (the rule before the simulator
    /// found a grant delayed past its lease).
    pub trust_stale_grants: bool,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    Acquire { place: String },
    Renew,
    Release,
    Leave { place: String },
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
    /// Permits asked for, and their ids (16 bytes each) this acquisition.
    k: u64,
    ids: Vec<u8>,
    state: State,
    inflight: Option<(Op, u64)>,
    paused_until: u64,
    /// The place (and ids) an acquire whose reply was lost may have taken.
    unsettled: Option<(String, Vec<u8>)>,
    confirmed_at: u64,
    acquisitions: u64,
    grants: Vec<String>,
    sent_with_place: u32,
    stale_grants: bool,
}

/// A request: the operation, and the permits' ids it names (16 bytes
/// each).
#[derive(Clone)]
pub struct Call {
    op: Op,
    ids: Vec<u8>,
}

impl std::fmt::Debug for Call {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.op.fmt(f)
    }
}

pub struct Sim {
    cfg: Config,
    clients: Vec<Client>,
    pub w: World<Call>,
}

impl Sim {
    pub fn new(seed: u64, cfg: Config, scripts: Scripts) -> Sim {
        let mut w = World::new(seed, cfg.faults, scripts);
        let rng = &mut w.rng;
        let clients = (0..cfg.clients)
            .map(|i| {
                let id = format!("0000000{i}-0000-8000-8000-00000000000{i}");
                Client {
                    owner: format!("{id}:1"),
                    id,
                    lease: *rng.pick(&[900, 3000, 10_000]),
                    k: 1,
                    ids: Vec::new(),
                    state: State::Idle,
                    inflight: None,
                    paused_until: 0,
                    unsettled: None,
                    confirmed_at: 0,
                    acquisitions: 0,
                    grants: Vec::new(),
                    sent_with_place: 0,
                    stale_grants: false,
                }
            })
            .collect();
        let total = PERMITS.to_string();
        let r = w.eval("semaphore set permits", &KEYS, &[total.as_bytes(), b"0"]);
        assert_eq!(r, Ok(Reply::Int(1)), "set permits");
        Sim { cfg, clients, w }
    }

    fn act(&mut self, c: usize, acquire: bool) -> Result<(), String> {
        let now = self.w.now();
        let cl = &self.clients[c];
        if cl.inflight.is_some() || cl.paused_until > now || matches!(cl.state, State::Crashed) {
            return Ok(());
        }
        let op = match cl.state.clone() {
            State::Idle if cl.unsettled.is_some() => {
                let (place, ids) = self.clients[c].unsettled.take().unwrap();
                self.clients[c].ids = ids;
                Op::Leave { place }
            }
            State::Idle => {
                if !acquire || !self.w.rng.chance(40) {
                    return Ok(());
                }
                let k = 1 + self.w.rng.below(PERMITS);
                let cl = &mut self.clients[c];
                cl.acquisitions += 1;
                cl.k = k;
                cl.ids = (0..k)
                    .flat_map(|j| format!("c{c}a{:09}p{j:03}", cl.acquisitions).into_bytes())
                    .collect();
                cl.sent_with_place = 0;
                cl.stale_grants = false;
                let grant = cl.lease.min(GRANT_LEASE);
                let place = cl.lease.clamp(300, PLACE_LEASE);
                Op::Acquire {
                    place: format!("{}#{}@{grant}/{place}", cl.owner, cl.acquisitions),
                }
            }
            State::Waiting { place, confirm_at } if now >= confirm_at => Op::Acquire { place },
            State::Holding {
                until, release_at, ..
            } if until <= now || now >= release_at => {
                self.clients[c].state = State::Idle;
                Op::Release
            }
            State::Holding { renew_at, .. } if now >= renew_at => Op::Renew,
            _ => return Ok(()),
        };
        self.send(c, op);
        Ok(())
    }

    fn send(&mut self, c: usize, op: Op) {
        let now = self.w.now();
        let cl = &mut self.clients[c];
        if matches!(op, Op::Acquire { .. }) {
            cl.grants.clear();
            cl.sent_with_place += 1;
        }
        cl.inflight = Some((op.clone(), now));
        let ids = cl.ids.clone();
        self.w.note(format!("c{c} sends {op:?}"));
        let req = Call { op, ids };
        self.w.travel(Transit::Request { client: c, req });
    }

    fn run_script(&mut self, c: usize, op: &Op, ids: &[u8]) -> Result<Reply, String> {
        let cl = &self.clients[c];
        let (lease, k) = (cl.lease.to_string(), cl.k.to_string());
        let (name, argv): (&str, Vec<Vec<u8>>) = match op {
            Op::Acquire { place } => (
                "semaphore acquire",
                vec![
                    k.into_bytes(),
                    lease.into_bytes(),
                    place.clone().into_bytes(),
                    ids.to_vec(),
                ],
            ),
            Op::Release => ("semaphore release", vec![ids.to_vec()]),
            Op::Leave { place } => (
                "semaphore leave",
                vec![place.clone().into_bytes(), ids.to_vec()],
            ),
            Op::Renew => (
                "renew",
                vec![lease.into_bytes(), ids.to_vec(), b"p".to_vec()],
            ),
        };
        let argv: Vec<&[u8]> = argv.iter().map(|a| &a[..]).collect();
        let keys: &[&str] = if name == "renew" { &[T] } else { &KEYS };
        self.w.eval(name, keys, &argv)
    }

    fn answer(&mut self, c: usize, op: Op, sent_at: u64, reply: Reply) -> Result<(), String> {
        let now = self.w.now();
        let cl = &mut self.clients[c];
        let items = match &reply {
            Reply::Array(items) => items.clone(),
            _ => Vec::new(),
        };
        match op {
            Op::Acquire { place } => match items.as_slice() {
                [Reply::Int(1)] => {
                    let until = sent_at + cl.lease - 1;
                    if until <= now {
                        cl.state = State::Idle;
                        cl.unsettled = Some((place, cl.ids.clone()));
                        return Ok(());
                    }
                    self.hold(c, until);
                }
                [Reply::Int(0), Reply::Int(wait), ..] => {
                    let joined = matches!(items.get(4), Some(Reply::Int(1)));
                    if joined && cl.sent_with_place > 1 && !self.cfg.trust_stale_grants {
                        cl.stale_grants = true;
                    }
                    cl.confirmed_at = sent_at;
                    let third = cl.lease.clamp(300, PLACE_LEASE) / 3;
                    let wait = if *wait < 0 {
                        third
                    } else {
                        (*wait as u64).clamp(1, third)
                    };
                    cl.state = State::Waiting {
                        place,
                        confirm_at: now + wait,
                    };
                    self.take_grants(c);
                }
                other => return Err(format!("c{c}: acquire answered {other:?}")),
            },
            Op::Renew => {
                if let State::Holding {
                    until, release_at, ..
                } = cl.state
                {
                    cl.state = if reply == Reply::Int(1) {
                        let until = until.max(sent_at + cl.lease - 1);
                        State::Holding {
                            until,
                            renew_at: now + cl.lease / 3,
                            release_at,
                        }
                    } else {
                        State::Holding {
                            until: now,
                            renew_at: u64::MAX,
                            release_at: now,
                        }
                    };
                }
            }
            Op::Release => {}
            Op::Leave { .. } => {}
        }
        Ok(())
    }

    fn hold(&mut self, c: usize, until: u64) {
        let now = self.w.now();
        let cl = &mut self.clients[c];
        let cs = 1 + self.w.rng.below(2 * cl.lease);
        cl.state = State::Holding {
            until,
            renew_at: now + (until - now) / 3,
            release_at: now + cs,
        };
        self.w.explored.acquired += 1;
        self.w.note(format!(
            "c{c} holds {} permits until {until}",
            self.clients[c].k
        ));
    }

    fn take_grants(&mut self, c: usize) {
        let now = self.w.now();
        let cl = &mut self.clients[c];
        let State::Waiting { place, .. } = &cl.state else {
            return;
        };
        if cl.inflight.is_some() {
            return;
        }
        let place = place.clone();
        let grants = std::mem::take(&mut cl.grants);
        if grants.contains(&place) {
            let lease = cl.lease.min(GRANT_LEASE);
            if cl.stale_grants || now - cl.confirmed_at >= lease / 2 {
                cl.state = State::Waiting {
                    place,
                    confirm_at: now,
                };
                return;
            }
            let until = cl.confirmed_at + lease - 1;
            self.w.note(format!("c{c} granted"));
            self.hold(c, until);
        }
    }

    fn check(&mut self) -> Result<(), String> {
        let now = self.w.now();
        let server_now = self.w.engine.store.borrow().now_ms();
        let mut counted = 0;
        for c in 0..self.clients.len() {
            let cl = &self.clients[c];
            let State::Holding { until, .. } = cl.state else {
                continue;
            };
            if until <= now {
                continue;
            }
            counted += cl.k;
            for id in cl.ids.chunks(16) {
                let score = self.w.engine.store.borrow_mut().call(&[
                    b"zscore".to_vec(),
                    T.into(),
                    id.to_vec(),
                ]);
                let left = match score {
                    Reply::Bulk(b) => {
                        String::from_utf8_lossy(&b).parse::<f64>().unwrap_or(0.0) as i64
                            - server_now as i64
                    }
                    _ => -1,
                };
                if left < (until - now) as i64 {
                    return Err(format!(
                        "c{c} counts on permit {} for {} ms more, the lease table keeps it {left} ms",
                        String::from_utf8_lossy(id),
                        until - now
                    ));
                }
            }
        }
        if counted > PERMITS {
            return Err(format!("{counted} permits counted on, of {PERMITS}"));
        }
        Ok(())
    }

    fn wind_down(&mut self) -> Result<(), String> {
        for _ in 0..100_000 {
            let busy = self.clients.iter().any(|cl| {
                !matches!(cl.state, State::Crashed)
                    && (cl.inflight.is_some()
                        || cl.unsettled.is_some()
                        || matches!(cl.state, State::Holding { .. } | State::Waiting { .. }))
            });
            if !busy && self.w.transit.is_empty() {
                break;
            }
            world::tick(self)?;
            let now = self.w.now();
            for c in 0..self.clients.len() {
                let cl = &self.clients[c];
                if cl.inflight.is_some() || cl.paused_until > now {
                    continue;
                }
                match cl.state.clone() {
                    State::Waiting { place, .. } => {
                        self.clients[c].state = State::Idle;
                        self.send(c, Op::Leave { place });
                    }
                    State::Holding { .. } => {
                        self.clients[c].state = State::Idle;
                        self.send(c, Op::Release);
                    }
                    State::Idle => self.act(c, false)?,
                    State::Crashed => {}
                }
            }
            self.check()?;
        }
        self.w.advance(60_000 + self.w.stepped_back_ms);
        // One more script (a release of nothing) takes expired permits back,
        // as any script does; then only the counter may be left.
        self.w.eval("semaphore release", &KEYS, &[b""])?;
        let left = self.w.left(&[N]);
        if !left.is_empty() {
            return Err(format!("left in Redis after every lease ran out: {left:?}"));
        }
        let avail = self.w.redis(&[b"get", N.as_bytes()]);
        if avail != Reply::Bulk(PERMITS.to_string().into_bytes()) {
            return Err(format!("the counter ends at {avail:?}, not {PERMITS}"));
        }
        Ok(())
    }
}

const KEYS: [&str; 5] = [N, T, C, L, P];

impl Model for Sim {
    world::one_call_clients!(Call);

    fn act(&mut self, c: usize) -> Result<(), String> {
        Sim::act(self, c, true)
    }

    fn run(&mut self, c: usize, req: &Call) -> Result<Reply, String> {
        self.run_script(c, &req.op, &req.ids)
    }

    fn lost(&mut self, c: usize, req: Call) {
        let cl = &mut self.clients[c];
        match req.op {
            Op::Acquire { place } => {
                cl.unsettled = Some((place, cl.ids.clone()));
                cl.state = State::Idle;
            }
            Op::Release | Op::Leave { .. } => self.send(c, req.op),
            Op::Renew => {}
        }
    }

    fn answer(&mut self, c: usize, req: Call, sent_at: u64, reply: Reply) -> Result<(), String> {
        Sim::answer(self, c, req.op, sent_at, reply)
    }

    fn message(&mut self, c: usize, payload: String) -> Result<(), String> {
        self.clients[c].grants.push(payload);
        self.take_grants(c);
        Ok(())
    }

    /// A grant goes to the client whose channel it names.
    fn subscribers(&self, channel: &str) -> Vec<usize> {
        let id = channel.strip_prefix(GRANT_PREFIX);
        let to = self
            .clients
            .iter()
            .position(|cl| Some(cl.id.as_str()) == id);
        to.into_iter().collect()
    }
}

world::simulation!();

/// Runs `seeds`; the first failure with its seed, the end of its trace and
/// the shortest run found failing so. The acquisitions and grants.
pub fn explore(
    seeds: impl IntoIterator<Item = u64>,
    cfg: &Config,
    scripts: &Scripts,
) -> Result<(u64, u64), String> {
    let e = world::explore_with::<Sim>(seeds, cfg, scripts)?;
    Ok((e.acquired, e.grants))
}
