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
//! there is no tokio runtime here (or it has no I/O driver), no connection
//! could be made, a pooled one was found closed, or the server did not know
//! the script. Once a request went out, its answer is the caller's, as from
//! [`Connections::run_sent`](super::Connections::run_sent).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use redis::{ConnectionAddr, ConnectionInfo, ErrorKind, RedisConnectionInfo, RedisResult, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::runtime::{Handle, Id};

use super::wire::Hello;
use crate::park::Sleep;
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
    /// Idle connections, each with the runtime whose reactor it is
    /// registered with.
    idle: Mutex<Vec<(Id, TcpStream)>>,
    max_idle: usize,
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
        connect_timeout: Duration,
        max_idle: usize,
    ) -> Option<Lane> {
        let ConnectionAddr::Tcp(host, port) = info.addr() else {
            return None;
        };
        Some(Lane {
            host: host.clone(),
            port: *port,
            settings: info.redis_settings().clone(),
            connect_timeout,
            idle: Mutex::new(Vec::new()),
            max_idle: max_idle.max(1),
            no_io: Mutex::new(Vec::new()),
            backoff_until: Mutex::new(None),
            trouble: AtomicBool::new(false),
        })
    }

    /// Whether a call made here now could go on the lane: a tokio runtime
    /// with an I/O driver runs this task, and no connection failed lately.
    pub(crate) fn here(&self) -> Option<Id> {
        let id = Handle::try_current().ok()?.id();
        if !self.trouble.load(Ordering::Relaxed) {
            return Some(id);
        }
        if self.no_io.lock().contains(&id) {
            return None;
        }
        if self
            .backoff_until
            .lock()
            .is_some_and(|t| Instant::now() < t)
        {
            return None;
        }
        Some(id)
    }

    /// Sends `call` and reads its reply, waiting at most `connect` for a
    /// new connection and `io` for the reply.
    pub(crate) async fn call(&self, call: &Call<'_>, connect: Duration, io: Duration) -> Answer {
        let Some(runtime) = self.here() else {
            return Answer::Skip;
        };
        let pooled = {
            let mut idle = self.idle.lock();
            idle.iter()
                .rposition(|(id, _)| *id == runtime)
                .map(|i| idle.swap_remove(i).1)
        };
        let reused = pooled.is_some();
        let mut stream = match pooled {
            Some(stream) => stream,
            None => match self
                .connect(runtime, connect.min(self.connect_timeout))
                .await
            {
                Some(stream) => stream,
                None => return Answer::Skip,
            },
        };
        let bytes = call.cmd.get_packed_command();
        let mut buf = Vec::new();
        let exchange = async {
            stream
                .write_all(&bytes)
                .await
                .map_err(|_| Sending::Failed)?;
            let reply = read_reply(&mut stream, &mut buf)
                .await
                .map_err(Sending::Read)?;
            if !is_noscript(&reply) {
                return Ok(reply);
            }
            // The server does not know the script (restarted, `SCRIPT
            // FLUSH`; nothing ran): load it, send the call again.
            let load = redis::cmd("SCRIPT")
                .arg("LOAD")
                .arg(call.source)
                .get_packed_command();
            stream.write_all(&load).await.map_err(Sending::Io)?;
            let loaded = read_reply(&mut stream, &mut buf)
                .await
                .map_err(Sending::Read)?;
            loaded.extract_error().map_err(Sending::Read)?;
            stream.write_all(&bytes).await.map_err(Sending::Io)?;
            read_reply(&mut stream, &mut buf)
                .await
                .map_err(Sending::Read)
        };
        let reply = match within(io, exchange).await {
            None => {
                let timeout = io::Error::new(io::ErrorKind::TimedOut, "no reply in time");
                return Answer::Sent(Err(timeout.into()));
            }
            // Written to a socket the other end had closed, or closed
            // before a byte of the reply: what was sent never ran (as the
            // blocking wire judges it).
            Some(Err(Sending::Failed)) => return Answer::Skip,
            Some(Err(Sending::Read(e))) if reused && buf.is_empty() && closed(&e) => {
                return Answer::Skip;
            }
            Some(Err(Sending::Read(e))) => return Answer::Sent(Err(e)),
            Some(Err(Sending::Io(e))) => return Answer::Sent(Err(e.into())),
            Some(Ok(reply)) => reply,
        };
        self.keep(runtime, stream);
        Answer::Sent(reply.extract_error())
    }

    /// A new connection for `runtime`, handshake made; `None` when none
    /// could be made within `wait` (or this runtime has no I/O driver).
    async fn connect(&self, runtime: Id, wait: Duration) -> Option<TcpStream> {
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
            Some(Ok(Ok(stream))) => Some(stream),
            Some(Err(())) => {
                // Registering the socket panicked: the runtime has no I/O
                // driver (built without `enable_io`).
                tracing::warn!("leasehold: this tokio runtime has no I/O driver (enable_io); its tasks' round trips go through leasehold's I/O threads");
                self.no_io.lock().push(runtime);
                self.trouble.store(true, Ordering::Relaxed);
                None
            }
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

    /// Keeps `stream` for the next call of `runtime` (the oldest goes when
    /// there are enough).
    fn keep(&self, runtime: Id, stream: TcpStream) {
        let mut idle = self.idle.lock();
        if idle.len() >= self.max_idle {
            idle.remove(0);
        }
        idle.push((runtime, stream));
    }
}

/// Why an exchange failed: the request could not be written (nothing
/// ran), its reply not read, or a later write failed (the script may have
/// been loaded, the call not sent again).
enum Sending {
    Failed,
    Read(redis::RedisError),
    Io(io::Error),
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
            _ => {
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
                n => {
                    let total = end + n as usize + 2;
                    Ok((buf.len() >= total).then_some(total))
                }
            },
            b'*' if depth < 8 => {
                let n = number(buf, at + 1, end)?;
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
    use super::frame_len;

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
        assert_eq!(frame_len(b"-NOSCRIPT No matching script\r\n"), Ok(Some(31)));
        assert_eq!(frame_len(b"HTTP/1.1 400\r\n"), Err(()));
        assert_eq!(frame_len(b"$x\r\n"), Err(()));
    }
}
