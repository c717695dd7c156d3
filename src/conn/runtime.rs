//! The tokio transport (feature `tokio`): a task's calls to the one server
//! sent on the tokio runtime it runs on, through the `redis` crate's
//! multiplexed connection — whose driver is a task of that same runtime, so
//! no other thread takes part in a round trip (a hop to an I/O thread and
//! back is two context switches, a third of the throughput on a busy CPU).
//! A connection belongs to the runtime that made it (its socket is
//! registered with that runtime's reactor): one per runtime, made on the
//! runtime's first call.
//!
//! A future dropped while its call is out: the call goes on in a task of
//! the same runtime, which hands its outcome to the call's `Forsaken` hook
//! once the reply came — or, should that task be dropped first (the runtime
//! shut down), or no reply come within the socket timeout (the runtime kept
//! but not driven again: nothing reads it), as no answer, by the timer
//! thread: then the undo is sent until Redis answers it twice, as for any
//! lost reply. Dropped while still connecting, nothing was sent, and the
//! hook is told so. A connection found dead (its driver gone: the server
//! closed it) is made again and the call sent once more, as a pooled one
//! that died idle is.
//!
//! Time is the library's timer thread's: a runtime needs no time driver. It
//! needs its I/O driver (`enable_io`, as `#[tokio::main]` gives): on a
//! runtime without one tokio panics when a socket is registered, which is
//! caught once, said in a warning, and that runtime's calls go through the
//! I/O threads (under `panic = "abort"` the process aborts).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, ErrorKind, RedisResult, ServerErrorKind, Value};
use tokio::runtime::{Handle, Id};

use super::transport::{Forsaken, MakeForsaken, Outcome};
use crate::park::{Park, Signal, Sleep};
use crate::protocol::{Call, Reply};

/// After a connection could not be made, the runtime's calls go through
/// the I/O threads this long (they meet the outage, and a call does not
/// wait for two connection attempts).
const BACKOFF: Duration = Duration::from_secs(1);

/// Connections kept, one per runtime (the oldest goes past this: a runtime
/// that was dropped leaves its own behind).
const RUNTIMES: usize = 16;

type Request = Pin<Box<dyn Future<Output = RedisResult<Value>> + Send>>;

/// Calls to one server on the calling task's tokio runtime.
pub(crate) struct Runtimes {
    client: redis::Client,
    /// How long a dropped call's reply is waited for before it is undone
    /// as a lost reply (see [`Drain`]).
    socket_timeout: Duration,
    state: Mutex<State>,
    /// Told when a connection was made or given up (the runtime's other
    /// first calls wait for it: one connection per runtime).
    connected: Signal,
    /// Whether a runtime was ever refused (the usual case, never: no lock
    /// taken to look).
    trouble: AtomicBool,
}

#[derive(Default)]
struct State {
    /// Each runtime's connection (its driver runs there).
    conns: Vec<(Id, Conn)>,
    /// Runtimes whose connection is being made.
    connecting: Vec<Id>,
    /// Runtimes without an I/O driver (nothing is sent on them).
    no_io: Vec<Id>,
    /// No connection is tried before this, after one failed.
    backoff_until: Option<Instant>,
}

/// Where a runtime's call goes: on this connection, or — no connection
/// (none to be had now) — another way.
enum Got {
    Con(Conn),
    Connect,
    None,
}

impl Runtimes {
    /// For the server `client` connects to, when it is reached over plain
    /// TCP (TLS and Unix sockets go through the I/O threads).
    pub(crate) fn new(client: &redis::Client, socket_timeout: Duration) -> Option<Runtimes> {
        let redis::ConnectionAddr::Tcp(..) = client.get_connection_info().addr() else {
            return None;
        };
        Some(Runtimes {
            client: client.clone(),
            socket_timeout,
            state: Mutex::new(State::default()),
            connected: Signal::new(),
            trouble: AtomicBool::new(false),
        })
    }

    /// Sends `call` on this task's runtime, waiting at most `connect` for a
    /// new connection and `io` for the reply — and nothing past `end`, what
    /// connecting took counted in: the reply, and whether the request went
    /// out. The call back, unsent, where it cannot go here.
    pub(crate) async fn call(
        &self,
        call: Call,
        (connect, io, end): (Duration, Duration, Option<Instant>),
        forsaken: Option<MakeForsaken<'_>>,
    ) -> Result<(RedisResult<Reply>, bool), Call> {
        let Ok(handle) = Handle::try_current() else {
            return Err(call);
        };
        let runtime = handle.id();
        // Dropped while connecting: nothing was sent — the hook is told.
        let mut unsent = Unsent(forsaken);
        for retry in [false, true] {
            let con = self.connection(runtime, connect).await;
            let io = end.map_or(io, |end| {
                io.min(end.saturating_duration_since(Instant::now()))
            });
            let Some(con) = con.filter(|_| !io.is_zero()) else {
                unsent.0 = None; // sent another way (or out of time there)
                return Err(call);
            };
            // Counted among the connection's calls until it ends.
            let busy = Busy::start(&con.in_flight);
            let mut flight = Flight {
                request: Some(request(con.con, &call)),
                forsaken: unsent.0.take(),
                polled: false,
                sent: false,
                patience: self.socket_timeout,
            };
            let reply = within(io, &mut flight).await;
            let sent = flight.sent;
            let reply = match reply {
                Some(reply) => reply,
                None => {
                    // No reply in time: the caller undoes it as a lost
                    // reply, not the hook as well.
                    flight.forsaken = None;
                    let timeout =
                        std::io::Error::new(std::io::ErrorKind::TimedOut, "no reply in time");
                    Err(timeout.into())
                }
            };
            if reply.as_ref().is_err_and(|e| e.is_unrecoverable_error()) {
                self.forget(runtime);
                // Refused at once (its driver gone), or broken on a
                // connection that sat idle before it — the server closed
                // it, restarted: what was sent never ran. Once more, on a
                // new connection.
                if (!sent || busy.was_idle) && !retry {
                    unsent.0 = forsaken;
                    continue;
                }
            }
            return Ok((reply.map(|value| Reply { value, acked: None }), sent));
        }
        Err(call)
    }

    /// `runtime`'s connection: the one it has, one made now (within
    /// `wait`), or the one another of its calls is making (waited for).
    /// `None` where none is to be had now: a runtime without an I/O
    /// driver, a backoff after a failed connect.
    async fn connection(&self, runtime: Id, wait: Duration) -> Option<Conn> {
        let until = Instant::now() + wait;
        let got = self
            .connected
            .wait(Park::Task, &self.state, Some(until), |st| {
                if let Some((_, con)) = st.conns.iter().find(|(id, _)| *id == runtime) {
                    return Some(Got::Con(con.clone()));
                }
                if st.connecting.contains(&runtime) {
                    return None; // another call of it connects: wait
                }
                let refused = self.trouble.load(Ordering::Relaxed)
                    && (st.no_io.contains(&runtime)
                        || st.backoff_until.is_some_and(|t| Instant::now() < t));
                if refused {
                    return Some(Got::None);
                }
                st.connecting.push(runtime);
                Some(Got::Connect)
            })
            .await;
        match got? {
            Got::Con(con) => Some(con),
            Got::None => None,
            Got::Connect => {
                // Told to the others however it ends (a dropped connect
                // too).
                let _told = Told(self, runtime);
                self.open(runtime, until.saturating_duration_since(Instant::now()))
                    .await
            }
        }
    }

    /// A broken connection (the server went away, the runtime's driver
    /// stopped) is made again on the runtime's next call.
    fn forget(&self, runtime: Id) {
        self.state.lock().conns.retain(|(id, _)| *id != runtime);
    }

    /// A new connection for `runtime`, within `wait`; `None` when none
    /// could be made (then a backoff), or the runtime has no I/O driver.
    async fn open(&self, runtime: Id, wait: Duration) -> Option<Conn> {
        // No timeouts of the crate's: they would need the runtime's time
        // driver. The connect is bounded here, each reply by the caller.
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(None)
            .set_response_timeout(None);
        let opening = self
            .client
            .get_multiplexed_async_connection_with_config(&config);
        let opened = within(wait, CatchUnwind(Box::pin(opening))).await;
        let mut st = self.state.lock();
        match opened {
            Some(Ok(Ok(con))) => {
                let con = Conn {
                    con,
                    in_flight: Arc::default(),
                };
                st.conns.retain(|(id, _)| *id != runtime);
                if st.conns.len() >= RUNTIMES {
                    st.conns.remove(0);
                }
                st.conns.push((runtime, con.clone()));
                Some(con)
            }
            Some(Err(())) => {
                tracing::warn!("leasehold: this tokio runtime has no I/O driver (enable_io); its tasks' round trips go through leasehold's I/O threads");
                st.no_io.push(runtime);
                self.trouble.store(true, Ordering::Relaxed);
                None
            }
            failed => {
                if let Some(Ok(Err(e))) = failed {
                    tracing::debug!(error = %e, "leasehold: could not connect on the task's runtime; using the I/O threads for a while");
                }
                st.backoff_until = Some(Instant::now() + BACKOFF);
                self.trouble.store(true, Ordering::Relaxed);
                None
            }
        }
    }
}

/// A connect under way for a runtime: its end (or the future's drop) is
/// told to the runtime's calls waiting for it.
struct Told<'a>(&'a Runtimes, Id);

impl Drop for Told<'_> {
    fn drop(&mut self) {
        let mut st = self.0.state.lock();
        st.connecting.retain(|id| *id != self.1);
        self.0.connected.notify_all();
    }
}

/// A call's hook while nothing of it is out (connecting): dropped then, it
/// tells the hook nothing was sent.
struct Unsent<'a>(Option<MakeForsaken<'a>>);

impl Drop for Unsent<'_> {
    fn drop(&mut self) {
        if let Some(make) = self.0.take() {
            make()(Outcome::NotSent);
        }
    }
}

/// A runtime's connection, and how many calls are out on it now.
#[derive(Clone)]
struct Conn {
    con: MultiplexedConnection,
    in_flight: Arc<AtomicUsize>,
}

/// One call out on a connection: counted until it ends.
struct Busy {
    in_flight: Arc<AtomicUsize>,
    /// No other call was out on it as this one began.
    was_idle: bool,
}

impl Busy {
    fn start(in_flight: &Arc<AtomicUsize>) -> Busy {
        Busy {
            in_flight: Arc::clone(in_flight),
            was_idle: in_flight.fetch_add(1, Ordering::Relaxed) == 0,
        }
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// `call` on `con`: its `EVALSHA`, and when the server does not know the
/// script (restarted, `SCRIPT FLUSH`: nothing ran) `SCRIPT LOAD`, then the
/// call once more. The request owns what it sends.
fn request(mut con: MultiplexedConnection, call: &Call) -> Request {
    let (cmd, source) = (call.cmd.clone(), call.source);
    Box::pin(async move {
        // An error reply comes as a value: made the error it is.
        let sent = con.send_packed_command(&cmd).await;
        match sent.and_then(Value::extract_error) {
            Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                let mut load = redis::cmd("SCRIPT");
                load.arg("LOAD").arg(source);
                let loaded = con.send_packed_command(&load).await;
                loaded.and_then(Value::extract_error)?;
                let sent = con.send_packed_command(&cmd).await;
                sent.and_then(Value::extract_error)
            }
            other => other,
        }
    })
}

/// A call under way. Dropped before it ended — its caller's future dropped
/// while it was out — it goes on in a task of the runtime ([`Drain`]),
/// whose end tells the hook; dropped before it was ever polled, nothing
/// was sent.
struct Flight<'a> {
    request: Option<Request>,
    forsaken: Option<MakeForsaken<'a>>,
    /// Polled once: the request was handed to the connection's driver
    /// (which sends it whatever becomes of this future) — unless it ended
    /// at once with a dead connection's error.
    polled: bool,
    /// The request may have gone out.
    sent: bool,
    /// How long its reply is waited for once its caller went away.
    patience: Duration,
}

impl Future for Flight<'_> {
    type Output = RedisResult<Value>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let Some(request) = self.request.as_mut() else {
            return Poll::Pending;
        };
        let polled = request.as_mut().poll(cx);
        let first = !self.polled;
        self.polled = true;
        // A driver that is gone refuses the request at once: not sent.
        self.sent |=
            !(first && matches!(&polled, Poll::Ready(Err(e)) if e.is_unrecoverable_error()));
        if polled.is_ready() {
            self.request = None;
            self.forsaken = None;
        }
        polled
    }
}

impl Drop for Flight<'_> {
    fn drop(&mut self) {
        let (Some(request), Some(make)) = (self.request.take(), self.forsaken.take()) else {
            return;
        };
        let forsaken = make();
        if !self.sent {
            forsaken(Outcome::NotSent);
            return;
        }
        let hook = Arc::new(Mutex::new(Some(forsaken)));
        // Should the runtime not be driven again (nothing reads the reply
        // there), the call is undone as a lost reply after the socket
        // timeout — as a call without a reply is — by the timer thread.
        let mut late = Sleep::until(Instant::now() + self.patience);
        let waker = std::task::Waker::from(Arc::new(Late(Arc::clone(&hook))));
        if late.register(&waker) {
            std::task::Wake::wake(Arc::new(Late(Arc::clone(&hook))));
        }
        let drain = Drain {
            request,
            hook,
            _late: late,
        };
        match Handle::try_current() {
            Ok(handle) => {
                handle.spawn(drain);
            }
            // Out of any runtime's context: no reply can be waited for.
            Err(_) => drop(drain),
        }
    }
}

/// A dropped call's hook, told once: by its [`Drain`], or [`Late`].
type Hook = Arc<Mutex<Option<Forsaken>>>;

/// The rest of a call whose caller went away, a task of its runtime: awaits
/// its reply, then tells the hook; dropped first (its runtime shut down),
/// tells it no answer came.
struct Drain {
    request: Request,
    hook: Hook,
    /// Tells the hook no answer came, should none come within the socket
    /// timeout (the runtime not driven: see [`Late`]).
    _late: Sleep,
}

impl Future for Drain {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let Poll::Ready(reply) = self.request.as_mut().poll(cx) else {
            return Poll::Pending;
        };
        tell(&self.hook, Outcome::of(&reply, true));
        Poll::Ready(())
    }
}

impl Drop for Drain {
    fn drop(&mut self) {
        tell(&self.hook, Outcome::Unknown);
    }
}

/// The timer thread's part of a [`Drain`]: no reply within the socket
/// timeout is a lost reply (its undo is sent until Redis answers it twice).
struct Late(Hook);

impl std::task::Wake for Late {
    fn wake(self: Arc<Self>) {
        tell(&self.0, Outcome::Unknown);
    }
}

fn tell(hook: &Hook, outcome: Outcome) {
    let told = hook.lock().take();
    if let Some(forsaken) = told {
        forsaken(outcome);
    }
}

/// `fut`'s output, or `None` when `wait` passed first (the library's timer
/// thread: no time driver needed).
async fn within<F: Future + Unpin>(wait: Duration, mut fut: F) -> Option<F::Output> {
    let mut sleep = Sleep::until(Instant::now() + wait);
    std::future::poll_fn(|cx| {
        if let Poll::Ready(out) = Pin::new(&mut fut).poll(cx) {
            return Poll::Ready(Some(out));
        }
        if sleep.register(cx.waker()) {
            return Poll::Ready(None);
        }
        Poll::Pending
    })
    .await
}

/// A future whose panics come out as `Err(())` (registering a socket on a
/// runtime without an I/O driver).
struct CatchUnwind<F>(Pin<Box<F>>);

impl<F: Future> Future for CatchUnwind<F> {
    type Output = Result<F::Output, ()>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let fut = self.0.as_mut();
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| fut.poll(cx))) {
            Ok(Poll::Ready(out)) => Poll::Ready(Ok(out)),
            Ok(Poll::Pending) => Poll::Pending,
            Err(_) => Poll::Ready(Err(())),
        }
    }
}
