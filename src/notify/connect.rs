//! Opening the subscriber's connection: the address (Sentinel's current
//! primary, or the configured one), TCP/TLS/Unix, timeouts, `AUTH` and
//! `CLIENT SETNAME` — the handshake before any subscription.

use std::io::{self, Write};
use std::net::{TcpStream, ToSocketAddrs};
#[cfg(unix)]
use std::os::unix::net::UnixStream;

use redis::ConnectionAddr;

use super::stream::Stream;
use super::{Shared, SWEEP};

impl Shared {
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
    pub(super) fn connect(&self) -> io::Result<(Stream, Stream)> {
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
        for i in 0..handshake.len() {
            let reply = parser.parse_value(&mut stream).map_err(io::Error::other)?;
            if let Err(e) = reply.extract_error() {
                if i + 1 < handshake.len() {
                    return Err(io::Error::other(e)); // AUTH refused
                }
                // The name only helps operators (CLIENT LIST): a user that may
                // not set it (no `client|setname`) subscribes all the same.
                tracing::debug!(error = %e, "leasehold: the subscriber's CLIENT SETNAME was refused; going on unnamed");
            }
        }
        stream.set_read_timeout(Some(SWEEP))?;
        let writer = stream.try_clone()?;
        Ok((stream, writer))
    }
}
