//! The reactor lane (feature `tokio`): the async face's script calls to one
//! server sent on the tokio runtime the calling task runs on, through that
//! runtime's own reactor — no hop to an I/O thread and back, which on a
//! loaded machine costs two context switches per round trip. A connection
//! belongs to the runtime that made it (its socket is registered with that
//! runtime's reactor), so idle ones are kept per runtime.
//!
//! The lane sends only what it can send as well as the blocking path: a
//! call is handed back unsent ([`Answer::Skip`]) — and the caller sends it
//! through the I/O threads, with every retry and redirect they know — when
//! this is not a task of a tokio runtime (or the runtime has no I/O
//! driver), no connection could be made (or the lane has as many open as
//! the client's pool size), a pooled one was found closed, or the server
//! did not know the script and it could not be loaded first (a known one
//! is loaded and the call sent again, on the same connection). Once a
//! request went out, its answer is the caller's, as from
//! [`Connections::run_sent`](super::Connections::run_sent).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use redis::{ConnectionAddr, ConnectionInfo, ErrorKind, RedisConnectionInfo, RedisResult, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::runtime::{Handle, Id};

use super::wire::Hello;
use crate::park::{Park, Sleep};
use crate::protocol::Call;

/// The most a reply may be (a larger one is not a lock script's).
const MAX_REPLY: usize = 1 << 20;

/// After a connection could not be made, the lane is left alone this long
/// (the I/O threads meet the outage, and a call does not wait for two
/// connection attempts).
const BACKOFF: Duration = Duration::from_secs(1);

/// What the lane did with a call.
pub(crate) enum Answer {
    /// Nothing was sent and nothing ran: send it another way.
    Skip,
    /// The request went out; its reply, or why there is none (a timeout,
    /// a broken connection: it may have run).
    Sent(RedisResult<Value>),
}

/// Script calls to one server, on the calling task's tokio runtime.
pub(crate) struct Lane {
    host: String,
    port: u16,
    settings: RedisConnectionInfo,
    connect_timeout: Duration,
    /// How long a dropped call's reply is waited for (see [`Out`]).
    socket_timeout: Duration,
    /// Idle connections, each with the runtime whose reactor it is
    /// registered with (oldest first).
    idle: Mutex<Vec<(Id, Conn)>>,
    /// Connections open now, idle or in use, and how many may be (the
    /// client's pool size; calls beyond go through the I/O threads).
    open: Arc<AtomicUsize>,
    max_open: usize,
    /// Runtimes without an I/O driver (no lane there), and when the lane
    /// may try to connect again after a failure.
    no_io: Mutex<Vec<Id>>,
    backoff_until: Mutex<Option<Instant>>,
    /// Whether either of those was ever set (the usual case, never: no
    /// lock taken to look).
    trouble: AtomicBool,
}

impl Lane {
    /// A lane to the server of `info` when it is reached over plain TCP
    /// (TLS and Unix sockets go through the I/O threads).
    pub(crate) fn new(
        info: &ConnectionInfo,
        (connect_timeout, socket_timeout): (Duration, Duration),
        max_open: usize,
    ) -> Option<Lane> {
        let ConnectionAddr::Tcp(host, port) = info.addr() else {
            return None;
        };
        Some(Lane {
            host: host.clone(),
            port: *port,
            settings: info.redis_settings().clone(),
            connect_timeout,
            socket_timeout,
            idle: Mutex::new(Vec::new()),
            open: Arc::new(AtomicUsize::new(0)),
            max_open: max_open.max(1),
            no_io: Mutex::new(Vec::new()),
            backoff_until: Mutex::new(None),
            trouble: AtomicBool::new(false),
        })
    }

    /// Whether a call made here now could go on the lane: a tokio runtime
    /// with an I/O driver runs this task, and no connection failed lately.
    pub(crate) fn here(&self) -> Option<Handle> {
        // (Inside a runtime's context that no thread of it drives while
        // the call waits — another executor's `block_on` in a task of a
        // current-thread runtime, or under `Handle::enter` — the reply is
        // not heard until the socket timeout: as for any tokio socket
        // there. `#[tokio::main]`'s own `block_on` does drive it, so
        // requiring a task would leave that out.)
        let handle = Handle::try_current().ok()?;
        if !self.trouble.load(Ordering::Relaxed) {
            return Some(handle);
        }
        if self.no_io.lock().contains(&handle.id()) {
            return None;
        }
        if self
            .backoff_until
            .lock()
            .is_some_and(|t| Instant::now() < t)
        {
            return None;
        }
        Some(handle)
    }

    /// Sends `call` and reads its reply, waiting at most `connect` for a
    /// new connection and `io` for the reply — and nothing past `end`, what
    /// connecting took counted in. `sent` is set while the request is out.
    ///
    /// A future dropped while the request is out leaves it to the lane:
    /// its reply is still read, on an I/O thread (for at most the socket
    /// timeout), and then what `undo` makes runs — after the call ran in
    /// Redis, so an undo sent on another connection cannot overtake a
    /// request held up on the way. Told whether the call may still be on
    /// its way or may not have run (no reply came, or an error reply:
    /// its undo must be sent again until that is safe).
    pub(crate) async fn call(
        &self,
        call: &Call<'_>,
        (connect, io, end): (Duration, Duration, Option<Instant>),
        sent: &AtomicBool,
        undo: Option<MakeUndo<'_>>,
    ) -> Answer {
        let Some(handle) = self.here() else {
            return Answer::Skip;
        };
        let runtime = handle.id();
        let (con, reused) = match self.take(runtime) {
            Some(con) => (con, true),
            None => match self.connect(runtime, connect).await {
                Some(con) => (con, false),
                None => return Answer::Skip,
            },
        };
        let io = match end {
            Some(end) => io.min(end.saturating_duration_since(Instant::now())),
            None => io,
        };
        if io.is_zero() {
            self.keep(runtime, con);
            return Answer::Skip;
        }
        let bytes = call.cmd.get_packed_command();
        let mut out = Out {
            con: Some(con),
            buf: Vec::new(),
            sent,
            undo,
            // The whole socket timeout, not what the caller's deadline
            // left: an undo must wait for the reply however late it is.
            io: self.socket_timeout,
            done: false,
        };
        let Some(con) = out.con.as_mut() else {
            return Answer::Skip;
        };
        let (stream, buf) = (&mut con.stream, &mut out.buf);
        let exchange = async {
            stream
                .write_all(&bytes)
                .await
                .map_err(|_| Sending::Unsent)?;
            sent.store(true, Ordering::Relaxed);
            let reply = read_reply(stream, buf).await.map_err(Sending::Read)?;
            if !is_noscript(&reply) {
                return Ok(reply);
            }
            // The server does not know the script (restarted, `SCRIPT
            // FLUSH`): nothing ran. Load it, send the call again.
            sent.store(false, Ordering::Relaxed);
            let load = redis::cmd("SCRIPT")
                .arg("LOAD")
                .arg(call.source)
                .get_packed_command();
            stream.write_all(&load).await.map_err(|_| Sending::Unsent)?;
            let loaded = read_reply(stream, buf).await;
            loaded
                .and_then(|l| l.extract_error())
                .map_err(|_| Sending::Unsent)?;
            stream
                .write_all(&bytes)
                .await
                .map_err(|_| Sending::Unsent)?;
            sent.store(true, Ordering::Relaxed);
            read_reply(stream, buf).await.map_err(Sending::Read)
        };
        let ended = within(io, exchange).await;
        // Not dropped: the caller has the outcome.
        out.done = true;
        let reply = match ended {
            None if sent.load(Ordering::Relaxed) => {
                let timeout = io::Error::new(io::ErrorKind::TimedOut, "no reply in time");
                return Answer::Sent(Err(timeout.into()));
            }
            // Nothing ran: not written (the other end had closed the
            // socket, as the blocking wire judges a failed write), or the
            // script could not be loaded first.
            None | Some(Err(Sending::Unsent)) => return Answer::Skip,
            // Closed before a byte of the reply on a connection that sat
            // idle: it had died idle, the request never ran.
            Some(Err(Sending::Read(e))) if reused && out.buf.is_empty() && closed(&e) => {
                sent.store(false, Ordering::Relaxed);
                return Answer::Skip;
            }
            Some(Err(Sending::Read(e))) => return Answer::Sent(Err(e)),
            Some(Ok(reply)) => reply,
        };
        if let Some(con) = out.con.take() {
            self.keep(runtime, con);
        }
        Answer::Sent(reply.extract_error())
    }

    /// An idle connection of `runtime`, the one that waited least.
    fn take(&self, runtime: Id) -> Option<Conn> {
        let mut idle = self.idle.lock();
        let i = idle.iter().rposition(|(id, _)| *id == runtime)?;
        Some(idle.remove(i).1)
    }

    /// A new connection for `runtime`, handshake made; `None` when none
    /// could be made within `wait`, this lane has as many open as it may
    /// (the rest go through the I/O threads), or this runtime has no I/O
    /// driver.
    async fn connect(&self, runtime: Id, wait: Duration) -> Option<Conn> {
        if self.open.fetch_add(1, Ordering::SeqCst) >= self.max_open {
            self.open.fetch_sub(1, Ordering::SeqCst);
            return None;
        }
        // Counted from now: dropped, the count goes down.
        let counted = Counted(Arc::clone(&self.open));
        let wait = wait.min(self.connect_timeout);
        let opened = async {
            let mut stream = TcpStream::connect((self.host.as_str(), self.port)).await?;
            stream.set_nodelay(true)?;
            if let Some(hello) = Hello::new(&self.settings, None, true) {
                stream.write_all(&hello.pipe.get_packed_pipeline()).await?;
                let mut buf = Vec::new();
                for i in 0..hello.pipe.len() {
                    hello.check(i, read_reply(&mut stream, &mut buf).await?)?;
                }
            }
            RedisResult::Ok(stream)
        };
        match within(wait, CatchUnwind(Box::pin(opened))).await {
            Some(Ok(Ok(stream))) => Some(Conn {
                stream,
                _counted: counted,
            }),
            Some(Err(())) => {
                // Registering the socket panicked: the runtime has no I/O
                // driver (built without `enable_io`).
                tracing::warn!("leasehold: this tokio runtime has no I/O driver (enable_io); its tasks' round trips go through leasehold's I/O threads");
                let mut no_io = self.no_io.lock();
                if !no_io.contains(&runtime) {
                    no_io.push(runtime);
                }
                self.trouble.store(true, Ordering::Relaxed);
                None
            }
            // Out of the call's time (not the server's fault): no backoff.
            None if wait < self.connect_timeout => None,
            failed => {
                if let Some(Ok(Err(e))) = failed {
                    tracing::debug!(error = %e, "leasehold: the reactor lane could not connect; using the I/O threads for a while");
                }
                *self.backoff_until.lock() = Some(Instant::now() + BACKOFF);
                self.trouble.store(true, Ordering::Relaxed);
                None
            }
        }
    }

    /// Keeps `con` for the next call of `runtime` (the one idle longest
    /// goes when there are as many as may be).
    fn keep(&self, runtime: Id, con: Conn) {
        let mut idle = self.idle.lock();
        if idle.len() >= self.max_open {
            idle.remove(0);
        }
        idle.push((runtime, con));
    }
}

/// A lane's connection; counted among its open ones while it lives.
struct Conn {
    stream: TcpStream,
    _counted: Counted,
}

/// Makes the undo of a call whose future was dropped while its request
/// was out (only then: most calls need none); the undo is told whether the
/// call may still be on its way (no reply came: it must be sent again
/// until that is safe; see [`Lane::call`]).
pub(crate) type MakeUndo<'a> = &'a (dyn Fn() -> Box<dyn FnOnce(bool) + Send> + Sync);

/// A call's connection while its request may be out: dropped before the
/// call ended (its future dropped), its reply is read on an I/O thread (a
/// runtime may not be driven again) and then the call's undo runs.
struct Out<'a> {
    con: Option<Conn>,
    buf: Vec<u8>,
    sent: &'a AtomicBool,
    undo: Option<MakeUndo<'a>>,
    io: Duration,
    /// The call ended with its future alive: nothing to do here.
    done: bool,
}

impl Drop for Out<'_> {
    fn drop(&mut self) {
        if self.done || !self.sent.load(Ordering::Relaxed) {
            return;
        }
        let (Some(con), Some(undo)) = (self.con.take(), self.undo) else {
            return;
        };
        let then = undo();
        // Already as many drains as may hold I/O threads (cancellations
        // against a slow server): undone as a lost reply is.
        let Some(draining) = Draining::start() else {
            then(true);
            return;
        };
        let (buf, io) = (std::mem::take(&mut self.buf), self.io);
        // Out of the runtime's reactor, a blocking socket again (or, where
        // that fails, no reply to wait for). Counted among the lane's open
        // connections until the drain ends.
        let Conn { stream, _counted } = con;
        let Ok(stream) = stream.into_std() else {
            then(true);
            return;
        };
        // Shared with the job, so that a job no thread takes leaves it here.
        let then = Arc::new(Mutex::new(Some(then)));
        let job = {
            let then = Arc::clone(&then);
            move || {
                let answered = read_blocking(stream, buf, io).is_ok();
                drop((_counted, draining));
                if let Some(then) = then.lock().take() {
                    then(!answered);
                }
            }
        };
        // No I/O thread to read it (none could be started): never a
        // blocking read here, on the executor — undone as a lost reply is.
        if Park::offload(job).is_err() {
            if let Some(then) = then.lock().take() {
                then(true);
            }
        }
    }
}

/// Drains under way in this process (see [`Out`]), and how many may be at
/// once: each holds an I/O thread for up to a socket timeout.
static DRAINING: AtomicUsize = AtomicUsize::new(0);
const MAX_DRAINS: usize = 8;

/// One drain under way.
struct Draining;

impl Draining {
    fn start() -> Option<Draining> {
        if DRAINING.fetch_add(1, Ordering::SeqCst) >= MAX_DRAINS {
            DRAINING.fetch_sub(1, Ordering::SeqCst);
            return None;
        }
        Some(Draining)
    }
}

impl Drop for Draining {
    fn drop(&mut self) {
        DRAINING.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Reads the rest of one reply (`buf` holds what came) off `stream`, for
/// at most `io`: `Ok` when it came and is no error reply (after an error
/// the call may not have run).
fn read_blocking(
    mut stream: std::net::TcpStream,
    mut buf: Vec<u8>,
    io: Duration,
) -> io::Result<()> {
    use std::io::Read;
    let end = Instant::now() + io;
    stream.set_nonblocking(false)?;
    let mut chunk = [0u8; 512];
    loop {
        match frame_len(&buf) {
            // An error reply: the call may not have run (`NOSCRIPT`,
            // `BUSY`, `LOADING`, `TRYAGAIN`, …), so it counts as no answer
            // (its undo goes on until one comes; owner-checked, harmless
            // after one that did run).
            Ok(Some(_)) if buf.starts_with(b"-") => return Err(io::ErrorKind::Other.into()),
            Ok(Some(_)) => return Ok(()),
            Ok(None) if buf.len() < MAX_REPLY => {}
            _ => return Err(io::ErrorKind::InvalidData.into()),
        }
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::ErrorKind::TimedOut.into());
        }
        stream.set_read_timeout(Some(left))?;
        match stream.read(&mut chunk)? {
            0 => return Err(io::ErrorKind::UnexpectedEof.into()),
            n => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// One of a lane's open connections: the count goes down when it goes.
struct Counted(Arc<AtomicUsize>);

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Why an exchange failed: nothing ran (the request could not be written,
/// or the script not loaded before it), or its reply could not be read.
enum Sending {
    Unsent,
    Read(redis::RedisError),
}

/// Whether `reply` says the server does not know the script.
fn is_noscript(reply: &Value) -> bool {
    matches!(reply, Value::ServerError(e) if e.code() == "NOSCRIPT")
}

/// Whether `e` says the other end closed the connection.
fn closed(e: &redis::RedisError) -> bool {
    e.is_connection_dropped()
}

/// Reads one reply off `stream` (bytes already read in `buf`).
async fn read_reply(stream: &mut TcpStream, buf: &mut Vec<u8>) -> RedisResult<Value> {
    loop {
        match frame_len(buf) {
            Ok(Some(len)) => {
                let reply = redis::parse_redis_value(&buf[..len]);
                buf.drain(..len);
                return reply.map_err(|e| crate::error::not_redis(&e));
            }
            Ok(None) if buf.len() < MAX_REPLY => {}
            Ok(None) => {
                let e = io::Error::new(
                    io::ErrorKind::InvalidData,
                    "a reply of over 1 MiB: not a lock script's",
                );
                return Err(e.into());
            }
            Err(()) => {
                let e = redis::RedisError::from((ErrorKind::Parse, "not a redis reply"));
                return Err(crate::error::not_redis(&e));
            }
        }
        if stream.read_buf(buf).await? == 0 {
            let eof = io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the server closed the connection",
            );
            return Err(eof.into());
        }
    }
}

/// The length of the first whole RESP2 reply in `buf`: `Ok(None)` while
/// it is incomplete, `Err` for bytes that are no reply.
fn frame_len(buf: &[u8]) -> Result<Option<usize>, ()> {
    fn line_end(buf: &[u8], at: usize) -> Option<usize> {
        buf.get(at..)?
            .windows(2)
            .position(|w| w == b"\r\n")
            .map(|p| at + p + 2)
    }
    fn number(buf: &[u8], from: usize, end: usize) -> Result<i64, ()> {
        std::str::from_utf8(&buf[from..end - 2])
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or(())
    }
    fn one(buf: &[u8], at: usize, depth: u32) -> Result<Option<usize>, ()> {
        let Some(&kind) = buf.get(at) else {
            return Ok(None);
        };
        let Some(end) = line_end(buf, at) else {
            return Ok(None);
        };
        match kind {
            b'+' | b'-' | b':' => Ok(Some(end)),
            b'$' => match number(buf, at + 1, end)? {
                n if n < 0 => Ok(Some(end)),
                // Longer than any reply we read: no lock script's.
                n if n > MAX_REPLY as i64 => Err(()),
                n => {
                    let total = usize::try_from(n)
                        .ok()
                        .and_then(|n| end.checked_add(n)?.checked_add(2))
                        .ok_or(())?;
                    Ok((buf.len() >= total).then_some(total))
                }
            },
            b'*' if depth < 8 => {
                let n = number(buf, at + 1, end)?;
                if n > MAX_REPLY as i64 {
                    return Err(());
                }
                let mut pos = end;
                for _ in 0..n.max(0) {
                    match one(buf, pos, depth + 1)? {
                        Some(next) => pos = next,
                        None => return Ok(None),
                    }
                }
                Ok(Some(pos))
            }
            _ => Err(()),
        }
    }
    one(buf, 0, 0)
}

/// `fut`, or `None` once `limit` passed (timed by the library's timer
/// thread: the runtime may have no time driver).
async fn within<F: Future>(limit: Duration, fut: F) -> Option<F::Output> {
    let mut fut = std::pin::pin!(fut);
    let mut sleep = Sleep::until(Instant::now() + limit);
    std::future::poll_fn(|cx| {
        if let Poll::Ready(out) = fut.as_mut().poll(cx) {
            return Poll::Ready(Some(out));
        }
        if Pin::new(&mut sleep).poll(cx).is_ready() {
            return Poll::Ready(None);
        }
        Poll::Pending
    })
    .await
}

/// A future whose panic (tokio's, registering a socket on a runtime
/// without an I/O driver) is its `Err(())` instead.
struct CatchUnwind<F>(Pin<Box<F>>);

impl<F: Future> Future for CatchUnwind<F> {
    type Output = Result<F::Output, ()>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let inner = self.0.as_mut();
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| inner.poll(cx))) {
            Ok(Poll::Ready(out)) => Poll::Ready(Ok(out)),
            Ok(Poll::Pending) => Poll::Pending,
            Err(_) => Poll::Ready(Err(())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{frame_len, read_blocking, Draining, MAX_DRAINS};
    use std::io::Write;
    use std::time::Duration;

    #[test]
    fn at_most_so_many_drains_hold_io_threads_at_once() {
        let mut drains: Vec<Draining> = (0..MAX_DRAINS).map_while(|_| Draining::start()).collect();
        assert_eq!(drains.len(), MAX_DRAINS);
        assert!(Draining::start().is_none(), "one more than may be");
        drains.pop();
        assert!(Draining::start().is_some(), "one ended: another may start");
    }

    #[test]
    fn a_dropped_calls_reply_is_read_to_its_end_and_an_error_is_no_answer() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let read = |sent: &'static [&'static [u8]], had: &[u8]| {
            let client = std::net::TcpStream::connect(addr).unwrap();
            let (mut server, _) = listener.accept().unwrap();
            let writer = std::thread::spawn(move || {
                for part in sent {
                    server.write_all(part).unwrap();
                    std::thread::sleep(Duration::from_millis(20));
                }
                server
            });
            let got = read_blocking(client, had.to_vec(), Duration::from_millis(300));
            drop(writer.join());
            got.map_err(|e| e.kind())
        };
        assert_eq!(read(&[b"2\r\n"], b":"), Ok(()));
        assert_eq!(read(&[b"*2\r\n:1", b"\r\n:0\r\n"], b""), Ok(()));
        // An error reply: the call may not have run.
        let noscript: &[&[u8]] = &[b"-NOSCRIPT No matching script\r\n"];
        assert_eq!(read(noscript, b""), Err(std::io::ErrorKind::Other));
        let busy: &[&[u8]] = &[b"-BUSY Redis is busy running a script\r\n"];
        assert_eq!(read(busy, b""), Err(std::io::ErrorKind::Other));
        // No end in time (a read timeout is `WouldBlock` on Linux).
        let late = read(&[b":1"], b"");
        assert!(
            matches!(
                late,
                Err(std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut)
            ),
            "{late:?}"
        );
    }

    #[test]
    fn a_reply_is_whole_only_when_every_byte_of_it_came() {
        assert_eq!(frame_len(b""), Ok(None));
        assert_eq!(frame_len(b":12"), Ok(None));
        assert_eq!(frame_len(b":12\r\n"), Ok(Some(5)));
        assert_eq!(frame_len(b"$-1\r\n:1\r\n"), Ok(Some(5)));
        assert_eq!(frame_len(b"$3\r\nab"), Ok(None));
        assert_eq!(frame_len(b"$3\r\nabc\r\n"), Ok(Some(9)));
        assert_eq!(frame_len(b"*2\r\n:1\r\n"), Ok(None));
        assert_eq!(frame_len(b"*2\r\n$1\r\nf\r\n:30000\r\n"), Ok(Some(19)));
        assert_eq!(frame_len(b"*-1\r\n"), Ok(Some(5)));
        assert_eq!(frame_len(b"-NOSCRIPT No matching script\r\n"), Ok(Some(30)));
        // A length no reply can have is no reply (not an overflow).
        assert_eq!(frame_len(b"$9223372036854775807\r\n"), Err(()));
        assert_eq!(frame_len(b"HTTP/1.1 400\r\n"), Err(()));
        assert_eq!(frame_len(b"$x\r\n"), Err(()));
    }
}
