//! Opening the subscriber's connection: the address (Sentinel's current
//! primary, or the configured one), then the socket and handshake every
//! connection of ours makes (`crate::conn`), named so operators see it.

use std::io;

use super::{Shared, SWEEP};
use crate::conn::stream::{self, Stream};

impl Shared {
    /// Opens the subscriber connection and authenticates it; returns its
    /// reading and writing halves.
    pub(super) fn connect(&self) -> io::Result<(Stream, Stream)> {
        let resolved;
        let info = match &self.target {
            Some(target) => {
                let client = target.client().map_err(io::Error::other)?;
                resolved = client.get_connection_info().clone();
                &resolved
            }
            None => &self.info,
        };
        let mut stream = stream::open(
            info.addr(),
            &self.tls,
            self.connect_timeout,
            self.io_timeout,
        )?;
        let mut parser = redis::Parser::new();
        crate::conn::handshake(
            &mut stream,
            &mut parser,
            info.redis_settings(),
            Some(&self.client_name),
            false,
        )
        .map_err(io::Error::other)?;
        stream.set_read_timeout(Some(SWEEP))?;
        let writer = stream.try_clone()?;
        Ok((stream, writer))
    }
}
