//! The read/write lock under simulation: model clients that follow its
//! protocol as `docs/wire.md` and the raw layer describe it — each
//! acquisition a read or a write; a refused writer enters the waiting
//! writers and confirms its intent every third of it, a refused reader
//! waits for the holder's expiry; both try again at once when the lock's
//! channel wakes them (a wake-up during an attempt counts after its reply);
//! renew a watchdog lease every third of it (a reader only its own timeout
//! keys), release (owner-checked, the owner's last hold), and undo an
//! acquire whose reply was lost (a writer leaves the waiting writers, then
//! either releases) — against the exact scripts, over the model Redis, with
//! the other simulations' faults.
//!
//! Checked after every step: a writer whose own lease view is unexpired is
//! alone; Redis keeps every view (a writer's field and the hash's expiry; a
//! reader's field, its own timeout key and the hash's expiry); writers come
//! first — no reader that holds nothing gets in while a waiting writer's
//! intent is alive; a free lock with a live waiter is taken within a bound;
//! and at the end nothing of the lock is left.

use super::store::Reply;
use super::world::{self, Faults, Model, Scripts, Transit, World};

const KEY: &str = "job";
const WRITERS: &str = "{job}:rwlock_write_waiters";
const CHANNEL: &str = "redisson_rwlock:{job}";
/// `rwlock::WRITER_INTENT`: how long a waiting writer's intent lives
/// unconfirmed, at most.
const INTENT: u64 = 5000;

#[derive(Clone, Debug)]
pub struct Config {
    pub clients: usize,
    pub steps: usize,
    pub faults: Faults,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    Acquire {
        write: bool,
    },
    Renew {
        write: bool,
    },
    Release {
        write: bool,
    },
    /// A waiting writer gives up: out of the waiting writers.
    Leave,
}

#[derive(Clone, Debug)]
enum State {
    Idle,
    Waiting {
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
    owner: String,
    lease: u64,
    /// This acquisition writes.
    write: bool,
    state: State,
    inflight: Option<(Op, u64)>,
    paused_until: u64,
    /// The lock's channel woke it since its last attempt was sent.
    woken: bool,
    /// What an acquire whose reply was lost leaves to undo, in order,
    /// before the next acquire.
    undo: Vec<Op>,
}

impl Client {
    fn timeouts(&self) -> String {
        format!("{{job}}:{}:rwlock_timeout", self.owner)
    }

    fn write_field(&self) -> String {
        format!("{}:write", self.owner)
    }
}

pub struct Sim {
    cfg: Config,
    clients: Vec<Client>,
    /// Since when the lock has been free while a live, unpaused client waits.
    free_since: Option<u64>,
    pub w: World<Op>,
}

impl Sim {
    pub fn new(seed: u64, cfg: Config, scripts: Scripts) -> Sim {
        let mut w = World::new(seed, cfg.faults, scripts);
        let clients = (0..cfg.clients)
            .map(|i| Client {
                owner: format!("0000000{i}-0000-8000-8000-00000000000{i}:1"),
                lease: *w.rng.pick(&[900, 3000, 10_000]),
                write: false,
                state: State::Idle,
                inflight: None,
                paused_until: 0,
                woken: false,
                undo: Vec::new(),
            })
            .collect();
        Sim {
            cfg,
            clients,
            free_since: None,
            w,
        }
    }

    fn act(&mut self, c: usize, acquire: bool) -> Result<(), String> {
        let now = self.w.now();
        let cl = &self.clients[c];
        if cl.inflight.is_some() || cl.paused_until > now || matches!(cl.state, State::Crashed) {
            return Ok(());
        }
        let write = cl.write;
        let op = match cl.state {
            State::Idle if !cl.undo.is_empty() => self.clients[c].undo.remove(0),
            State::Idle => {
                if !acquire || !self.w.rng.chance(40) {
                    return Ok(());
                }
                let write = self.w.rng.chance(40);
                self.clients[c].write = write;
                Op::Acquire { write }
            }
            State::Waiting { confirm_at } if now >= confirm_at => Op::Acquire { write },
            State::Holding {
                until, release_at, ..
            } if until <= now || now >= release_at => {
                self.clients[c].state = State::Idle;
                Op::Release { write }
            }
            State::Holding { renew_at, .. } if now >= renew_at => Op::Renew { write },
            _ => return Ok(()),
        };
        self.send(c, op);
        Ok(())
    }

    fn send(&mut self, c: usize, op: Op) {
        let now = self.w.now();
        let cl = &mut self.clients[c];
        if matches!(op, Op::Acquire { .. }) {
            cl.woken = false;
        }
        cl.inflight = Some((op.clone(), now));
        self.w.note(format!("c{c} sends {op:?}"));
        self.w.travel(Transit::Request { client: c, req: op });
    }

    /// The script of `op` for client `c`, with the arguments
    /// `protocol::rwlock` sends.
    fn run_script(&mut self, c: usize, op: &Op) -> Result<Reply, String> {
        let cl = &self.clients[c];
        let (owner, field, timeouts) = (cl.owner.clone(), cl.write_field(), cl.timeouts());
        let lease = cl.lease.to_string();
        let intent = cl.lease.clamp(300, INTENT).to_string();
        let (name, keys, argv): (&str, Vec<&str>, Vec<&str>) = match op {
            Op::Acquire { write: false } => (
                "read acquire",
                vec![KEY, &timeouts, WRITERS],
                vec![&lease, &owner, &field],
            ),
            Op::Acquire { write: true } => (
                "write acquire",
                vec![KEY, WRITERS],
                vec![&lease, &field, &owner, &intent],
            ),
            Op::Renew { write: false } => ("renew", vec![KEY, &timeouts], vec![&lease, &owner]),
            Op::Renew { write: true } => ("renew", vec![KEY], vec![&lease, &field]),
            Op::Release { write: false } => (
                "read release",
                vec![KEY, CHANNEL, &timeouts, "{job}", WRITERS],
                vec![&owner, "1", "0", "1", ">0"],
            ),
            Op::Release { write: true } => (
                "write release",
                vec![KEY, CHANNEL],
                vec![&field, "1", "1", ">0"],
            ),
            Op::Leave => (
                "cancel writer",
                vec![KEY, WRITERS, CHANNEL],
                vec![&field, "1"],
            ),
        };
        let argv: Vec<&[u8]> = argv.iter().map(|a| a.as_bytes()).collect();
        // Writers first: a reader that holds nothing does not get in while
        // a waiting writer's intent is alive.
        let writer_waits = *op == Op::Acquire { write: false } && self.live_writer();
        let reply = self.w.eval(name, &keys, &argv)?;
        if writer_waits && reply == Reply::Nil {
            return Err(format!(
                "c{c} read while a waiting writer's intent was alive"
            ));
        }
        Ok(reply)
    }

    /// Whether a waiting writer's intent is alive (by Redis's clock).
    fn live_writer(&mut self) -> bool {
        let now = self.w.engine.store.borrow().now_ms().to_string();
        let live = self.w.redis(&[
            b"zrangebyscore",
            WRITERS.as_bytes(),
            format!("({now}").as_bytes(),
            b"+inf",
        ]);
        matches!(live, Reply::Array(items) if !items.is_empty())
    }

    fn answer(&mut self, c: usize, op: Op, sent_at: u64, reply: Reply) -> Result<(), String> {
        let now = self.w.now();
        let cl = &mut self.clients[c];
        match op {
            Op::Acquire { write } => match reply {
                Reply::Nil => {
                    let until = sent_at + cl.lease - 1;
                    if until <= now {
                        // Arrived after its lease could have run out: undo.
                        self.undo(c, write);
                        return Ok(());
                    }
                    let cs = 1 + self.w.rng.below(2 * cl.lease);
                    cl.state = State::Holding {
                        until,
                        renew_at: now + (until - now) / 3,
                        release_at: now + cs,
                    };
                    self.w.explored.acquired += 1;
                    self.w.note(format!("c{c} holds until {until}"));
                }
                Reply::Int(ms) if ms != -3 => {
                    // A writer confirms its intent every third of it; a
                    // reader waits for the holder's expiry (the watchdog
                    // lease when none is known) — or a wake-up.
                    let cap = if write {
                        cl.lease.clamp(300, INTENT) / 3
                    } else {
                        cl.lease
                    };
                    let wait = match (cl.woken, ms) {
                        (true, _) => 0,
                        (false, ms) if ms < 0 => cap,
                        (false, ms) => (ms as u64).clamp(1, cap),
                    };
                    cl.state = State::Waiting {
                        confirm_at: now + wait,
                    };
                }
                other => return Err(format!("c{c}: acquire answered {other:?}")),
            },
            Op::Renew { .. } => {
                if let State::Holding {
                    until, release_at, ..
                } = cl.state
                {
                    cl.state = if reply == Reply::Int(1) {
                        State::Holding {
                            until: until.max(sent_at + cl.lease - 1),
                            renew_at: now + cl.lease / 3,
                            release_at,
                        }
                    } else {
                        // Lost: the guard is told; its drop releases.
                        State::Holding {
                            until: now,
                            renew_at: u64::MAX,
                            release_at: now,
                        }
                    };
                }
            }
            Op::Release { .. } | Op::Leave => {}
        }
        Ok(())
    }

    /// An acquire whose reply never came (or came too late) is undone
    /// before the next: a writer leaves the waiting writers, then the hold
    /// it may have taken is released (owner-checked).
    fn undo(&mut self, c: usize, write: bool) {
        let cl = &mut self.clients[c];
        cl.state = State::Idle;
        if write {
            cl.undo.push(Op::Leave);
        }
        cl.undo.push(Op::Release { write });
    }

    /// The invariants, now.
    fn check(&mut self) -> Result<(), String> {
        let now = self.w.now();
        let views: Vec<(usize, bool, u64)> = (0..self.clients.len())
            .filter_map(|c| match self.clients[c].state {
                State::Holding { until, .. } if until > now => {
                    Some((c, self.clients[c].write, until))
                }
                _ => None,
            })
            .collect();
        if views.len() > 1 && views.iter().any(|v| v.1) {
            return Err(format!("a writer and another holder at once: {views:?}"));
        }
        let server_now = self.w.engine.store.borrow().now_ms();
        for (c, write, until) in views {
            let left = until - now;
            let cl = &self.clients[c];
            let (owner, field, timeout) = (
                cl.owner.clone(),
                cl.write_field(),
                format!("{}:1", cl.timeouts()),
            );
            let pttl = |w: &mut World<Op>, key: &str| match w.redis(&[b"pttl", key.as_bytes()]) {
                Reply::Int(-1) => i64::MAX,
                Reply::Int(n) => n,
                _ => -2,
            };
            let hash = pttl(&mut self.w, KEY);
            let (ours, own) = if write {
                let mode = self.w.redis(&[b"hget", KEY.as_bytes(), b"mode"]);
                let f = self
                    .w
                    .redis(&[b"hexists", KEY.as_bytes(), field.as_bytes()]);
                (
                    mode == Reply::Bulk(b"write".to_vec()) && f == Reply::Int(1),
                    hash,
                )
            } else {
                let f = self
                    .w
                    .redis(&[b"hexists", KEY.as_bytes(), owner.as_bytes()]);
                (f == Reply::Int(1), pttl(&mut self.w, &timeout))
            };
            if !ours || hash < left as i64 || own < left as i64 {
                return Err(format!(
                    "c{c} ({}) counts on {left} ms more, Redis keeps the hash {hash} ms, its own {own} ms (ours: {ours}; server clock {server_now})",
                    if write { "writer" } else { "reader" }
                ));
            }
        }
        // Liveness: a free lock with a live, unpaused waiter is taken
        // within a dead writer's intent (readers wait for it), three
        // confirmations and the longest lease. (A waiter cut off — paused,
        // or its call held up on the network — is not counted.)
        let waiting = (0..self.clients.len()).any(|c| {
            let cl = &self.clients[c];
            matches!(cl.state, State::Waiting { .. })
                && cl.paused_until <= now
                && !self.w.held_up(c)
        });
        if waiting && !self.w.exists(KEY) {
            let since = *self.free_since.get_or_insert(now);
            if now - since > 3 * INTENT + 10_000 {
                return Err(format!(
                    "the lock has been free for {} ms while clients wait",
                    now - since
                ));
            }
        } else {
            self.free_since = None;
        }
        Ok(())
    }

    /// Every client stops acquiring: what is in flight lands, holders
    /// release, waiting writers leave; then the leases run out and nothing
    /// of the lock may be left.
    fn wind_down(&mut self) -> Result<(), String> {
        for _ in 0..100_000 {
            let busy = self.clients.iter().any(|cl| {
                !matches!(cl.state, State::Crashed)
                    && (cl.inflight.is_some()
                        || !cl.undo.is_empty()
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
                match cl.state {
                    State::Waiting { .. } => {
                        self.clients[c].state = State::Idle;
                        if self.clients[c].write {
                            self.send(c, Op::Leave);
                        }
                    }
                    State::Holding { .. } => {
                        self.clients[c].state = State::Idle;
                        let write = self.clients[c].write;
                        self.send(c, Op::Release { write });
                    }
                    State::Idle => self.act(c, false)?,
                    State::Crashed => {}
                }
            }
            self.check()?;
        }
        self.w.advance(60_000 + self.w.stepped_back_ms);
        let left = self.w.left(&[]);
        if !left.is_empty() {
            return Err(format!("left in Redis after every lease ran out: {left:?}"));
        }
        Ok(())
    }
}

impl Model for Sim {
    world::one_call_clients!(Op);

    fn act(&mut self, c: usize) -> Result<(), String> {
        Sim::act(self, c, true)
    }

    fn run(&mut self, c: usize, op: &Op) -> Result<Reply, String> {
        self.run_script(c, op)
    }

    fn lost(&mut self, c: usize, op: Op) {
        match op {
            Op::Acquire { write } => self.undo(c, write),
            // Sent again until answered: it must reach Redis.
            Op::Release { .. } | Op::Leave => self.send(c, op),
            // The next renewal (a third of the lease later) tries again.
            Op::Renew { .. } => {}
        }
    }

    fn answer(&mut self, c: usize, op: Op, sent_at: u64, reply: Reply) -> Result<(), String> {
        Sim::answer(self, c, op, sent_at, reply)
    }

    /// A wake-up: a waiting client tries again at once (after the reply of
    /// an attempt in flight).
    fn message(&mut self, c: usize, _payload: String) -> Result<(), String> {
        let now = self.w.now();
        let cl = &mut self.clients[c];
        cl.woken = true;
        if cl.inflight.is_none() {
            if let State::Waiting { .. } = cl.state {
                cl.state = State::Waiting { confirm_at: now };
            }
        }
        Ok(())
    }

    /// Every waiting client listens on the lock's channel.
    fn subscribers(&self, channel: &str) -> Vec<usize> {
        if channel != CHANNEL {
            return Vec::new();
        }
        (0..self.clients.len())
            .filter(|&c| {
                matches!(self.clients[c].state, State::Waiting { .. })
                    || matches!(self.clients[c].inflight, Some((Op::Acquire { .. }, _)))
            })
            .collect()
    }
}

world::simulation!();

/// Runs `seeds`; the first failure with its seed, the end of its trace and
/// the shortest run found failing so.
pub fn explore(
    seeds: impl IntoIterator<Item = u64>,
    cfg: &Config,
    scripts: &Scripts,
) -> Result<world::Explored, String> {
    world::explore_with::<Sim>(seeds, cfg, scripts)
}
