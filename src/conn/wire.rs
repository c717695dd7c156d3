//! Our own command connection to Redis ([`Wire`]), for pooled and renewal
//! connections, and the one handshake (`AUTH`, `SELECT`, `CLIENT SETNAME`)
//! every connection of ours makes. Ours rather than the `redis` crate's
//! because a reply must survive its read being interrupted: the crate
//! reports `EINTR` (a process stopped and continued mid-call) as an error and
//! then skips the reply as late — a script that ran in Redis would look like
//! one that failed. [`Stream`] reads on instead. The `redis` crate still
//! encodes commands, parses replies and runs scripts over it
//! ([`redis::ConnectionLike`]).

use std::io::Write;
use std::time::{Duration, Instant};

use redis::{ConnectionInfo, RedisConnectionInfo, RedisResult, Value};

use super::stream::{self, Stream, TlsConfig, QUIET_UNCHECKED};
use crate::error::Retry;

/// A connection for commands: send, then read the replies in order.
pub(crate) struct Wire {
    stream: Stream,
    parser: redis::Parser,
    db: i64,
    /// The read and write timeout the socket has now.
    io: Duration,
    /// False after any error that leaves a reply unread or the socket
    /// unusable, or that says the server is no primary now (a failover: a
    /// new connection finds the new one) — [`Retry::Reconnect`]: the pool
    /// drops it. Its next reply could be a late one to the request it gave
    /// up on — or, when the request itself was lost, a reply it would
    /// wrongly skip as late — so it is never trusted again.
    open: bool,
    /// When its last request ended (see [`QUIET_UNCHECKED`]).
    answered: Instant,
}

impl Wire {
    /// Connects to the server of `info` within `connect`, `io` the timeout
    /// of each read and write, and makes the handshake.
    pub(crate) fn connect(
        info: &ConnectionInfo,
        tls: &TlsConfig,
        connect: Duration,
        io: Duration,
    ) -> RedisResult<Wire> {
        let mut stream = stream::open(info.addr(), tls, connect, io)?;
        let mut parser = redis::Parser::new();
        let settings = info.redis_settings();
        handshake(&mut stream, &mut parser, settings, None, true)?;
        Ok(Wire {
            stream,
            parser,
            db: settings.db(),
            io,
            open: true,
            answered: Instant::now(),
        })
    }

    /// Whether the connection is as its last reply left it: checked before
    /// a request goes out on a connection that sat idle (see
    /// [`Stream::check_quiet`]). One the server closed meanwhile is not
    /// open after; no request was sent on it, so one may go on another.
    /// Once sent, an end of file is no such proof: the server may have run
    /// the request and then closed (a `CLIENT KILL`, a crash), and a
    /// request sent twice — a reentrant hold's release, permits added — is
    /// not the request sent once.
    pub(crate) fn check_quiet(&mut self) -> RedisResult<()> {
        if self.answered.elapsed() < QUIET_UNCHECKED {
            return Ok(());
        }
        let quiet = self.stream.check_quiet();
        self.open &= quiet.is_ok();
        Ok(quiet?)
    }

    /// Makes `io` the longest each read and write may take from now on (a
    /// system call only when it changes).
    pub(crate) fn set_io_timeout(&mut self, io: Duration) -> RedisResult<()> {
        if io != self.io {
            let set = self.stream.set_timeouts(io, io);
            self.open &= set.is_ok();
            set?;
            self.io = io;
        }
        Ok(())
    }

    fn send(&mut self, bytes: &[u8]) -> RedisResult<()> {
        self.stream.write_all(bytes).map_err(|e| {
            self.open = false;
            e.into()
        })
    }

    fn recv(&mut self) -> RedisResult<Value> {
        let parsed = read_reply(&mut self.parser, &mut self.stream);
        match &parsed {
            // A timeout, a closed socket, bytes that are no reply: whatever
            // follows on this socket cannot be trusted.
            Err(_) => self.open = false,
            // The server closes it after this reply: a request sent on it
            // next would meet the close after it went out.
            Ok(Value::ServerError(e)) if crate::error::closes_connection(e.details()) => {
                self.open = false;
            }
            Ok(_) => {}
        }
        parsed
    }
}

/// Authenticates a new connection (`AUTH`), selects the database of
/// `settings` when `select` (commands; a subscriber needs none), and names
/// it (`CLIENT SETNAME`) if `name` is given — a name only helps operators, so
/// a user that may not set one connects all the same. One round trip.
pub(crate) fn handshake(
    stream: &mut Stream,
    parser: &mut redis::Parser,
    settings: &RedisConnectionInfo,
    name: Option<&str>,
    select: bool,
) -> RedisResult<()> {
    let pipe = hello(settings, name, select);
    stream.write_all(&pipe.get_packed_pipeline())?; // none: nothing sent
    for i in 0..pipe.len() {
        let Err(e) = read_reply(parser, stream)?.extract_error() else {
            continue;
        };
        // Only an ACL refusal of the name is harmless; anything else (AUTH
        // or SELECT refused, a full server) fails the connection.
        if name.is_none() || i + 1 < pipe.len() || e.code() != Some("NOPERM") {
            return Err(e);
        }
        tracing::debug!(error = %e, "leasehold: CLIENT SETNAME was refused; going on unnamed");
    }
    Ok(())
}

/// The handshake's commands (the tokio transport sends them too).
pub(crate) fn hello(
    settings: &RedisConnectionInfo,
    name: Option<&str>,
    select: bool,
) -> redis::Pipeline {
    let mut pipe = redis::pipe();
    if let Some(password) = settings.password() {
        let auth = pipe.cmd("AUTH");
        if let Some(user) = settings.username() {
            auth.arg(user);
        }
        auth.arg(password);
    }
    if select && settings.db() != 0 {
        pipe.cmd("SELECT").arg(settings.db());
    }
    if let Some(name) = name {
        pipe.cmd("CLIENT").arg("SETNAME").arg(name);
    }
    pipe
}

/// One reply off `stream`; bytes that are not Redis protocol at all (another
/// service on the port, a TLS port spoken to in clear) are said to be that
/// (`error::not_redis`).
fn read_reply(parser: &mut redis::Parser, stream: &mut Stream) -> RedisResult<Value> {
    parser.parse_value(stream).map_err(|e| {
        if e.kind() == redis::ErrorKind::Parse {
            crate::error::not_redis(&e)
        } else {
            e
        }
    })
}

impl redis::ConnectionLike for Wire {
    fn req_packed_command(&mut self, cmd: &[u8]) -> RedisResult<Value> {
        self.send(cmd)?;
        let reply = self.recv();
        self.answered = Instant::now();
        reply
    }

    fn req_packed_commands(
        &mut self,
        cmd: &[u8],
        offset: usize,
        count: usize,
    ) -> RedisResult<Vec<Value>> {
        self.send(cmd)?;
        self.read_replies(offset, count)
    }

    fn get_db(&self) -> i64 {
        self.db
    }

    fn check_connection(&mut self) -> bool {
        redis::cmd("PING").query::<String>(self).is_ok()
    }

    fn is_open(&self) -> bool {
        self.open
    }
}

impl Wire {
    /// Writes a request whose replies are read later, through
    /// [`replies`](Self::replies): requests to several servers go out
    /// before any reply is waited for.
    pub(crate) fn write(&mut self, bytes: &[u8]) -> RedisResult<()> {
        self.send(bytes)
    }

    /// The connection as one that only reads the replies to what
    /// [`write`](Self::write) sent: a pipeline's `query` on it sends
    /// nothing (it reads the pipeline's replies, as the `redis` crate
    /// counts and parses them).
    pub(crate) fn replies(&mut self) -> Replies<'_> {
        Replies(self)
    }

    /// `offset + count` replies; the first `offset` skipped (a
    /// transaction's `QUEUED`s).
    fn read_replies(&mut self, offset: usize, count: usize) -> RedisResult<Vec<Value>> {
        let mut replies = Vec::with_capacity(count);
        let mut skipped_error = None;
        for i in 0..offset + count {
            match self.recv()? {
                // A reply we were told to skip (a transaction's `QUEUED`s)
                // that is an error: the transaction was aborted.
                Value::ServerError(e) if i < offset => skipped_error = Some(e),
                _ if i < offset => {}
                reply => replies.push(reply),
            }
        }
        self.answered = Instant::now();
        let Some(e) = skipped_error else {
            return Ok(replies);
        };
        let e = redis::RedisError::from(e);
        self.open &= Retry::of(&e) != Retry::Reconnect;
        Err(e)
    }
}

/// A [`Wire`] whose requests went out already (see [`Wire::replies`]).
pub(crate) struct Replies<'a>(&'a mut Wire);

impl redis::ConnectionLike for Replies<'_> {
    fn req_packed_command(&mut self, _written: &[u8]) -> RedisResult<Value> {
        let reply = self.0.recv();
        self.0.answered = Instant::now();
        reply
    }

    fn req_packed_commands(
        &mut self,
        _written: &[u8],
        offset: usize,
        count: usize,
    ) -> RedisResult<Vec<Value>> {
        self.0.read_replies(offset, count)
    }

    fn get_db(&self) -> i64 {
        self.0.db
    }

    fn check_connection(&mut self) -> bool {
        false
    }

    fn is_open(&self) -> bool {
        self.0.open
    }
}
