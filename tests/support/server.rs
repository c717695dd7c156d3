//! One throwaway `redis-server`: started on a free loopback port with no
//! persistence (`--save "" --appendonly no`) and its log in a temp dir,
//! ready once it answers PING, killed and reaped on drop; restarted empty on
//! its port; signalled (`STOP`, `CONT`); asked what it ran
//! (`INFO commandstats`) and who listens. `LEASEHOLD_REDIS_SERVER` names
//! another server binary (Valkey, an older Redis: scripts/test.sh runs a
//! matrix of them); [`server_version`] says which one runs.

use std::collections::HashMap;
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::Command;

use leasehold::testing::TestServer;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

static NEXT_DIR: AtomicU32 = AtomicU32::new(0);

/// A `redis-server` process owned by the test: the library's own
/// [`TestServer`] (feature `testing`), with the settings it was started
/// with (to start it again changed) and what the tests ask of it.
pub struct RedisServer {
    pub(super) server: TestServer,
    pub(super) port: u16,
    pub(super) dir: PathBuf,
    pub(super) password: Option<String>,
    pub(super) extra: Vec<String>,
    /// The CA (here: the self-signed certificate) of a TLS-only server.
    pub(super) tls_ca: Option<Vec<u8>>,
}

impl RedisServer {
    /// A server with default settings.
    pub fn start() -> Self {
        Self::start_with(&[], None)
    }

    /// A server that requires `password` (`--requirepass`).
    pub fn start_with_password(password: &str) -> Self {
        Self::start_with(&["--requirepass", password], Some(password))
    }

    /// A server whose `DEBUG` command may be used (Redis ≥ 7 refuses it
    /// unless `--enable-debug-command yes`; older servers do not know that
    /// setting and always allow it).
    pub fn start_with_debug_command() -> Self {
        if server_version() >= (7, 0, 0) {
            Self::start_with(&["--enable-debug-command", "yes"], None)
        } else {
            Self::start()
        }
    }

    /// A server with extra command-line settings.
    pub fn start_with(extra: &[&str], password: Option<&str>) -> Self {
        let mut last_log = String::new();
        for _ in 0..5 {
            match Self::try_start(extra, password) {
                Ok(server) => return server,
                Err(log) if log.contains("Address already in use") => last_log = log,
                Err(log) => panic!("redis-server did not start; its log:\n{log}"),
            }
        }
        panic!("redis-server found no free port after 5 tries; last log:\n{last_log}");
    }

    /// A server with default settings on `port` (which must be free now,
    /// e.g. one a client was already told to use).
    pub fn start_on_port(port: u16) -> Self {
        Self::spawn(port, server_dir(port), Vec::new(), None, None)
            .unwrap_or_else(|log| panic!("redis-server did not start on port {port}:\n{log}"))
    }

    fn try_start(extra: &[&str], password: Option<&str>) -> Result<Self, String> {
        let port = free_port();
        let dir = server_dir(port);
        let extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        let started = Self::spawn(port, dir.clone(), extra, password.map(str::to_owned), None);
        if started.is_err() {
            let _ = std::fs::remove_dir_all(&dir); // a fresh one: nothing else uses it
        }
        started
    }

    /// Kills the server and starts a new, empty one on the same port (no
    /// persistence: every key is gone), as a crash and restart would.
    pub fn restart(&mut self) {
        self.kill();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let dir = self.dir.clone();
            match Self::spawn(
                self.port,
                dir,
                self.extra.clone(),
                self.password.clone(),
                self.tls_ca.clone(),
            ) {
                Ok(mut fresh) => {
                    std::mem::swap(self, &mut fresh);
                    // `fresh` is the dead old server now: drop it without
                    // removing the directory the new one uses.
                    fresh.dir = PathBuf::new();
                    return;
                }
                Err(log) if Instant::now() < deadline => {
                    let _ = log;
                    std::thread::sleep(Duration::from_millis(50));
                }
                Err(log) => panic!("redis-server did not restart on port {}:\n{log}", self.port),
            }
        }
    }

    /// Kills the server and starts a new, empty one on the same port as a
    /// replica of `primary` — a server whose configuration Sentinel had
    /// rewritten coming back after a crash.
    pub fn restart_as_replica_of(&mut self, primary: &RedisServer) {
        self.extra = vec![
            "--replicaof".into(),
            "127.0.0.1".into(),
            primary.port().to_string(),
        ];
        if let Some(pw) = &self.password {
            self.extra.extend(["--masterauth".into(), pw.clone()]);
        }
        self.restart();
    }

    /// A server on `port`, its files in `dir` (which it keeps), with
    /// `extra` settings; `password` and `tls_ca` say how to reach it. An
    /// error says "Address already in use" when the port was taken.
    pub(super) fn spawn(
        port: u16,
        dir: PathBuf,
        extra: Vec<String>,
        password: Option<String>,
        tls_ca: Option<Vec<u8>>,
    ) -> Result<Self, String> {
        let mut builder = TestServer::builder()
            .port(port)
            .dir(&dir)
            .binary(server_bin())
            .args(extra.iter().cloned());
        if let Some(pw) = &password {
            builder = builder.password(pw);
        }
        #[cfg(feature = "tls")]
        if let Some(ca) = &tls_ca {
            builder = builder.tls_ca(ca.clone());
        }
        let server = match builder.start() {
            Ok(server) => server,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => panic!(
                "{e}. The tests start their own Redis: run scripts/test.sh, which installs it \
                 (`apt-get update && apt-get install -y redis-server` as root)"
            ),
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {
                return Err(format!("Address already in use: {e}"))
            }
            Err(e) => return Err(e.to_string()),
        };
        Ok(RedisServer {
            server,
            port,
            dir,
            password,
            extra,
            tls_ca,
        })
    }

    /// `redis://127.0.0.1:<port>/`, with the password when there is one.
    pub fn url(&self) -> String {
        self.server.url()
    }

    /// The URL without credentials.
    pub fn bare_url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn pid(&self) -> u32 {
        self.server.pid()
    }

    /// A plain connection, or why there is none (a server that cannot be
    /// reached for a moment, while others fail over).
    #[allow(dead_code)]
    pub fn try_connection(&self) -> redis::RedisResult<redis::Connection> {
        #[cfg(feature = "tls")]
        let client = match &self.tls_ca {
            Some(ca) => redis::Client::build_with_tls(
                self.url(),
                redis::TlsCertificates {
                    client_tls: None,
                    root_cert: Some(ca.clone()),
                },
            )?,
            None => redis::Client::open(self.url())?,
        };
        #[cfg(not(feature = "tls"))]
        let client = redis::Client::open(self.url())?;
        let con = client.get_connection_with_timeout(Duration::from_secs(1))?;
        con.set_read_timeout(Some(Duration::from_secs(5)))?;
        Ok(con)
    }

    /// A plain connection, for inspecting what is in Redis.
    pub fn connection(&self) -> redis::Connection {
        self.try_connection()
            .unwrap_or_else(|e| panic!("cannot connect to test redis: {e}\n{}", self.log()))
    }

    /// `INFO commandstats` as `command -> calls`.
    pub fn command_calls(&self) -> HashMap<String, u64> {
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query(&mut self.connection())
            .unwrap();
        parse_command_calls(&info)
    }

    /// Clears the command statistics.
    pub fn reset_stats(&self) {
        redis::cmd("CONFIG")
            .arg("RESETSTAT")
            .query::<()>(&mut self.connection())
            .unwrap();
    }

    /// Closes every client connection but the one asking (`CLIENT KILL
    /// TYPE normal`), as a server's `timeout` or a restart closes idle
    /// ones, and gives the closes a moment to arrive over loopback
    /// (microseconds; 100 ms). Asserts that it closed some.
    pub fn kill_clients(&self) {
        let killed: i64 = redis::cmd("CLIENT")
            .arg(&["KILL", "TYPE", "normal"])
            .query(&mut self.connection())
            .unwrap();
        assert!(killed >= 1, "no client connection was killed");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }

    /// Sends a signal to the server (`STOP`, `CONT`, `KILL`).
    pub fn signal(&self, sig: &str) {
        signal_pid(self.pid(), sig);
    }

    /// Kills the server now and waits for it to exit.
    pub fn kill(&mut self) {
        self.server.kill();
    }

    /// The server's log, and what it wrote to stderr (a refused setting).
    pub fn log(&self) -> String {
        self.server.log()
    }

    /// How many clients listen on `channel` on this node: sharded
    /// (`PUBSUB SHARDNUMSUB`) or classic (`PUBSUB NUMSUB`) subscribers.
    /// `None` when the node does not answer.
    pub fn listeners(&self, channel: &str, sharded: bool) -> Option<i64> {
        let mut con = self.try_connection().ok()?;
        let sub = if sharded { "SHARDNUMSUB" } else { "NUMSUB" };
        let counts: Vec<(String, i64)> = redis::cmd("PUBSUB")
            .arg(sub)
            .arg(channel)
            .query(&mut con)
            .ok()?;
        counts.first().map(|(_, n)| *n)
    }
}

/// The server binary the tests start: `$LEASEHOLD_REDIS_SERVER`, or
/// `redis-server` on the PATH.
pub fn server_bin() -> String {
    std::env::var("LEASEHOLD_REDIS_SERVER").unwrap_or_else(|_| "redis-server".into())
}

/// The version of [`server_bin`] (`v=7.0.15` of its `--version`), read once.
/// Valkey says its own (8.1.8); it behaves as Redis 7.2 for all we use.
pub fn server_version() -> (u32, u32, u32) {
    static VERSION: OnceLock<(u32, u32, u32)> = OnceLock::new();
    *VERSION.get_or_init(|| {
        let bin = server_bin();
        let out = Command::new(&bin)
            .arg("--version")
            .output()
            .unwrap_or_else(|e| panic!("cannot run `{bin} --version`: {e}"));
        let text = String::from_utf8_lossy(&out.stdout);
        let v = text
            .split_whitespace()
            .find_map(|w| w.strip_prefix("v="))
            .unwrap_or_else(|| panic!("no version in `{bin} --version`: {text}"));
        let mut parts = v.split('.').map(|p| p.parse().unwrap_or(0));
        let mut next = || parts.next().unwrap_or(0);
        (next(), next(), next())
    })
}

/// Whether the servers have sharded pub/sub (`SPUBLISH`, `SSUBSCRIBE`:
/// Redis ≥ 7, Valkey); a cluster of older ones uses classic pub/sub.
pub fn sharded_pubsub() -> bool {
    server_version() >= (7, 0, 0)
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill(); // SIGKILL ends a SIGSTOPped server too
        if !self.dir.as_os_str().is_empty() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// A fresh directory name for one server's files (`spawn` creates it).
pub(super) fn server_dir(port: u16) -> PathBuf {
    std::env::temp_dir().join(format!(
        "leasehold-test-{}-{}-{}",
        std::process::id(),
        NEXT_DIR.fetch_add(1, Ordering::Relaxed),
        port
    ))
}

pub fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
    listener.local_addr().expect("local addr").port()
}

/// A number of `INFO <section>` (`connected_clients`,
/// `total_connections_received`, …) on `con`.
#[allow(dead_code)]
pub fn info_number(con: &mut redis::Connection, section: &str, field: &str) -> i64 {
    let info: String = redis::cmd("INFO").arg(section).query(con).unwrap();
    info.lines()
        .find_map(|l| {
            l.strip_prefix(field)?
                .strip_prefix(':')?
                .trim()
                .parse()
                .ok()
        })
        .unwrap_or_else(|| panic!("no {field} in INFO {section}"))
}

/// `cmdstat_evalsha:calls=3,usec=…` lines → `{"evalsha": 3}`.
pub fn parse_command_calls(info: &str) -> HashMap<String, u64> {
    info.lines()
        .filter_map(|line| {
            let rest = line.strip_prefix("cmdstat_")?;
            let (name, stats) = rest.split_once(':')?;
            let calls = stats
                .split(',')
                .find_map(|kv| kv.strip_prefix("calls="))?
                .parse()
                .ok()?;
            Some((name.to_owned(), calls))
        })
        .collect()
}

/// A user of `server` that may read keys but not run the lock commands
/// (`+get +ping` only); its URL.
#[allow(dead_code)]
pub fn user_without_lock_commands(server: &RedisServer) -> String {
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg("reader")
        .arg("on")
        .arg(">pw")
        .arg("~*")
        .arg("+get")
        .arg("+ping")
        .query(&mut server.connection())
        .unwrap();
    format!("redis://reader:pw@127.0.0.1:{}/", server.port())
}

/// How many leasehold clients listen for plain lock `key` (each waiting
/// client subscribes to its own grant channel `leasehold_grant:{<key>}:<id>`;
/// the unlock channel only while another library holds the lock).
#[allow(dead_code)]
pub fn listening_clients(server: &RedisServer, key: &str) -> usize {
    let mut con = server.connection();
    let channels: Vec<String> = redis::cmd("PUBSUB")
        .arg("CHANNELS")
        .arg(format!("leasehold_grant:{{{key}}}:*"))
        .query(&mut con)
        .unwrap();
    channels.len()
}

/// Sends `sig` to process `pid` with `kill` (a child process of its own:
/// milliseconds of fork and exec — an async test sends it from a blocking
/// task, never from its runtime's thread).
#[allow(dead_code)]
pub fn signal_pid(pid: u32, sig: &str) {
    let status = Command::new("kill")
        .args([&format!("-{sig}"), &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "kill -{sig} failed");
}
