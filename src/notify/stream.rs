//! The subscriber's socket: TCP, Unix or TLS behind one type that splits
//! into a reading and a writing half, and the one way to write a command on
//! it (a failed write shuts it down, so the reader reconnects).

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
#[cfg(unix)]
use std::os::unix::net::UnixStream;
#[cfg(feature = "tls")]
use std::sync::Arc;
use std::time::Duration;

/// Writes a command on the shared socket; on failure shuts it down so the
/// reader notices, reconnects and resubscribes.
pub(super) fn send(w: &mut Stream, bytes: &[u8]) {
    if let Err(e) = w.write_all(bytes) {
        tracing::debug!(error = %e, "leasehold: subscriber write failed; reconnecting");
        w.shutdown();
    }
}

/// A socket we can split into a reading and a writing half.
pub(super) enum Stream {
    Tcp(TcpStream),
    #[cfg(unix)]
    Unix(UnixStream),
    #[cfg(feature = "tls")]
    Tls(Arc<crate::tls::TlsSocket>),
}

impl Stream {
    pub(super) fn try_clone(&self) -> io::Result<Stream> {
        Ok(match self {
            Stream::Tcp(s) => Stream::Tcp(s.try_clone()?),
            #[cfg(unix)]
            Stream::Unix(s) => Stream::Unix(s.try_clone()?),
            #[cfg(feature = "tls")]
            Stream::Tls(s) => Stream::Tls(Arc::clone(s)),
        })
    }

    /// Closes both directions; the reading half sees end-of-file at once.
    pub(super) fn shutdown(&self) {
        let _ = match self {
            Stream::Tcp(s) => s.shutdown(Shutdown::Both),
            #[cfg(unix)]
            Stream::Unix(s) => s.shutdown(Shutdown::Both),
            #[cfg(feature = "tls")]
            Stream::Tls(s) => s.tcp().shutdown(Shutdown::Both),
        };
    }

    pub(super) fn set_read_timeout(&self, d: Option<Duration>) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.set_read_timeout(d),
            #[cfg(unix)]
            Stream::Unix(s) => s.set_read_timeout(d),
            #[cfg(feature = "tls")]
            Stream::Tls(s) => s.tcp().set_read_timeout(d),
        }
    }

    pub(super) fn set_write_timeout(&self, d: Option<Duration>) -> io::Result<()> {
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
