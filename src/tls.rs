//! TLS over our own sockets (feature `tls`): the subscriber's and every
//! command connection's (`conn::Wire`). The subscriber keeps
//! its split-socket design: the reading thread blocks on the raw TCP socket
//! without holding anything, then feeds the bytes to the TLS session under
//! a short lock; writers encrypt and send under the same lock.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, ClientConnection, RootCertStore};

use crate::error::{Error, Result};

/// The client configuration for the subscriber: the given root certificate
/// (PEM), or the platform's trust store.
pub(crate) fn client_config(root_pem: Option<&[u8]>) -> Result<Arc<ClientConfig>> {
    let mut roots = RootCertStore::empty();
    let none = match root_pem {
        Some(pem) => {
            for cert in CertificateDer::pem_slice_iter(pem) {
                let cert = cert.map_err(|e| {
                    Error::invalid(format_args!("TLS root certificate is not valid PEM: {e}"))
                })?;
                roots.add(cert).map_err(|e| {
                    Error::invalid(format_args!("TLS root certificate was refused: {e}"))
                })?;
            }
            "TLS root certificate: no certificate in the PEM"
        }
        None => {
            roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
            "TLS: no trusted root certificates found on this system; pass one with tls_root_certificate"
        }
    };
    if roots.is_empty() {
        return Err(Error::invalid(none));
    }
    let config = ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// One TLS session over a TCP socket, shared by the reading and the writing
/// half of the subscriber connection.
pub(crate) struct TlsSocket {
    tcp: TcpStream,
    session: Mutex<ClientConnection>,
}

impl TlsSocket {
    /// Runs the handshake on `tcp` (its timeouts apply).
    pub(crate) fn connect(
        config: &Arc<ClientConfig>,
        host: &str,
        mut tcp: TcpStream,
    ) -> io::Result<Arc<TlsSocket>> {
        let name = ServerName::try_from(host.to_owned())
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let mut session =
            ClientConnection::new(Arc::clone(config), name).map_err(io::Error::other)?;
        while session.is_handshaking() {
            session.complete_io(&mut tcp)?;
        }
        Ok(Arc::new(TlsSocket {
            tcp,
            session: Mutex::new(session),
        }))
    }

    pub(crate) fn shutdown(&self, how: Shutdown) -> io::Result<()> {
        self.tcp.shutdown(how)
    }

    pub(crate) fn set_read_timeout(&self, d: Option<Duration>) -> io::Result<()> {
        self.tcp.set_read_timeout(d)
    }

    pub(crate) fn set_write_timeout(&self, d: Option<Duration>) -> io::Result<()> {
        self.tcp.set_write_timeout(d)
    }

    pub(crate) fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            let read = self.session.lock().reader().read(buf);
            if !matches!(&read, Err(e) if e.kind() == io::ErrorKind::WouldBlock) {
                return read;
            }
            // Wait for more records without holding the session.
            let mut raw = [0u8; 16 * 1024];
            let n = (&self.tcp).read(&mut raw)?;
            if n == 0 {
                return Ok(0);
            }
            let mut session = self.session.lock();
            let mut rest = &raw[..n];
            while !rest.is_empty() {
                session.read_tls(&mut rest)?;
                session.process_new_packets().map_err(io::Error::other)?;
            }
            while session.wants_write() {
                session.write_tls(&mut &self.tcp)?;
            }
        }
    }

    pub(crate) fn write(&self, buf: &[u8]) -> io::Result<usize> {
        let mut session = self.session.lock();
        session.writer().write_all(buf)?;
        while session.wants_write() {
            session.write_tls(&mut &self.tcp)?;
        }
        Ok(buf.len())
    }

    /// Nothing to do: every write is sent whole.
    pub(crate) fn flush(&self) -> io::Result<()> {
        Ok(())
    }

    /// Whether the session is as it was left after its last reply (see
    /// `Stream::check_quiet`), looked at without waiting. The records that
    /// came meanwhile are read: a session ticket is nothing to mind; the
    /// server's `close_notify`, or an end of file, is a closed connection;
    /// data is bytes nobody asked for.
    pub(crate) fn check_quiet(&self) -> io::Result<()> {
        let mut session = self.session.lock();
        self.tcp.set_nonblocking(true)?;
        let came = loop {
            match session.read_tls(&mut &self.tcp) {
                Ok(0) => break Err(crate::error::closed_while_idle()),
                Ok(_) => {
                    if let Err(e) = session.process_new_packets() {
                        break Err(io::Error::other(e));
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => break Err(e),
            }
        };
        self.tcp.set_nonblocking(false)?;
        came?;
        while session.wants_write() {
            session.write_tls(&mut &self.tcp)?;
        }
        match session.reader().read(&mut [0; 1]) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(()),
            Ok(0) => Err(crate::error::closed_while_idle()),
            Ok(_) => Err(crate::error::unasked_bytes()),
            Err(e) => Err(e),
        }
    }
}
