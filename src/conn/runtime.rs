//! The tokio transport (feature `tokio`): a task's calls to the one server
//! sent by the task itself on the tokio runtime it runs on, on a connection
//! of that runtime's own — written, its reply awaited on the runtime's
//! reactor and read, no other task or thread taking part (a hop to a
//! driver task is two more wake-ups and an `epoll_wait` per call: the
//! `redis` crate's multiplexed connection measured 0.85–0.87× the blocking
//! pair where this is 0.9×; docs/performance.md, A1). The `redis` crate
//! encodes and parses; `reply` finds where a reply ends. A connection
//! belongs to the runtime whose reactor its socket is registered with:
//! each runtime keeps its own idle ones, at most the client's pool size
//! open at once (past that, its calls go through the I/O threads).
//!
//! A future dropped while its call is out: the call goes on in a task of
//! the runtime, which tells the call's `Forsaken` hook its outcome once the
//! reply came — or no answer, should the task be dropped first (the
//! runtime shut down) or no reply come within the socket timeout (the
//! timer thread tells it, should the runtime not be driven again): the
//! undo is then sent until Redis answers it twice, as for any lost reply.
//! Dropped while still connecting: nothing was sent, and the hook is told
//! so. A connection found closed before anything is sent on it (the server
//! closed it while it sat idle, restarted) takes the runtime's other idle
//! ones with it, and the call goes on a new one; once sent, a call is never
//! sent again here. Only a connection whose reply was read whole is used
//! again.
//!
//! Time is the library's timer thread's: no time driver is needed. The I/O
//! driver is (`enable_io`, as `#[tokio::main]` gives): without one tokio
//! panics when a socket is registered, which is caught once, said in a
//! warning, and that runtime's calls go through the I/O threads (under
//! `panic = "abort"` the process aborts).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use redis::{ErrorKind, RedisConnectionInfo, RedisResult, ServerErrorKind, Value};
use tokio::io::Interest;
use tokio::net::TcpStream;
use tokio::runtime::{Handle, Id};

use super::reply::{reply_len, simple};
use super::stream::QUIET_UNCHECKED;
use super::transport::{Forsaken, MakeForsaken, Outcome};
use super::wire::hello;
use crate::park::Sleep;
use crate::protocol::{Call, Reply};

/// After a connection could not be made, the runtime's calls go through
/// the I/O threads this long (they meet the outage, and a call does not
/// wait for two connection attempts).
const BACKOFF: Duration = Duration::from_secs(1);

/// Runtimes whose idle connections are kept (the one least recently used
/// goes past this: a runtime that was dropped leaves its own behind) — a
/// thread-per-core server's runtimes on up to this many cores.
const RUNTIMES: usize = 64;

type Request = Pin<Box<dyn Future<Output = RedisResult<Value>> + Send>>;

/// Calls to one server on the calling task's tokio runtime.
pub(crate) struct Runtimes {
    pool: Arc<Pool>,
    /// How long a dropped call's reply is waited for (then: a lost reply).
    socket_timeout: Duration,
}

/// Every runtime's connections to the server.
struct Pool {
    host: String,
    port: u16,
    settings: RedisConnectionInfo,
    /// Most connections one runtime has open at once.
    size: usize,
    state: Mutex<State>,
    /// Whether a runtime was ever refused (the usual case, never: no lock
    /// taken to look).
    trouble: AtomicBool,
}

#[derive(Default)]
struct State {
    /// Each runtime's idle connections, and how many it has open.
    runtimes: Vec<(Id, Vec<Con>, Arc<AtomicUsize>)>,
    /// Runtimes without an I/O driver (nothing is sent on them).
    no_io: Vec<Id>,
    /// No connection is tried before this, after one failed.
    backoff_until: Option<Instant>,
}

/// Where a runtime's call goes: an idle connection, a new one (counted
/// open), or another way.
enum Got {
    Idle(Con),
    Open(Counted),
    None,
}

impl Runtimes {
    /// For the server `client` connects to, when it is reached over plain
    /// TCP (TLS and Unix sockets go through the I/O threads), each runtime
    /// with at most `size` connections open.
    pub(crate) fn new(
        client: &redis::Client,
        socket_timeout: Duration,
        size: u32,
    ) -> Option<Runtimes> {
        let info = client.get_connection_info();
        let redis::ConnectionAddr::Tcp(host, port) = info.addr() else {
            return None;
        };
        let pool = Pool {
            host: host.clone(),
            port: *port,
            settings: info.redis_settings().clone(),
            size: usize::try_from(size).unwrap_or(usize::MAX).max(1),
            state: Mutex::new(State::default()),
            trouble: AtomicBool::new(false),
        };
        Some(Runtimes {
            pool: Arc::new(pool),
            socket_timeout,
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
        let mut flight = Flight {
            request: None,
            forsaken,
            abandoned: Abandoned::default(),
            sent: false,
            patience: self.socket_timeout,
        };
        let con = loop {
            break match self.pool.take(runtime) {
                Got::Idle(con) if con.check_quiet().is_err() => {
                    // Closed by the server while it sat idle (its timeout, a
                    // restart), found so before anything was sent on it:
                    // the others idle beside it are as dead. A new one.
                    self.pool.forget(runtime);
                    continue;
                }
                Got::Idle(con) => Some(con),
                Got::Open(counted) => self.pool.open(runtime, counted, connect).await,
                Got::None => None,
            };
        };
        let io = end.map_or(io, |end| {
            io.min(end.saturating_duration_since(Instant::now()))
        });
        let Some(con) = con.filter(|_| !io.is_zero()) else {
            flight.forsaken = None; // sent another way (or out of time there)
            return Err(call);
        };
        let abandoned = Arc::clone(&flight.abandoned);
        let pool = Arc::clone(&self.pool);
        flight.request = Some(request(pool, runtime, con, &call, abandoned));
        // Once sent, never sent again here: a connection that broke after
        // the request went out may have run it (a `CLIENT KILL`, a crash
        // after the write), and a request run twice — permits added — is
        // not one run once.
        let reply = within(io, &mut flight).await.unwrap_or_else(|| {
            // No reply in time: the caller undoes it as a lost reply, not
            // the hook as well.
            flight.forsaken = None;
            Err(io::Error::new(io::ErrorKind::TimedOut, "no reply in time").into())
        });
        Ok((reply.map(|value| Reply { value, acked: None }), flight.sent))
    }
}

impl Pool {
    /// An idle connection of `runtime`, or leave to open one; `None` where
    /// none is to be had now: a runtime without an I/O driver, a backoff
    /// after a failed connect, as many open as the pool's size.
    fn take(&self, runtime: Id) -> Got {
        let mut st = self.state.lock();
        let refused = self.trouble.load(Ordering::Relaxed)
            && (st.no_io.contains(&runtime)
                || st.backoff_until.is_some_and(|t| Instant::now() < t));
        if refused {
            return Got::None;
        }
        // The runtime's entry, moved last: the first is the least recently
        // used.
        let entry = match st.runtimes.iter().position(|(id, ..)| *id == runtime) {
            Some(at) => st.runtimes.remove(at),
            None => {
                if st.runtimes.len() >= RUNTIMES {
                    st.runtimes.remove(0);
                }
                (runtime, Vec::new(), Arc::default())
            }
        };
        st.runtimes.push(entry);
        let Some((_, idle, open)) = st.runtimes.last_mut() else {
            return Got::None;
        };
        if let Some(con) = idle.pop() {
            return Got::Idle(con);
        }
        if open.load(Ordering::Relaxed) >= self.size {
            return Got::None;
        }
        open.fetch_add(1, Ordering::Relaxed);
        Got::Open(Counted(Arc::clone(open)))
    }

    /// `con`, whose reply was read whole, back among `runtime`'s idle
    /// connections.
    fn put(&self, runtime: Id, mut con: Con) {
        con.answered = Instant::now();
        let mut st = self.state.lock();
        if let Some((_, idle, _)) = st.runtimes.iter_mut().find(|(id, ..)| *id == runtime) {
            idle.push(con);
        }
    }

    /// `runtime`'s idle connections go (one of them broke idle).
    fn forget(&self, runtime: Id) {
        // Closed once the lock is given back.
        let _idle = (self.state.lock().runtimes.iter_mut())
            .find(|(id, ..)| *id == runtime)
            .map(|(_, idle, _)| std::mem::take(idle));
    }

    /// A new connection for `runtime`, within `wait`; `None` when none
    /// could be made (then a backoff), or the runtime has no I/O driver.
    async fn open(&self, runtime: Id, counted: Counted, wait: Duration) -> Option<Con> {
        let mut connecting = Box::pin(Con::connect(self, counted));
        // Its panic (registering a socket on a runtime without an I/O
        // driver) comes out as `Err(())`.
        let caught = std::future::poll_fn(|cx| {
            let poll = std::panic::AssertUnwindSafe(|| connecting.as_mut().poll(cx));
            std::panic::catch_unwind(poll).map_or(Poll::Ready(Err(())), |p| p.map(Ok))
        });
        match within(wait, caught).await {
            Some(Ok(Ok(con))) => Some(con),
            Some(Err(())) => {
                tracing::warn!("leasehold: this tokio runtime has no I/O driver (enable_io); its tasks' round trips go through leasehold's I/O threads");
                self.state.lock().no_io.push(runtime);
                self.trouble.store(true, Ordering::Relaxed);
                None
            }
            failed => {
                if let Some(Ok(Err(e))) = failed {
                    tracing::debug!(error = %e, "leasehold: could not connect on the task's runtime; using the I/O threads for a while");
                }
                self.state.lock().backoff_until = Some(Instant::now() + BACKOFF);
                self.trouble.store(true, Ordering::Relaxed);
                None
            }
        }
    }
}

/// One of a runtime's open connections, counted until it is dropped.
struct Counted(Arc<AtomicUsize>);

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A connection of a runtime's: its socket, and what was read of it and not
/// yet parsed.
struct Con {
    stream: TcpStream,
    read: Vec<u8>,
    /// When its last reply was read whole (see [`QUIET_UNCHECKED`]).
    answered: Instant,
    _counted: Counted,
}

impl Con {
    /// Connects to `pool`'s server and makes the handshake every connection
    /// of ours makes (`AUTH`, `SELECT`).
    async fn connect(pool: &Pool, counted: Counted) -> RedisResult<Con> {
        let stream = TcpStream::connect((pool.host.as_str(), pool.port)).await?;
        stream.set_nodelay(true)?;
        let mut con = Con {
            stream,
            read: Vec::new(),
            answered: Instant::now(),
            _counted: counted,
        };
        let hello = hello(&pool.settings, None, true);
        con.send(&hello.get_packed_pipeline()).await?; // none: nothing sent
        for _ in 0..hello.len() {
            con.recv().await?.extract_error()?;
        }
        Ok(con)
    }

    /// Whether the connection is as its last reply left it (see
    /// `Stream::check_quiet`): nothing to read on it. Asked of the socket
    /// itself, not the reactor, which may not have seen the server's close
    /// yet (a current-thread runtime not driven since it came).
    fn check_quiet(&self) -> io::Result<()> {
        if !self.read.is_empty() {
            return Err(crate::error::unasked_bytes());
        }
        if self.answered.elapsed() < QUIET_UNCHECKED {
            return Ok(());
        }
        let mut buf = [0; 64];
        #[cfg(unix)]
        let read = {
            use std::io::Read;
            use std::os::fd::AsFd;
            // A second handle on the socket, non-blocking as tokio keeps
            // it: a read that does not wait, and leaves the reactor's
            // readiness as it was.
            let socket = std::net::TcpStream::from(self.stream.as_fd().try_clone_to_owned()?);
            loop {
                match (&socket).read(&mut buf) {
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    read => break read,
                }
            }
        };
        #[cfg(not(unix))]
        let read = self.stream.try_read(&mut buf);
        match read {
            Ok(0) => Err(crate::error::closed_while_idle()),
            Ok(_) => Err(crate::error::unasked_bytes()),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Writes `bytes` whole.
    async fn send(&mut self, mut bytes: &[u8]) -> io::Result<()> {
        while !bytes.is_empty() {
            match self.stream.try_write(bytes) {
                Ok(n) => bytes = &bytes[n..],
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.stream.writable().await?,
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// The next reply.
    async fn recv(&mut self) -> RedisResult<Value> {
        loop {
            if let Some(len) = reply_len(&self.read, 0) {
                let reply = &self.read[..len];
                let value = simple(reply).map_or_else(|| redis::parse_redis_value(reply), Ok);
                self.read.drain(..len);
                return value.map_err(|e| crate::error::not_redis(&e));
            }
            let mut chunk = [0; 512];
            let mut got = None;
            // A short read (the socket read dry) clears the readiness the
            // reactor had reported before it, so the next read awaits the
            // reactor's word rather than a `read` that would only say "not
            // yet" — in the same `try_io` as the read: what it clears was
            // known before the read, and an event that came after stays.
            let read = self.stream.try_io(Interest::READABLE, || {
                let n = self.stream.try_read(&mut chunk)?;
                got = Some(n);
                match n {
                    1..512 => Err(io::ErrorKind::WouldBlock.into()),
                    _ => Ok(()),
                }
            });
            match (got, read) {
                (Some(0), _) => {
                    let closed = "the server closed the connection";
                    return Err(io::Error::new(io::ErrorKind::UnexpectedEof, closed).into());
                }
                (Some(n), _) => self.read.extend_from_slice(&chunk[..n]),
                (None, Err(e)) if e.kind() == io::ErrorKind::WouldBlock => {
                    self.stream.readable().await?
                }
                (None, Err(e)) => return Err(e.into()),
                (None, Ok(())) => {}
            }
        }
    }
}

/// `call` on `con`: its `EVALSHA`, and when the server does not know the
/// script (restarted, `SCRIPT FLUSH`: nothing ran) `SCRIPT LOAD`, then the
/// call once more — unless its caller went away meanwhile (`abandoned`):
/// its hook may have been told no answer came and its undo be done, which
/// a call sent now would overtake. The request owns its connection and
/// what it sends; the connection goes back to `pool` once a reply was read
/// whole.
fn request(
    pool: Arc<Pool>,
    runtime: Id,
    mut con: Con,
    call: &Call,
    abandoned: Abandoned,
) -> Request {
    let (cmd, source) = (call.cmd.bytes().to_vec(), call.source);
    Box::pin(async move {
        let gone = || abandoned.load(Ordering::Acquire);
        let reply = async {
            con.send(&cmd).await?;
            match con.recv().await?.extract_error() {
                Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                    if gone() {
                        return Err(e);
                    }
                    let mut load = redis::cmd("SCRIPT");
                    load.arg("LOAD").arg(source);
                    con.send(&load.get_packed_command()).await?;
                    con.recv().await?.extract_error()?;
                    if gone() {
                        return Err(e);
                    }
                    con.send(&cmd).await?;
                    con.recv().await?.extract_error()
                }
                other => other,
            }
        }
        .await;
        // Used again when its reply was read whole — not after a reply the
        // server closes it after.
        let reusable = |e: &redis::RedisError| {
            matches!(e.kind(), ErrorKind::Server(_)) && !crate::error::closes_connection(e.detail())
        };
        if reply.as_ref().err().is_none_or(reusable) {
            pool.put(runtime, con);
        }
        reply
    })
}

/// Set when a call's caller went away while it was out (see [`request`]).
type Abandoned = Arc<AtomicBool>;

/// A call under way. Dropped before it ended — its caller's future dropped
/// while it was out — it goes on in a task of the runtime, whose end tells
/// the hook; dropped before its request was made or ever polled, nothing
/// was sent.
struct Flight<'a> {
    request: Option<Request>,
    forsaken: Option<MakeForsaken<'a>>,
    /// Told when this future is dropped before the request ended.
    abandoned: Abandoned,
    /// The request may have gone out: it was polled (its first poll
    /// writes it, whole or in part, or fails). A failure of that first
    /// poll is no proof that nothing went out (a close can come between
    /// the write and the read): the connection was checked before.
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
        self.sent = true;
        if polled.is_ready() {
            self.request = None;
            self.forsaken = None;
        }
        polled
    }
}

impl Drop for Flight<'_> {
    fn drop(&mut self) {
        self.abandoned.store(true, Ordering::Release);
        let Some(make) = self.forsaken.take() else {
            return;
        };
        let forsaken = make();
        // Not sent, or not even made (connecting).
        let Some(request) = self.request.take().filter(|_| self.sent) else {
            forsaken(Outcome::NotSent);
            return;
        };
        let hook = Arc::new(Hook(Mutex::new(Some(forsaken))));
        // The runtime not driven again (nothing reads the reply there): the
        // timer thread tells the hook at the socket timeout.
        let mut late = Sleep::until(Instant::now() + self.patience);
        if late.register(&std::task::Waker::from(Arc::clone(&hook))) {
            hook.tell(Outcome::Unknown);
        }
        // The rest of the call, a task of its runtime (see the module
        // docs); its connection goes unless the reply came.
        let (patience, told) = (self.patience, Told(hook));
        let drain = async move {
            let _late = late;
            if let Some(reply) = within(patience, request).await {
                told.0.tell(Outcome::of(&reply, true));
            }
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

/// A dropped call's hook, told once: by the task that awaits its reply, or
/// — woken at the socket timeout — by the timer thread: no answer came
/// (its undo is sent until Redis answers it twice).
struct Hook(Mutex<Option<Forsaken>>);

impl Hook {
    fn tell(&self, outcome: Outcome) {
        let told = self.0.lock().take();
        if let Some(forsaken) = told {
            forsaken(outcome);
        }
    }
}

impl std::task::Wake for Hook {
    fn wake(self: Arc<Self>) {
        self.tell(Outcome::Unknown);
    }
}

/// Tells its hook no answer came, unless it was told already, when dropped.
struct Told(Arc<Hook>);

impl Drop for Told {
    fn drop(&mut self) {
        self.0.tell(Outcome::Unknown);
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
