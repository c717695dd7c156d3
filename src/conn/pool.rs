//! A pool of connections to one Redis server: r2d2 with our manager
//! (socket timeouts, the last connect error kept typed); a connection
//! leaves the pool after any error that makes its next reply untrustworthy
//! (see [`Wire`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use redis::ConnectionLike;

use super::stream::TlsConfig;
use super::target::Target;
use super::wire::Wire;
use crate::error::{Error, Result};

/// A pool of connections to one server, with the last connect error kept
/// typed (r2d2 itself keeps only its text).
pub(crate) struct NodePool {
    pool: r2d2::Pool<Manager>,
    last_error: Arc<Mutex<Option<(Instant, redis::RedisError)>>>,
    /// The server, as errors name it (see [`Target::describe`]).
    addr: Arc<Mutex<Arc<str>>>,
}

/// How often a caller waiting for a pooled connection looks whether the
/// pool's attempt to connect failed meanwhile.
const POOL_POLL: Duration = Duration::from_millis(50);

impl NodePool {
    pub(crate) fn new(
        target: Arc<Target>,
        size: u32,
        connect: Duration,
        socket: Duration,
        tls: TlsConfig,
    ) -> Self {
        let last_error = Arc::new(Mutex::new(None));
        let addr = Arc::new(Mutex::new(Arc::from(target.describe())));
        let manager = Manager {
            addr: Arc::clone(&addr),
            target,
            tls,
            connect_timeout: connect,
            socket_timeout: socket,
            last_error: Arc::clone(&last_error),
        };
        // No PING on checkout: it would make lock + unlock three round
        // trips. A connection that broke is dropped by `has_broken` when it
        // comes back; one the server closed while it sat in the pool is
        // found so on checkout, before anything is sent on it
        // (`Wire::check_quiet`, no round trip), and another is taken.
        let pool = r2d2::Pool::builder()
            .max_size(size)
            .min_idle(Some(0))
            .test_on_check_out(true)
            .connection_timeout(connect)
            .error_handler(Box::new(r2d2::NopErrorHandler))
            .build_unchecked(manager);
        NodePool {
            pool,
            last_error,
            addr,
        }
    }

    /// The server, as errors name it: its address (with Sentinel, the
    /// primary's last one, or how it is found). Shared, not copied: every
    /// call names it (for its errors).
    pub(crate) fn addr(&self) -> Arc<str> {
        Arc::clone(&self.addr.lock())
    }

    /// A pooled connection, waiting at most `wait` (default: the connect
    /// timeout) — but not longer once an attempt to connect failed after we
    /// started waiting (r2d2 would keep retrying until the timeout): then the
    /// connection error, typed.
    pub(crate) fn get(&self, wait: Option<Duration>) -> Result<r2d2::PooledConnection<Manager>> {
        let wait = wait.unwrap_or_else(|| self.pool.connection_timeout());
        let started = Instant::now();
        let deadline = started + wait;
        loop {
            let slice = deadline
                .saturating_duration_since(Instant::now())
                .min(POOL_POLL);
            let e = match self.pool.get_timeout(slice) {
                Ok(con) => return Ok(con),
                Err(e) => e,
            };
            // An attempt to connect failed since we started, or the wait is
            // over: its error (typed), else the pool's.
            let over = Instant::now() >= deadline;
            match self.last_error.lock().clone() {
                Some((at, cause)) if at >= started || over => return Err(Error::from(cause)),
                None if over => {
                    return Err(Error::Pool {
                        addr: self.addr().to_string(),
                        message: e.to_string(),
                        timeout: wait,
                    })
                }
                _ => {}
            }
        }
    }

    pub(crate) fn timeout(&self) -> Duration {
        self.pool.connection_timeout()
    }
}

/// r2d2's manager: our connections; it keeps where the last one went and
/// the last connect error (see [`NodePool`]).
pub(crate) struct Manager {
    target: Arc<Target>,
    /// Where the last connection went (for errors).
    addr: Arc<Mutex<Arc<str>>>,
    tls: TlsConfig,
    connect_timeout: Duration,
    socket_timeout: Duration,
    last_error: Arc<Mutex<Option<(Instant, redis::RedisError)>>>,
}

impl r2d2::ManageConnection for Manager {
    type Connection = Pooled;
    type Error = redis::RedisError;

    fn connect(&self) -> Result<Pooled, redis::RedisError> {
        let result = self.target.client().and_then(|c| {
            let info = c.get_connection_info();
            *self.addr.lock() = Arc::from(self.target.describe_at(info.addr()));
            Wire::connect(info, &self.tls, self.connect_timeout, self.socket_timeout)
        });
        *self.last_error.lock() = result.as_ref().err().map(|e| (Instant::now(), e.clone()));
        result
    }

    fn is_valid(&self, con: &mut Pooled) -> Result<(), redis::RedisError> {
        con.check_quiet()
    }

    fn has_broken(&self, con: &mut Pooled) -> bool {
        !con.is_open()
    }
}

/// A pooled connection: our [`Wire`] (it leaves the pool once not open).
pub(crate) type Pooled = Wire;
