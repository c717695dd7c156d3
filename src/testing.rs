//! Testing support (feature `testing`): a throwaway `redis-server` for a
//! test — the real part, not a mock — started on a free loopback port with
//! no persistence, ready once it answers `PING`, killed and its files
//! removed on drop. leasehold's own tests stand on it.
//!
//! ```
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use leasehold::testing::TestServer;
//!
//! let redis = TestServer::start()?; // fails with what to install when there is no redis-server
//! let client = leasehold::LockClient::new(&redis.url())?;
//! let guard = client.lock("order:pay")?;
//! assert!(guard.is_held());
//! # Ok(()) }
//! ```
//!
//! The server binary is `$LEASEHOLD_REDIS_SERVER` when set (Valkey, another
//! Redis), else `redis-server` on the `PATH`
//! ([`TestServerBuilder::binary`] names one in code).
//!
//! **A fake instead**: leasehold has no trait of its own to mock — put the
//! few calls your code makes behind a trait of yours (`fn lock(&self, name:
//! &str) -> Result<Box<dyn Any>, E>`, say), implement it for
//! [`LockClient`](crate::LockClient) by calling through, and for a fake
//! that always grants (or always refuses) in your unit tests. Test the real
//! locking against a [`TestServer`]: what a lock promises (one holder,
//! leases, waking waiters) is Redis's behaviour, which a fake does not have.

use std::io;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// How long a server may take to answer its first `PING`.
const READY_WITHIN: Duration = Duration::from_secs(10);

/// A `redis-server` process for a test: see the [module docs](self).
/// Dropped, it is killed (`SIGKILL`, so a stopped one too) and reaped, and
/// the directory it made for its files removed.
#[derive(Debug)]
pub struct TestServer {
    child: Child,
    port: u16,
    dir: PathBuf,
    /// The directory was made here (removed on drop), not given.
    own_dir: bool,
    settings: TestServerBuilder,
}

/// How to start a [`TestServer`] ([`TestServer::builder`]).
#[derive(Debug, Clone, Default)]
pub struct TestServerBuilder {
    args: Vec<String>,
    password: Option<String>,
    port: Option<u16>,
    dir: Option<PathBuf>,
    binary: Option<PathBuf>,
    config: Option<PathBuf>,
    tls_ca: Option<Vec<u8>>,
}

impl TestServer {
    /// A server with default settings on a free loopback port.
    ///
    /// # Errors
    /// No server binary (the message says what to install), or it did not
    /// start or answer within 10 s (the message carries its log).
    pub fn start() -> io::Result<TestServer> {
        Self::builder().start()
    }

    /// A server with settings of your own.
    pub fn builder() -> TestServerBuilder {
        TestServerBuilder::default()
    }

    /// `redis://127.0.0.1:<port>/` — with the password when there is one,
    /// `rediss://` when started with a TLS certificate authority
    /// (`TestServerBuilder::tls_ca`, feature `tls`).
    pub fn url(&self) -> String {
        self.settings.url(self.port)
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Its process id (to stop it with `SIGSTOP` in a test of a stalled
    /// server, say).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The directory of its files (its log, `redis.log`).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Its log, and what it wrote to stderr (a setting it refused).
    pub fn log(&self) -> String {
        log_of(&self.dir)
    }

    /// Kills it now (`SIGKILL`) and waits for it to exit: a crash.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Kills it and starts a new, empty one on the same port with the same
    /// settings, as a crash and a restart without persistence would.
    ///
    /// # Errors
    /// The port did not come free, or the server did not start, within
    /// 10 s.
    pub fn restart(&mut self) -> io::Result<()> {
        self.kill();
        let deadline = Instant::now() + READY_WITHIN;
        loop {
            match spawn(&self.settings, self.port, &self.dir) {
                Ok(child) => {
                    self.child = child;
                    return Ok(());
                }
                Err(e) if in_use(&e) && Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(50));
                }
                Err(e) => return Err(e),
            }
        }
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.kill();
        if self.own_dir {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

impl TestServerBuilder {
    /// One more command-line setting (`arg("--maxmemory").arg("10mb")`).
    pub fn arg(mut self, arg: impl Into<String>) -> Self {
        self.args.push(arg.into());
        self
    }

    /// More command-line settings.
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Requires this password (`--requirepass`); [`TestServer::url`] carries
    /// it.
    pub fn password(mut self, password: impl Into<String>) -> Self {
        let password = password.into();
        self.args
            .extend(["--requirepass".to_owned(), password.clone()]);
        self.password = Some(password);
        self
    }

    /// This port (it must be free) instead of a free one.
    pub fn port(mut self, port: u16) -> Self {
        self.port = Some(port);
        self
    }

    /// Keeps its files in `dir` (made if missing, left on drop) instead of
    /// a temporary directory of its own.
    pub fn dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.dir = Some(dir.into());
        self
    }

    /// A configuration file, read before the command-line settings (which
    /// win): a Sentinel's, say (`config_file(conf).arg("--sentinel")`).
    pub fn config_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.config = Some(path.into());
        self
    }

    /// The server binary, instead of `$LEASEHOLD_REDIS_SERVER` or
    /// `redis-server`.
    pub fn binary(mut self, binary: impl Into<PathBuf>) -> Self {
        self.binary = Some(binary.into());
        self
    }

    /// The server speaks TLS only (its `--tls-*` settings given with
    /// [`arg`](Self::arg)), with a certificate `ca` (PEM) vouches for: the
    /// readiness check connects with it, and [`TestServer::url`] is
    /// `rediss://`.
    #[cfg(feature = "tls")]
    pub fn tls_ca(mut self, ca: impl Into<Vec<u8>>) -> Self {
        self.tls_ca = Some(ca.into());
        self
    }

    /// Starts it and waits until it answers `PING`.
    ///
    /// # Errors
    /// As [`TestServer::start`].
    pub fn start(self) -> io::Result<TestServer> {
        let tries = if self.port.is_some() { 1 } else { 5 };
        let mut last = None;
        for _ in 0..tries {
            let port = match self.port {
                Some(port) => port,
                None => free_port()?,
            };
            let (dir, own_dir) = match &self.dir {
                Some(dir) => (dir.clone(), false),
                None => (fresh_dir(port), true),
            };
            match spawn(&self, port, &dir) {
                Ok(child) => {
                    return Ok(TestServer {
                        child,
                        port,
                        dir,
                        own_dir,
                        settings: self,
                    })
                }
                Err(e) => {
                    if own_dir {
                        let _ = std::fs::remove_dir_all(&dir);
                    }
                    if !in_use(&e) {
                        return Err(e);
                    }
                    last = Some(e);
                }
            }
        }
        Err(last.unwrap_or_else(|| io::Error::other("no free port")))
    }

    /// `$LEASEHOLD_REDIS_SERVER`, or `redis-server` on the `PATH`.
    fn binary_path(&self) -> PathBuf {
        self.binary.clone().unwrap_or_else(|| {
            std::env::var_os("LEASEHOLD_REDIS_SERVER")
                .map_or_else(|| PathBuf::from("redis-server"), PathBuf::from)
        })
    }

    /// The URL of a server of these settings on `port`.
    fn url(&self, port: u16) -> String {
        let scheme = match self.tls_ca {
            Some(_) => "rediss",
            None => "redis",
        };
        match &self.password {
            Some(p) => format!("{scheme}://:{}@127.0.0.1:{port}/", percent_encoded(p)),
            None => format!("{scheme}://127.0.0.1:{port}/"),
        }
    }

    /// A connection to a server of these settings on `port`.
    fn connect(&self, port: u16) -> redis::RedisResult<redis::Connection> {
        let client = match &self.tls_ca {
            #[cfg(feature = "tls")]
            Some(ca) => redis::Client::build_with_tls(
                self.url(port),
                redis::TlsCertificates {
                    client_tls: None,
                    root_cert: Some(ca.clone()),
                },
            )?,
            _ => redis::Client::open(self.url(port))?,
        };
        let con = client.get_connection_with_timeout(Duration::from_secs(1))?;
        con.set_read_timeout(Some(Duration::from_secs(5)))?;
        Ok(con)
    }
}

/// A server of `settings` on `port`, its files in `dir`, once it answers
/// `PING` as the process just started (not another on the same port).
/// An error of kind `AddrInUse` when the port was taken.
fn spawn(settings: &TestServerBuilder, port: u16, dir: &Path) -> io::Result<Child> {
    std::fs::create_dir_all(dir)?;
    // A setting the server refuses is said on stderr, before the log.
    let stderr = std::fs::File::create(dir.join("stderr.log"))?;
    let bin = settings.binary_path();
    let mut command = Command::new(&bin);
    if let Some(config) = &settings.config {
        command.arg(config);
    }
    let mut child = command
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no"])
        .arg("--dir")
        .arg(dir)
        .arg("--logfile")
        .arg(dir.join("redis.log"))
        .args(&settings.args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => io::Error::new(
                io::ErrorKind::NotFound,
                format!(
                    "`{}` was not found: install Redis (`apt-get install -y redis-server` on \
                     Debian), or name a server binary in LEASEHOLD_REDIS_SERVER",
                    bin.display()
                ),
            ),
            _ => io::Error::new(e.kind(), format!("cannot start `{}`: {e}", bin.display())),
        })?;
    let failed = |child: &mut Child, kind: io::ErrorKind, what: String| {
        let _ = child.kill();
        let _ = child.wait();
        io::Error::new(kind, format!("{what}; its log:\n{}", log_of(dir)))
    };
    let deadline = Instant::now() + READY_WITHIN;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            let log = log_of(dir);
            let kind = match log.contains("Address already in use") {
                true => io::ErrorKind::AddrInUse,
                false => io::ErrorKind::Other,
            };
            return Err(io::Error::new(
                kind,
                format!("redis-server on port {port} exited ({status}); its log:\n{log}"),
            ));
        }
        if let Ok(mut con) = settings.connect(port) {
            if redis::cmd("PING").query::<String>(&mut con).is_ok() {
                // The server that answers must be ours: another test may
                // have been given the same free port at the same moment,
                // and then ours cannot bind it (its exit may come later).
                let info: String = redis::cmd("INFO")
                    .arg("server")
                    .query(&mut con)
                    .unwrap_or_default();
                let pid = format!("process_id:{}", child.id());
                if info.lines().any(|l| l.trim() == pid) {
                    return Ok(child);
                }
                let what = format!("port {port} answers for another server");
                return Err(failed(&mut child, io::ErrorKind::AddrInUse, what));
            }
        }
        if Instant::now() > deadline {
            let what = format!("redis-server on port {port} did not answer PING within 10 s");
            return Err(failed(&mut child, io::ErrorKind::TimedOut, what));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// `text` as a URL's user information may hold it: every byte but the
/// unreserved ones (`A-Z a-z 0-9 - . _ ~`) as `%XX`.
fn percent_encoded(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Whether a start failed only because its port was taken.
fn in_use(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::AddrInUse
}

/// A loopback port free now.
fn free_port() -> io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// A fresh directory name for one server's files.
fn fresh_dir(port: u16) -> PathBuf {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    std::env::temp_dir().join(format!(
        "leasehold-test-{}-{}-{port}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed),
    ))
}

/// The log in `dir`, and what the server wrote to stderr.
fn log_of(dir: &Path) -> String {
    let log = std::fs::read_to_string(dir.join("redis.log")).unwrap_or_default();
    let stderr = std::fs::read_to_string(dir.join("stderr.log")).unwrap_or_default();
    match stderr.trim().is_empty() {
        true => log,
        false => format!("{log}\n[stderr]\n{stderr}"),
    }
}
