//! A socket to Redis — TCP, Unix or TLS behind one type that splits into a
//! reading and a writing half — and the one way to open one ([`open`]).
//! Reads go on after `EINTR`: on Linux a socket read with a timeout fails
//! with it when the process is stopped and continued (a debugger, a
//! container freezer, `kill -STOP`), and the reply is still on its way.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream, ToSocketAddrs};
#[cfg(unix)]
use std::os::unix::net::UnixStream;
#[cfg(feature = "tls")]
use std::sync::Arc;
use std::time::Duration;

use redis::ConnectionAddr;

/// The TLS configuration for `rediss://` addresses (feature `tls`).
#[cfg(feature = "tls")]
pub(crate) type TlsConfig = Option<Arc<rustls::ClientConfig>>;
/// Without the `tls` feature there is none.
#[cfg(not(feature = "tls"))]
pub(crate) type TlsConfig = Option<std::sync::Arc<std::convert::Infallible>>;

/// Opens a socket to `addr`: the first of its addresses that answers within
/// `connect`, with `io` as its read and write timeouts, TLS as `tls` says.
pub(crate) fn open(
    addr: &ConnectionAddr,
    tls: &TlsConfig,
    connect: Duration,
    io: Duration,
) -> io::Result<Stream> {
    #[cfg(not(feature = "tls"))]
    let _ = tls;
    let stream = match addr {
        ConnectionAddr::Tcp(host, port) => Stream::Tcp(tcp(host, *port, connect)?),
        #[cfg(feature = "tls")]
        ConnectionAddr::TcpTls { host, port, .. } => {
            let config = tls.as_ref().ok_or_else(|| {
                io::Error::new(io::ErrorKind::Unsupported, "no TLS configuration")
            })?;
            let tcp = tcp(host, *port, connect)?;
            tcp.set_read_timeout(Some(io))?;
            tcp.set_write_timeout(Some(io))?;
            Stream::Tls(crate::tls::TlsSocket::connect(config, host, tcp)?)
        }
        #[cfg(unix)]
        ConnectionAddr::Unix(path) => Stream::Unix(UnixStream::connect(path)?),
        other => {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                format!("leasehold cannot connect over {other:?}"),
            ));
        }
    };
    stream.set_timeouts(io, io)?;
    Ok(stream)
}

/// A TCP connection (no Nagle delay) to the first address of `host` that
/// answers.
fn tcp(host: &str, port: u16, timeout: Duration) -> io::Result<TcpStream> {
    let mut last = None;
    for addr in (host, port).to_socket_addrs()? {
        match TcpStream::connect_timeout(&addr, timeout) {
            Ok(s) => {
                s.set_nodelay(true)?;
                return Ok(s);
            }
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| io::Error::other("host resolved to no address")))
}

/// A socket we can split into a reading and a writing half.
pub(crate) enum Stream {
    Tcp(TcpStream),
    #[cfg(unix)]
    Unix(UnixStream),
    #[cfg(feature = "tls")]
    Tls(Arc<crate::tls::TlsSocket>),
}

/// `$e` with `$s` the socket of `$stream`, whatever its kind.
macro_rules! each {
    ($stream:expr, $s:ident => $e:expr) => {
        match $stream {
            Stream::Tcp($s) => $e,
            #[cfg(unix)]
            Stream::Unix($s) => $e,
            #[cfg(feature = "tls")]
            Stream::Tls($s) => $e,
        }
    };
}

impl Stream {
    pub(crate) fn try_clone(&self) -> io::Result<Stream> {
        Ok(match self {
            Stream::Tcp(s) => Stream::Tcp(s.try_clone()?),
            #[cfg(unix)]
            Stream::Unix(s) => Stream::Unix(s.try_clone()?),
            #[cfg(feature = "tls")]
            Stream::Tls(s) => Stream::Tls(Arc::clone(s)),
        })
    }

    /// Closes both directions; the reading half sees end-of-file at once.
    pub(crate) fn shutdown(&self) {
        let _ = each!(self, s => s.shutdown(Shutdown::Both));
    }

    /// Makes `read` the longest each read may take, `write` each write.
    pub(crate) fn set_timeouts(&self, read: Duration, write: Duration) -> io::Result<()> {
        each!(self, s => s.set_read_timeout(Some(read)))?;
        each!(self, s => s.set_write_timeout(Some(write)))
    }

    /// Whether the connection is as it was left after its last reply,
    /// looked at without waiting: nothing to read on it. A server that
    /// closed it meanwhile (its `timeout`, a restart, `CLIENT KILL`) left
    /// an end of file, or a reset, there; bytes nobody asked for would be
    /// read as the next request's reply. Only before a request goes out can
    /// the two be told apart: once sent, a close may have come after the
    /// request ran.
    pub(crate) fn check_quiet(&self) -> io::Result<()> {
        let mut buf = [0; 64];
        let got = match self {
            Stream::Tcp(s) => read_now(s, &mut buf)?,
            #[cfg(unix)]
            Stream::Unix(s) => read_now(s, &mut buf)?,
            #[cfg(feature = "tls")]
            Stream::Tls(s) => return s.check_quiet(),
        };
        match got {
            None => Ok(()),
            Some(0) => Err(crate::error::closed_while_idle()),
            Some(_) => Err(crate::error::unasked_bytes()),
        }
    }
}

/// A connection answered more recently than this is not checked before
/// its next request ([`Stream::check_quiet`]): the check's system calls
/// (about a microsecond) stay under a thousandth of a connection's time
/// however often it is used, where checking every request cost the
/// uncontended pair 5 % (`BENCH_ONLY=w1`). A close that came within a
/// millisecond of a reply is one a check would often miss anyway: over a
/// network it is still on its way. Such a request fails, is not sent again.
pub(crate) const QUIET_UNCHECKED: Duration = Duration::from_millis(1);

/// A socket that can be made non-blocking for a moment.
trait Socket {
    fn set_nonblocking(&self, on: bool) -> io::Result<()>;
}

impl Socket for TcpStream {
    fn set_nonblocking(&self, on: bool) -> io::Result<()> {
        TcpStream::set_nonblocking(self, on)
    }
}

#[cfg(unix)]
impl Socket for UnixStream {
    fn set_nonblocking(&self, on: bool) -> io::Result<()> {
        UnixStream::set_nonblocking(self, on)
    }
}

/// What waits on `s` now, without waiting for more: `None` nothing,
/// `Some(n)` `n` bytes read into `buf` (0: the other end closed it).
/// The socket blocks again after, as its timeouts assume.
fn read_now<S: Socket>(s: &S, buf: &mut [u8]) -> io::Result<Option<usize>>
where
    for<'a> &'a S: Read,
{
    s.set_nonblocking(true)?;
    let read = loop {
        match (&mut &*s).read(buf) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            read => break read,
        }
    };
    s.set_nonblocking(false)?;
    match read {
        Ok(n) => Ok(Some(n)),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
        Err(e) => Err(e),
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            let read = each!(self, s => s.read(buf));
            // Interrupted before anything was read (the process was stopped
            // and continued): read on. Each stop interrupts one read, so this
            // cannot spin; the socket's timeout bounds each read as before.
            if !matches!(&read, Err(e) if e.kind() == io::ErrorKind::Interrupted) {
                return read;
            }
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        each!(self, s => s.write(buf))
    }

    fn flush(&mut self) -> io::Result<()> {
        each!(self, s => s.flush())
    }
}
