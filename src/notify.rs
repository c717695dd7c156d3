//! The shared pub/sub subscriber that wakes local waiters.
//!
//! One connection and one thread (`leasehold-sub`) per client, started the
//! first time a waiter needs it. Waiters register a channel; subscriptions are
//! reference-counted per channel, so a hundred threads waiting on one name
//! cost one `SUBSCRIBE`, and the last one to leave sends `UNSUBSCRIBE`.
//!
//! The connection is split in two halves: the thread blocks reading replies and
//! messages, while a waiter writes its own `SUBSCRIBE` on the shared socket
//! (under the state mutex) — so a subscription costs one round trip, with no
//! polling of the socket. A waiter counts as subscribed only when Redis has
//! acknowledged every `SUBSCRIBE`/`UNSUBSCRIBE` sent for its channel, so an
//! unlock published after that point cannot be missed.
//!
//! Each unlock message grants one permit (capped at the number of local
//! waiters) and one waiter takes it and retries, as Redisson's semaphore does;
//! the message `1` (a read/write lock's write unlock) wakes every waiter that
//! waits for it (counted per channel, so no waiter can take another's turn).
//! When the connection drops, every waiter gets a permit (retry now), and once
//! the channels are subscribed again on the new connection, again: a message
//! lost in between costs at most one retry, never a whole lease.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream, ToSocketAddrs};
#[cfg(unix)]
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use redis::{ConnectionAddr, ConnectionInfo, Value};

/// How long the subscriber connection may stay silent before we PING it;
/// a second silent period means it is dead and we reconnect.
const KEEPALIVE: Duration = Duration::from_secs(10);
const BACKOFF_MIN: Duration = Duration::from_millis(10);
const BACKOFF_MAX: Duration = Duration::from_secs(1);

/// The TLS configuration of the subscriber's socket (feature `tls`).
#[cfg(feature = "tls")]
pub(crate) type SubscriberTls = Option<Arc<rustls::ClientConfig>>;
/// Without the `tls` feature there is none.
#[cfg(not(feature = "tls"))]
pub(crate) type SubscriberTls = Option<std::convert::Infallible>;

/// The shared subscriber of one client.
pub(crate) struct Notifier {
    shared: Arc<Shared>,
}

struct Shared {
    addr: ConnectionAddr,
    username: Option<String>,
    password: Option<String>,
    client_name: String,
    connect_timeout: Duration,
    io_timeout: Duration,
    #[cfg_attr(not(feature = "tls"), allow(dead_code))]
    tls: SubscriberTls,
    /// Where the primary is now (Sentinel); `addr` otherwise.
    target: Option<Arc<crate::conn::Target>>,
    state: Mutex<State>,
    /// Wakes the subscriber thread (new channel while disconnected, shutdown).
    thread_cv: Condvar,
}

#[derive(Default)]
struct State {
    channels: HashMap<String, Channel>,
    /// Write half of the live connection; `None` while disconnected.
    writer: Option<Stream>,
    thread_started: bool,
    closed: bool,
}

struct Channel {
    /// Local waiters holding a [`Subscription`].
    refs: usize,
    /// `SUBSCRIBE`/`UNSUBSCRIBE` commands sent and not yet acknowledged.
    inflight: u32,
    /// Wake-ups granted and not yet taken.
    permits: usize,
    /// Unlock messages received on this channel since it was registered.
    messages: u64,
    /// Wake-all messages (`1`) received since the channel was registered:
    /// every waiter that saw fewer wakes, whatever the permits say.
    broadcasts: u64,
    /// Waiters of this channel retried while it was not subscribed (after a
    /// disconnect, or a confirmation that came too late): wake them all once
    /// Redis confirms the subscription.
    resync: bool,
    cv: Arc<Condvar>,
}

impl Channel {
    fn new() -> Self {
        Channel {
            refs: 0,
            inflight: 0,
            permits: 0,
            messages: 0,
            broadcasts: 0,
            resync: false,
            cv: Arc::new(Condvar::new()),
        }
    }

    fn wake_all(&mut self) {
        self.permits = self.refs;
        self.cv.notify_all();
    }
}

impl Notifier {
    /// A notifier for the server of `info`; nothing connects until a waiter
    /// subscribes. TLS addresses are refused by the caller beforehand.
    pub(crate) fn new(
        info: &ConnectionInfo,
        client_name: String,
        connect_timeout: Duration,
        io_timeout: Duration,
        tls: SubscriberTls,
        target: Option<Arc<crate::conn::Target>>,
    ) -> Self {
        let settings = info.redis_settings();
        Notifier {
            shared: Arc::new(Shared {
                addr: info.addr().clone(),
                username: settings.username().map(str::to_owned),
                password: settings.password().map(str::to_owned),
                client_name,
                connect_timeout,
                io_timeout,
                tls,
                target,
                state: Mutex::new(State::default()),
                thread_cv: Condvar::new(),
            }),
        }
    }

    /// Registers interest in `channel` and waits until Redis has confirmed the
    /// subscription, or until `confirm_by` (then the caller's waits are still
    /// capped by the holder's lease, so nothing hangs).
    pub(crate) fn subscribe(&self, channel: &str, confirm_by: Instant) -> Subscription {
        let shared = &self.shared;
        let mut st = shared.state.lock();
        if !st.thread_started && !st.closed {
            st.thread_started = true;
            let worker = Arc::clone(shared);
            let spawned = std::thread::Builder::new()
                .name("leasehold-sub".into())
                .spawn(move || worker.run());
            if let Err(e) = spawned {
                st.thread_started = false;
                tracing::warn!(error = %e, "leasehold: could not start the subscriber thread; waiters fall back to lease-capped retries");
            }
        }
        let State {
            channels, writer, ..
        } = &mut *st;
        let entry = channels
            .entry(channel.to_owned())
            .or_insert_with(Channel::new);
        entry.refs += 1;
        let cv = Arc::clone(&entry.cv);
        if entry.refs == 1 {
            match writer {
                Some(w) => {
                    entry.inflight += 1;
                    send(
                        w,
                        &redis::cmd("SUBSCRIBE").arg(channel).get_packed_command(),
                    );
                }
                // The thread subscribes every registered channel when it connects.
                None => {
                    shared.thread_cv.notify_all();
                }
            }
        }
        loop {
            let confirmed =
                st.writer.is_some() && st.channels.get(channel).is_some_and(|c| c.inflight == 0);
            if confirmed {
                break;
            }
            if cv.wait_until(&mut st, confirm_by).timed_out() {
                // The caller retries unsubscribed; wake it again once Redis
                // confirms, or a message published before then is lost to it.
                if let Some(c) = st.channels.get_mut(channel) {
                    c.resync = true;
                }
                break;
            }
        }
        drop(st);
        Subscription {
            shared: Arc::clone(shared),
            channel: channel.to_owned(),
            cv,
        }
    }

    /// Stops the subscriber thread: closes the socket it reads.
    pub(crate) fn close(&self) {
        let mut st = self.shared.state.lock();
        st.closed = true;
        if let Some(w) = st.writer.take() {
            w.shutdown();
        }
        self.shared.thread_cv.notify_all();
    }
}

/// One waiter's interest in one channel; dropping it gives the interest back.
pub(crate) struct Subscription {
    shared: Arc<Shared>,
    channel: String,
    cv: Arc<Condvar>,
}

impl Subscription {
    /// Whether Redis has acknowledged this channel's subscription on the live
    /// connection (so it counts in `PUBSUB NUMSUB`).
    pub(crate) fn confirmed(&self) -> bool {
        let st = self.shared.state.lock();
        st.writer.is_some()
            && st
                .channels
                .get(&self.channel)
                .is_some_and(|c| c.refs > 0 && c.inflight == 0)
    }

    /// Unlock messages this client received on the channel so far.
    pub(crate) fn messages(&self) -> u64 {
        let st = self.shared.state.lock();
        st.channels.get(&self.channel).map_or(0, |c| c.messages)
    }

    /// Parks until the channel has received more than `seen` messages, the
    /// connection drops, or `until`. Returns whether a message came.
    pub(crate) fn wait_for_message_after(&self, seen: u64, until: Instant) -> bool {
        let mut st = self.shared.state.lock();
        loop {
            match st.channels.get(&self.channel) {
                Some(c) if c.messages > seen => return true,
                Some(_) if st.writer.is_some() => {}
                _ => return false, // disconnected: nothing will count
            }
            if self.cv.wait_until(&mut st, until).timed_out() {
                return false;
            }
        }
    }

    /// Wake-all messages this client received on the channel so far.
    pub(crate) fn broadcasts(&self) -> u64 {
        let st = self.shared.state.lock();
        st.channels.get(&self.channel).map_or(0, |c| c.broadcasts)
    }

    /// Parks until a wake-up permit (taken), a wake-all message after the
    /// first `seen`, or `until`. Returns whether it was woken.
    pub(crate) fn wait_until_or_broadcast(&self, seen: u64, until: Instant) -> bool {
        let mut st = self.shared.state.lock();
        loop {
            if let Some(c) = st.channels.get_mut(&self.channel) {
                if c.broadcasts > seen {
                    return true;
                }
                if c.permits > 0 {
                    c.permits -= 1;
                    return true;
                }
            }
            if self.cv.wait_until(&mut st, until).timed_out() {
                return false;
            }
        }
    }

    /// Forgets wake-ups granted so far: called right before an attempt, which
    /// sees everything those messages announced.
    pub(crate) fn clear_permits(&self) {
        if let Some(c) = self.shared.state.lock().channels.get_mut(&self.channel) {
            c.permits = 0;
        }
    }

    /// Parks until an unlock message (or a reconnect) grants this waiter a
    /// wake-up, or until `until`. Returns whether it was woken.
    pub(crate) fn wait_until(&self, until: Instant) -> bool {
        let mut st = self.shared.state.lock();
        loop {
            if let Some(c) = st.channels.get_mut(&self.channel) {
                if c.permits > 0 {
                    c.permits -= 1;
                    return true;
                }
            }
            if self.cv.wait_until(&mut st, until).timed_out() {
                return false;
            }
        }
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let mut st = self.shared.state.lock();
        let State {
            channels, writer, ..
        } = &mut *st;
        let Some(c) = channels.get_mut(&self.channel) else {
            return;
        };
        c.refs = c.refs.saturating_sub(1);
        c.permits = c.permits.min(c.refs);
        if c.refs > 0 {
            return;
        }
        if let Some(w) = writer {
            c.inflight += 1;
            send(
                w,
                &redis::cmd("UNSUBSCRIBE")
                    .arg(&self.channel)
                    .get_packed_command(),
            );
        }
        if c.inflight == 0 {
            channels.remove(&self.channel);
        }
    }
}

/// Writes a command on the shared socket; on failure shuts it down so the
/// reader notices, reconnects and resubscribes.
fn send(w: &mut Stream, bytes: &[u8]) {
    if let Err(e) = w.write_all(bytes) {
        tracing::debug!(error = %e, "leasehold: subscriber write failed; reconnecting");
        w.shutdown();
    }
}

impl Shared {
    /// The subscriber thread: connect, resubscribe, read until the connection
    /// breaks, repeat with backoff; exit when the client is gone.
    fn run(self: Arc<Self>) {
        let mut backoff = BACKOFF_MIN;
        loop {
            match self.connect() {
                Ok((reader, writer)) => {
                    if !self.install(writer) {
                        return;
                    }
                    backoff = BACKOFF_MIN;
                    self.read_loop(reader);
                    if !self.disconnected() {
                        return;
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, addr = %self.addr, "leasehold: subscriber could not connect; waiters retry when the holder's lease runs out");
                }
            }
            let mut st = self.state.lock();
            if !st.closed {
                self.thread_cv.wait_for(&mut st, backoff);
            }
            // Reconnect only while someone waits: an idle client keeps no retry loop.
            while !st.closed && st.channels.is_empty() {
                self.thread_cv.wait(&mut st);
            }
            if st.closed {
                return;
            }
            backoff = (backoff * 2).min(BACKOFF_MAX);
        }
    }

    /// Makes `writer` the live connection and subscribes every channel that has
    /// waiters. Returns false when the client was closed meanwhile.
    fn install(&self, mut writer: Stream) -> bool {
        let mut st = self.state.lock();
        if st.closed {
            writer.shutdown();
            return false;
        }
        st.channels.retain(|_, c| c.refs > 0);
        if !st.channels.is_empty() {
            let mut cmd = redis::cmd("SUBSCRIBE");
            for (name, c) in st.channels.iter_mut() {
                cmd.arg(name);
                c.inflight = 1;
            }
            send(&mut writer, &cmd.get_packed_command());
        }
        st.writer = Some(writer);
        true
    }

    /// Forgets the broken connection and wakes every waiter to retry at once.
    /// Returns false when the client is closed (the thread should exit).
    fn disconnected(&self) -> bool {
        let mut st = self.state.lock();
        if let Some(w) = st.writer.take() {
            w.shutdown();
        }
        for c in st.channels.values_mut() {
            c.inflight = 0;
            // Retry now, and again once subscribed on the next connection:
            // messages published in between are lost.
            c.resync = true;
            c.wake_all();
        }
        st.channels.retain(|_, c| c.refs > 0);
        !st.closed
    }

    fn read_loop(&self, mut reader: Stream) {
        let mut parser = redis::Parser::new();
        let mut pinged = false;
        loop {
            match parser.parse_value(&mut reader) {
                Ok(value) => {
                    pinged = false;
                    self.handle(value);
                }
                Err(e) if e.is_timeout() && !pinged => {
                    let mut st = self.state.lock();
                    match st.writer.as_mut() {
                        Some(w) => send(w, &redis::cmd("PING").get_packed_command()),
                        None => return,
                    }
                    pinged = true;
                }
                Err(e) => {
                    if !self.state.lock().closed {
                        tracing::debug!(error = %e, "leasehold: subscriber connection lost; reconnecting");
                    }
                    return;
                }
            }
        }
    }

    fn handle(&self, value: Value) {
        let items = match value {
            Value::Array(items) => items,
            Value::Push { data, .. } => data,
            _ => return,
        };
        let (Some(kind), Some(channel)) = (items.first(), items.get(1)) else {
            return;
        };
        let (Some(kind), Some(channel)) = (as_bytes(kind), as_bytes(channel)) else {
            return;
        };
        let Ok(channel) = std::str::from_utf8(channel) else {
            return;
        };
        let mut st = self.state.lock();
        match kind {
            b"message" => {
                // `1` (a write unlock of a read/write lock, Redisson's
                // READ_UNLOCK_MESSAGE) wakes every waiter; anything else one.
                let all = items.get(2).and_then(as_bytes) == Some(b"1".as_slice());
                if let Some(c) = st.channels.get_mut(channel) {
                    c.messages += 1;
                    if all {
                        c.broadcasts += 1;
                        c.cv.notify_all();
                    } else if c.refs > 0 {
                        c.permits = (c.permits + 1).min(c.refs);
                        c.cv.notify_all();
                    }
                }
            }
            b"subscribe" | b"unsubscribe" => {
                let Some(c) = st.channels.get_mut(channel) else {
                    return;
                };
                c.inflight = c.inflight.saturating_sub(1);
                if c.inflight > 0 {
                    return;
                }
                if c.refs == 0 {
                    st.channels.remove(channel);
                } else if c.resync {
                    c.resync = false;
                    c.wake_all();
                } else {
                    c.cv.notify_all(); // the subscriber waiting for confirmation
                }
            }
            _ => {}
        }
    }

    /// A TCP connection to the first address of `host` that answers.
    fn tcp(&self, host: &str, port: u16) -> io::Result<TcpStream> {
        let mut last = None;
        for addr in (host, port).to_socket_addrs()? {
            match TcpStream::connect_timeout(&addr, self.connect_timeout) {
                Ok(s) => {
                    s.set_nodelay(true)?;
                    return Ok(s);
                }
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| io::Error::other("host resolved to no address")))
    }

    /// Opens the subscriber connection and authenticates it.
    fn connect(&self) -> io::Result<(Stream, Stream)> {
        let resolved;
        let addr = match &self.target {
            Some(target) => {
                let client = target.client().map_err(io::Error::other)?;
                resolved = client.get_connection_info().addr().clone();
                &resolved
            }
            None => &self.addr,
        };
        let mut stream = match addr {
            ConnectionAddr::Tcp(host, port) => Stream::Tcp(self.tcp(host, *port)?),
            #[cfg(feature = "tls")]
            ConnectionAddr::TcpTls { host, port, .. } => {
                let config = self.tls.as_ref().ok_or_else(|| {
                    io::Error::new(io::ErrorKind::Unsupported, "no TLS configuration")
                })?;
                let tcp = self.tcp(host, *port)?;
                tcp.set_read_timeout(Some(self.io_timeout))?;
                tcp.set_write_timeout(Some(self.io_timeout))?;
                Stream::Tls(crate::tls::TlsSocket::connect(config, host, tcp)?)
            }
            #[cfg(unix)]
            ConnectionAddr::Unix(path) => Stream::Unix(UnixStream::connect(path)?),
            other => {
                return Err(io::Error::new(
                    io::ErrorKind::Unsupported,
                    format!("leasehold cannot subscribe over {other:?}"),
                ));
            }
        };
        stream.set_write_timeout(Some(self.io_timeout))?;
        stream.set_read_timeout(Some(self.io_timeout))?;
        let mut handshake = redis::pipe();
        if let Some(password) = &self.password {
            let auth = handshake.cmd("AUTH");
            if let Some(user) = &self.username {
                auth.arg(user);
            }
            auth.arg(password);
        }
        handshake
            .cmd("CLIENT")
            .arg("SETNAME")
            .arg(&self.client_name);
        stream.write_all(&handshake.get_packed_pipeline())?;
        let mut parser = redis::Parser::new();
        for _ in 0..handshake.len() {
            let reply = parser
                .parse_value(&mut stream)
                .and_then(Value::extract_error)
                .map_err(io::Error::other)?;
            drop(reply);
        }
        stream.set_read_timeout(Some(KEEPALIVE))?;
        let writer = stream.try_clone()?;
        Ok((stream, writer))
    }
}

fn as_bytes(v: &Value) -> Option<&[u8]> {
    match v {
        Value::BulkString(b) => Some(b),
        Value::SimpleString(s) => Some(s.as_bytes()),
        _ => None,
    }
}

/// A socket we can split into a reading and a writing half.
enum Stream {
    Tcp(TcpStream),
    #[cfg(unix)]
    Unix(UnixStream),
    #[cfg(feature = "tls")]
    Tls(Arc<crate::tls::TlsSocket>),
}

impl Stream {
    fn try_clone(&self) -> io::Result<Stream> {
        Ok(match self {
            Stream::Tcp(s) => Stream::Tcp(s.try_clone()?),
            #[cfg(unix)]
            Stream::Unix(s) => Stream::Unix(s.try_clone()?),
            #[cfg(feature = "tls")]
            Stream::Tls(s) => Stream::Tls(Arc::clone(s)),
        })
    }

    /// Closes both directions; the reading half sees end-of-file at once.
    fn shutdown(&self) {
        let _ = match self {
            Stream::Tcp(s) => s.shutdown(Shutdown::Both),
            #[cfg(unix)]
            Stream::Unix(s) => s.shutdown(Shutdown::Both),
            #[cfg(feature = "tls")]
            Stream::Tls(s) => s.tcp().shutdown(Shutdown::Both),
        };
    }

    fn set_read_timeout(&self, d: Option<Duration>) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.set_read_timeout(d),
            #[cfg(unix)]
            Stream::Unix(s) => s.set_read_timeout(d),
            #[cfg(feature = "tls")]
            Stream::Tls(s) => s.tcp().set_read_timeout(d),
        }
    }

    fn set_write_timeout(&self, d: Option<Duration>) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.set_write_timeout(d),
            #[cfg(unix)]
            Stream::Unix(s) => s.set_write_timeout(d),
            #[cfg(feature = "tls")]
            Stream::Tls(s) => s.tcp().set_write_timeout(d),
        }
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(buf),
            #[cfg(unix)]
            Stream::Unix(s) => s.read(buf),
            #[cfg(feature = "tls")]
            Stream::Tls(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.write(buf),
            #[cfg(unix)]
            Stream::Unix(s) => s.write(buf),
            #[cfg(feature = "tls")]
            Stream::Tls(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.flush(),
            #[cfg(unix)]
            Stream::Unix(s) => s.flush(),
            #[cfg(feature = "tls")]
            Stream::Tls(_) => Ok(()), // every write is sent whole
        }
    }
}
