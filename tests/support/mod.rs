//! Throwaway `redis-server`s for tests and benches.
//!
//! Each [`RedisServer`] is a real server on a free loopback port, with no
//! persistence (`--save "" --appendonly no`) and its log in a temp dir; it is
//! ready once it answers PING, and it is killed and reaped on drop. No test
//! uses a server it did not start.
#![allow(dead_code)]

pub mod proxy;
pub mod redisson;

use std::collections::HashMap;
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

static NEXT_DIR: AtomicU32 = AtomicU32::new(0);

/// A `redis-server` process owned by the test.
pub struct RedisServer {
    child: Child,
    port: u16,
    dir: PathBuf,
    password: Option<String>,
    extra: Vec<String>,
    /// The CA (here: the self-signed certificate) of a TLS-only server.
    tls_ca: Option<Vec<u8>>,
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
        Self::spawn(port, dir, extra, password.map(str::to_owned), None)
    }

    /// A server that speaks only TLS, with a self-signed certificate for
    /// 127.0.0.1 made now with the `openssl` command; [`Self::tls_ca`] is the
    /// certificate to trust.
    pub fn start_tls() -> Self {
        Self::start_tls_with(&[], None)
    }

    /// A TLS-only server (as [`Self::start_tls`]) with extra settings, and
    /// requiring `password` if given.
    pub fn start_tls_with(more: &[&str], password: Option<&str>) -> Self {
        let mut last_log = String::new();
        for _ in 0..5 {
            let port = free_port();
            let dir = server_dir(port);
            std::fs::create_dir_all(&dir).unwrap();
            let certs = TlsFiles::make(&dir);
            let mut extra = certs.server_args(port);
            extra.extend(more.iter().map(|s| s.to_string()));
            if let Some(pw) = password {
                extra.extend(["--requirepass".to_owned(), pw.to_owned()]);
            }
            let pw = password.map(str::to_owned);
            match Self::spawn(port, dir, extra, pw, Some(certs.ca.clone())) {
                Ok(server) => return server,
                Err(log) if log.contains("Address already in use") => last_log = log,
                Err(log) => panic!("redis-server (TLS) did not start; its log:\n{log}"),
            }
        }
        panic!("redis-server (TLS) found no free port after 5 tries; last log:\n{last_log}");
    }

    /// A TLS-only cluster node with `certs`, TLS on the cluster bus and to
    /// its primary too.
    fn start_tls_node(certs: &TlsFiles, more: &[&str]) -> Self {
        for _ in 0..5 {
            let port = free_port();
            let mut extra = certs.server_args(port);
            extra.extend(
                ["--tls-cluster", "yes", "--tls-replication", "yes"]
                    .iter()
                    .chain(more)
                    .map(|s| s.to_string()),
            );
            match Self::spawn(port, server_dir(port), extra, None, Some(certs.ca.clone())) {
                Ok(server) => return server,
                Err(log) if log.contains("Address already in use") => continue,
                Err(log) => panic!("redis-server (TLS cluster node) did not start:\n{log}"),
            }
        }
        panic!("redis-server (TLS cluster node) found no free port after 5 tries");
    }

    /// A one-node Redis Cluster serving every slot: `CLUSTER KEYSLOT` works,
    /// and a script whose keys span two slots fails with CROSSSLOT.
    pub fn start_cluster_node() -> Self {
        let server = Self::start_with(&["--cluster-enabled", "yes"], None);
        let mut con = server.connection();
        redis::cmd("CLUSTER")
            .arg("ADDSLOTSRANGE")
            .arg(0)
            .arg(16383)
            .query::<()>(&mut con)
            .unwrap();
        assert!(
            eventually(Duration::from_secs(10), || {
                let info: String = redis::cmd("CLUSTER").arg("INFO").query(&mut con).unwrap();
                info.contains("cluster_state:ok")
            }),
            "the one-node cluster did not come up"
        );
        server
    }

    /// A replica of `primary`, started the same way, returned once its link
    /// to the primary is up and the initial sync is done.
    /// A primary with a password has a replica with the same one (and
    /// `masterauth` to sync).
    pub fn start_replica_of(primary: &RedisServer) -> Self {
        let port = primary.port().to_string();
        let mut args = vec!["--replicaof", "127.0.0.1", &port];
        let pw = primary.password.as_deref();
        if let Some(pw) = pw {
            args.extend(["--masterauth", pw, "--requirepass", pw]);
        }
        let replica = Self::start_with(&args, pw);
        let mut con = replica.connection();
        assert!(
            eventually(Duration::from_secs(20), || {
                let info: String = redis::cmd("INFO")
                    .arg("replication")
                    .query(&mut con)
                    .unwrap();
                info.contains("master_link_status:up")
            }),
            "the replica did not sync; its log:\n{}",
            replica.log()
        );
        replica
    }

    /// A Redis Sentinel (`redis-server <conf> --sentinel`) watching
    /// `primary` under `master`, with a config file of its own (Sentinel
    /// rewrites it) and quick failure detection.
    pub fn start_sentinel(primary: &RedisServer, master: &str) -> Self {
        Self::start_sentinel_with_password(primary, master, None)
    }

    /// A Sentinel as [`Self::start_sentinel`]; with `password`, it requires
    /// it (`requirepass`) and uses it with the other Sentinels. It uses the
    /// primary's password, if any, to watch it.
    pub fn start_sentinel_with_password(
        primary: &RedisServer,
        master: &str,
        password: Option<&str>,
    ) -> Self {
        let mut auth = String::new();
        if let Some(pw) = &primary.password {
            auth += &format!("sentinel auth-pass {master} {pw}\n");
        }
        if let Some(pw) = password {
            auth += &format!("requirepass {pw}\nsentinel sentinel-pass {pw}\n");
        }
        // A TLS-only primary gets a TLS-only Sentinel, with the primary's
        // certificates (made by `start_tls*` in its directory).
        let tls = primary
            .tls_ca
            .is_some()
            .then(|| TlsFiles::in_dir(&primary.dir));
        for _ in 0..5 {
            let port = free_port();
            let dir = server_dir(port);
            std::fs::create_dir_all(&dir).unwrap();
            let conf = dir.join("sentinel.conf");
            let listen = match &tls {
                None => format!("port {port}\n"),
                Some(t) => {
                    let lines: String = t
                        .server_args(port)
                        .chunks(2)
                        .map(|kv| format!("{} {}\n", kv[0].trim_start_matches("--"), kv[1]))
                        .collect();
                    lines + "tls-replication yes\n"
                }
            };
            std::fs::write(
                &conf,
                format!(
                    "{listen}bind 127.0.0.1\ndir {dir}\nlogfile {dir}/redis.log\n\
                     sentinel monitor {master} 127.0.0.1 {primary} 2\n\
                     sentinel down-after-milliseconds {master} 1000\n\
                     sentinel failover-timeout {master} 10000\n{auth}",
                    dir = dir.display(),
                    primary = primary.port(),
                ),
            )
            .unwrap();
            let bin =
                std::env::var("LEASEHOLD_REDIS_SERVER").unwrap_or_else(|_| "redis-server".into());
            let child = Command::new(&bin)
                .arg(&conf)
                .arg("--sentinel")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap_or_else(|e| panic!("cannot start `{bin} --sentinel`: {e}"));
            let mut sentinel = RedisServer {
                child,
                port,
                dir,
                password: password.map(str::to_owned),
                extra: Vec::new(),
                tls_ca: tls.as_ref().map(|t| t.ca.clone()),
            };
            let up = eventually(Duration::from_secs(10), || {
                sentinel
                    .try_connection()
                    .and_then(|mut c| redis::cmd("PING").query::<String>(&mut c))
                    .is_ok()
            });
            if up {
                return sentinel;
            }
            if !sentinel.log().contains("Address already in use") {
                panic!("redis sentinel did not start; its log:\n{}", sentinel.log());
            }
            sentinel.kill();
        }
        panic!("redis sentinel found no free port after 5 tries");
    }

    /// `CLUSTER KEYSLOT key` on a [`Self::start_cluster_node`] server.
    pub fn keyslot(&self, key: &str) -> i64 {
        redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(key)
            .query(&mut self.connection())
            .unwrap()
    }

    /// The certificate a client must trust to talk to [`Self::start_tls`].
    pub fn tls_ca(&self) -> Option<&[u8]> {
        self.tls_ca.as_deref()
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

    fn spawn(
        port: u16,
        dir: PathBuf,
        extra: Vec<String>,
        password: Option<String>,
        tls_ca: Option<Vec<u8>>,
    ) -> Result<Self, String> {
        std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {dir:?}: {e}"))?;
        let log = dir.join("redis.log");
        let bin = std::env::var("LEASEHOLD_REDIS_SERVER").unwrap_or_else(|_| "redis-server".into());
        let child = Command::new(&bin)
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(&dir)
            .arg("--logfile")
            .arg(&log)
            .args(&extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn();
        let child = match child {
            Ok(c) => c,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => panic!(
                "`{bin}` was not found: the tests start their own Redis. Install it with \
                 `apt-get update && apt-get install -y redis-server` (as root), or run \
                 scripts/test.sh, which does that for you"
            ),
            Err(e) => panic!("cannot start `{bin}`: {e}"),
        };
        let mut server = RedisServer {
            child,
            port,
            dir,
            password,
            extra,
            tls_ca,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(Some(_)) = server.child.try_wait() {
                return Err(server.log());
            }
            if let Ok(mut con) = server.try_connection() {
                if redis::cmd("PING").query::<String>(&mut con).is_ok() {
                    return Ok(server);
                }
            }
            if Instant::now() > deadline {
                let log = server.log();
                panic!(
                    "redis-server on port {port} did not answer PING within 10 s; its log:\n{log}"
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// `redis://127.0.0.1:<port>/`, with the password when there is one.
    pub fn url(&self) -> String {
        let scheme = if self.tls_ca.is_some() {
            "rediss"
        } else {
            "redis"
        };
        match &self.password {
            Some(p) => format!("{scheme}://:{p}@127.0.0.1:{}/", self.port),
            None => format!("{scheme}://127.0.0.1:{}/", self.port),
        }
    }

    /// The URL without credentials.
    pub fn bare_url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    fn try_connection(&self) -> redis::RedisResult<redis::Connection> {
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

    /// Sends a signal to the server (`STOP`, `CONT`, `KILL`).
    pub fn signal(&self, sig: &str) {
        let status = Command::new("kill")
            .args([&format!("-{sig}"), &self.pid().to_string()])
            .status()
            .unwrap();
        assert!(status.success(), "kill -{sig} failed");
    }

    /// Kills the server now and waits for it to exit.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("redis.log")).unwrap_or_default()
    }
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
/// A throwaway CA and a server certificate for 127.0.0.1 it signs, made
/// with the `openssl` command in `dir`.
pub struct TlsFiles {
    cert: PathBuf,
    key: PathBuf,
    ca_cert: PathBuf,
    /// The CA certificate (PEM): what a client must trust.
    pub ca: Vec<u8>,
}

impl TlsFiles {
    pub fn make(dir: &std::path::Path) -> TlsFiles {
        std::fs::create_dir_all(dir).unwrap();
        let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
        let (ca_cert, ca_key) = (dir.join("ca.pem"), dir.join("ca.key"));
        let (csr, ext) = (dir.join("server.csr"), dir.join("server.ext"));
        std::fs::write(
            &ext,
            "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n\
             keyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth,clientAuth\n",
        )
        .unwrap();
        let p = |p: &PathBuf| p.to_string_lossy().into_owned();
        for args in [
            vec![
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-days",
                "1",
                "-subj",
                "/CN=leasehold test CA",
                "-keyout",
                &p(&ca_key),
                "-out",
                &p(&ca_cert),
            ],
            vec![
                "req",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-subj",
                "/CN=127.0.0.1",
                "-keyout",
                &p(&key),
                "-out",
                &p(&csr),
            ],
            vec![
                "x509",
                "-req",
                "-in",
                &p(&csr),
                "-CA",
                &p(&ca_cert),
                "-CAkey",
                &p(&ca_key),
                "-CAcreateserial",
                "-days",
                "1",
                "-extfile",
                &p(&ext),
                "-out",
                &p(&cert),
            ],
        ] {
            let made = Command::new("openssl")
                .args(&args)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .unwrap_or_else(|e| {
                    panic!(
                        "the TLS tests make certificates with `openssl`, which could not run \
                         ({e}); install it with `apt-get install -y openssl`"
                    )
                });
            assert!(made.success(), "openssl {args:?} failed");
        }
        let ca = std::fs::read(&ca_cert).unwrap();
        TlsFiles {
            cert,
            key,
            ca_cert,
            ca,
        }
    }

    /// The files [`Self::make`] made in `dir` before.
    pub fn in_dir(dir: &std::path::Path) -> TlsFiles {
        let ca_cert = dir.join("ca.pem");
        TlsFiles {
            cert: dir.join("cert.pem"),
            key: dir.join("key.pem"),
            ca: std::fs::read(&ca_cert).expect("the server's TLS files"),
            ca_cert,
        }
    }

    /// The settings of a TLS-only server on `port` with these files.
    pub fn server_args(&self, port: u16) -> Vec<String> {
        let p = |p: &PathBuf| p.to_string_lossy().into_owned();
        [
            "--port",
            "0",
            "--tls-port",
            &port.to_string(),
            "--tls-cert-file",
            &p(&self.cert),
            "--tls-key-file",
            &p(&self.key),
            "--tls-ca-cert-file",
            &p(&self.ca_cert),
            "--tls-auth-clients",
            "no",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    }

    /// The CA file, for `redis-cli --tls --cacert`.
    pub fn ca_file(&self) -> &std::path::Path {
        &self.ca_cert
    }
}

fn server_dir(port: u16) -> PathBuf {
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

/// A `MONITOR` connection: records every command clients send, telling
/// commands run inside scripts (`[0 lua]`) apart from real round trips.
pub struct Monitor {
    con: redis::Connection,
    url: String,
}

impl Monitor {
    pub fn start(server: &RedisServer) -> Self {
        let mut con = server.connection();
        con.send_packed_command(&redis::cmd("MONITOR").get_packed_command())
            .unwrap();
        let ok = con.recv_response().unwrap();
        assert_eq!(ok, redis::Value::Okay, "MONITOR answered {ok:?}");
        Monitor {
            con,
            url: server.url(),
        }
    }

    /// Stops recording and returns the commands clients sent (not those run
    /// by scripts), lowercased command names first, e.g. `"evalsha"`.
    pub fn client_commands(self) -> Vec<String> {
        self.client_commands_except("")
    }

    /// As [`client_commands`](Self::client_commands), leaving out the
    /// commands whose line contains `skip` (e.g. `"leasehold_client:"`: the
    /// renewal thread's writes of a client's registration, every 2 s, off
    /// the lock path). An empty `skip` leaves nothing out.
    pub fn client_commands_except(mut self, skip: &str) -> Vec<String> {
        let marker = format!("monitor-end-{}", std::process::id());
        let mut other = redis::Client::open(self.url.as_str())
            .unwrap()
            .get_connection()
            .unwrap();
        redis::cmd("ECHO")
            .arg(&marker)
            .query::<String>(&mut other)
            .unwrap();
        let mut out = Vec::new();
        loop {
            let line = match self.con.recv_response().unwrap() {
                redis::Value::SimpleString(s) => s,
                redis::Value::Okay => continue,
                other => panic!("unexpected MONITOR line {other:?}"),
            };
            if line.contains(&marker) {
                return out;
            }
            if line.contains("[0 lua]")
                || line.contains(" lua]")
                || (!skip.is_empty() && line.contains(skip))
            {
                continue;
            }
            // `<time> [<db> <addr>] "cmd" "arg" …`
            if let Some(rest) = line.split_once("] \"").map(|(_, r)| r) {
                let cmd = rest.split('"').next().unwrap_or("").to_lowercase();
                out.push(cmd);
            }
        }
    }
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

/// Polls `cond` until it holds or `within` passes; returns whether it held.
pub fn eventually(within: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A Redis Cluster of throwaway servers on loopback, made with
/// `redis-cli --cluster create`; every node is killed on drop.
pub struct RedisCluster {
    pub nodes: Vec<RedisServer>,
}

impl RedisCluster {
    /// `primaries` primaries (at least 3) with `replicas` replicas each,
    /// returned once every node reports `cluster_state:ok` and all slots are
    /// served. Nodes time out after 1 s, so a failover takes seconds.
    pub fn start(primaries: usize, replicas: usize) -> RedisCluster {
        Self::start_nodes(primaries, replicas, false)
    }

    /// A cluster as [`Self::start`] whose nodes speak only TLS, to clients
    /// and to each other (`tls-cluster yes`, `tls-replication yes`), with
    /// one throwaway CA made now ([`RedisServer::tls_ca`] of any node).
    pub fn start_tls(primaries: usize, replicas: usize) -> RedisCluster {
        Self::start_nodes(primaries, replicas, true)
    }

    fn start_nodes(primaries: usize, replicas: usize, tls: bool) -> RedisCluster {
        let cluster = ["--cluster-enabled", "yes", "--cluster-node-timeout", "1000"];
        let tls_dir = server_dir(free_port()).join("cluster-tls");
        let certs = tls.then(|| TlsFiles::make(&tls_dir));
        let nodes: Vec<RedisServer> = (0..primaries * (1 + replicas))
            .map(|_| match &certs {
                None => RedisServer::start_with(&cluster, None),
                Some(certs) => RedisServer::start_tls_node(certs, &cluster),
            })
            .collect();
        let mut create = Command::new("redis-cli");
        if let Some(certs) = &certs {
            create.arg("--tls").arg("--cacert").arg(certs.ca_file());
        }
        create.arg("--cluster").arg("create");
        for n in &nodes {
            create.arg(format!("127.0.0.1:{}", n.port()));
        }
        let out = create
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .output()
            .expect("run redis-cli --cluster create (install redis-tools / redis-server)");
        assert!(
            out.status.success(),
            "redis-cli --cluster create failed:\n{}",
            String::from_utf8_lossy(&out.stdout)
        );
        let cluster = RedisCluster { nodes };
        cluster.wait_ok();
        // Replicas must have synced, or a WAIT right away counts none.
        let replicas_up = eventually(Duration::from_secs(30), || {
            cluster
                .nodes
                .iter()
                .filter(|n| {
                    let info: String = redis::cmd("INFO")
                        .arg("replication")
                        .query(&mut n.connection())
                        .unwrap_or_default();
                    info.contains("role:slave") && info.contains("master_link_status:up")
                })
                .count()
                == primaries * replicas
        });
        assert!(replicas_up, "the cluster's replicas did not sync");
        cluster
    }

    /// Waits until every live node says `cluster_state:ok` with all slots.
    pub fn wait_ok(&self) {
        for n in &self.nodes {
            let ok = eventually(Duration::from_secs(30), || {
                let Ok(mut con) = n.try_connection() else {
                    return false;
                };
                let info: String = redis::cmd("CLUSTER")
                    .arg("INFO")
                    .query(&mut con)
                    .unwrap_or_default();
                info.contains("cluster_state:ok") && info.contains("cluster_slots_ok:16384")
            });
            assert!(
                ok,
                "cluster node {} did not come up; log:\n{}",
                n.port(),
                n.log()
            );
        }
    }

    /// The seed URLs of every node.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(|n| n.url()).collect()
    }

    /// `CLUSTER KEYSLOT key`.
    pub fn keyslot(&self, key: &str) -> u16 {
        redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(key)
            .query(&mut self.nodes[0].connection())
            .unwrap()
    }

    /// `CLUSTER SLOTS` as asked of `nodes[ask]`: (first, last, node index).
    pub fn slot_ranges(&self, ask: usize) -> Vec<(u16, u16, usize)> {
        let ranges: Vec<redis::Value> = redis::cmd("CLUSTER")
            .arg("SLOTS")
            .query(&mut self.nodes[ask].connection())
            .unwrap();
        let mut out = Vec::new();
        for range in ranges {
            let redis::Value::Array(parts) = range else {
                continue;
            };
            let (
                Some(redis::Value::Int(a)),
                Some(redis::Value::Int(b)),
                Some(redis::Value::Array(p)),
            ) = (parts.first(), parts.get(1), parts.get(2))
            else {
                continue;
            };
            let Some(redis::Value::Int(port)) = p.get(1) else {
                continue;
            };
            if let Some(i) = self.nodes.iter().position(|n| i64::from(n.port()) == *port) {
                out.push((*a as u16, *b as u16, i));
            }
        }
        out
    }

    /// The index (in `nodes`) of the primary serving `slot`, asked of
    /// `nodes[ask]`.
    pub fn primary_of_slot(&self, slot: u16, ask: usize) -> usize {
        self.slot_ranges(ask)
            .into_iter()
            .find(|(a, b, _)| (*a..=*b).contains(&slot))
            .map(|(_, _, i)| i)
            .unwrap_or_else(|| panic!("no node serves slot {slot}"))
    }

    /// The indexes of the nodes that serve slots (the primaries).
    pub fn primaries(&self) -> Vec<usize> {
        let mut p: Vec<usize> = self.slot_ranges(0).into_iter().map(|(_, _, i)| i).collect();
        p.sort();
        p.dedup();
        p
    }

    /// The lowest slot `nodes[i]` serves.
    pub fn first_slot_of(&self, i: usize) -> u16 {
        self.slot_ranges(i)
            .into_iter()
            .filter(|(_, _, n)| *n == i)
            .map(|(a, _, _)| a)
            .min()
            .expect("the node serves a slot")
    }

    /// The node id of `nodes[i]`.
    pub fn node_id(&self, i: usize) -> String {
        redis::cmd("CLUSTER")
            .arg("MYID")
            .query(&mut self.nodes[i].connection())
            .unwrap()
    }
}

/// Replays the enter/exit records of every name: no critical section may
/// start while another is open, except after one of the `killed` process's
/// sections that never finished. Returns (finished, unfinished) sections and
/// checks each counter against them.
pub fn check_history(
    con: &mut redis::Connection,
    names: &[&str],
    killed: Option<&str>,
) -> (u64, u64) {
    let (mut finished, mut unfinished) = (0, 0);
    for name in names {
        let events: Vec<String> =
            redis::Commands::lrange(con, format!("events:{name}"), 0, -1).unwrap();
        let (mut done_here, mut open_here) = (0u64, 0u64);
        let mut inside: Option<String> = None;
        for ev in &events {
            let (kind, id) = ev.split_once(' ').unwrap();
            match kind {
                "E" => {
                    if let Some(prev) = inside.take() {
                        let from_killed =
                            killed.is_some_and(|k| prev.starts_with(&format!("{k}.")));
                        assert!(from_killed, "{name}: {id} entered while {prev} was inside");
                        open_here += 1;
                    }
                    inside = Some(id.to_owned());
                }
                "X" => {
                    assert_eq!(
                        inside.as_deref(),
                        Some(id),
                        "{name}: exit of {id} out of turn"
                    );
                    inside = None;
                    done_here += 1;
                }
                _ => panic!("bad record {ev:?}"),
            }
        }
        if let Some(prev) = inside {
            assert!(
                killed.is_some_and(|k| prev.starts_with(&format!("{k}."))),
                "{name}: {prev} never left"
            );
            open_here += 1;
        }
        let count: u64 = redis::Commands::get(con, format!("count:{name}")).unwrap_or(0);
        assert!(
            count >= done_here && count <= done_here + open_here,
            "{name}: counter {count} for {done_here} finished and {open_here} unfinished sections"
        );
        finished += done_here;
        unfinished += open_here;
    }
    (finished, unfinished)
}

/// The environment variable that carries a test child's arguments.
pub const CHILD_ENV: &str = "LEASEHOLD_TEST_CHILD";

/// A command that runs this test binary as a test child (`tests/child/holder.rs`,
/// mounted as `mod child` in the test files that use it) with `args`.
pub fn child_command(args: &[&str]) -> Command {
    let exe = std::env::current_exe().expect("the path of this test binary");
    let mut cmd = Command::new(exe);
    cmd.args([
        "child::child_process_entry",
        "--exact",
        "--nocapture",
        "--test-threads=1",
        "-q",
    ])
    .env(CHILD_ENV, args.join("\u{1f}"));
    cmd
}

/// Whether a line is the test harness's own (a child prints below it).
pub fn harness_line(line: &str) -> bool {
    let line = line.trim();
    line.is_empty() || line.starts_with("running ")
}

/// The `<n>` of the `done <n>` line a finished checker child printed.
pub fn child_done(out: &std::process::Output) -> u64 {
    assert!(out.status.success(), "a child process failed: {out:?}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.trim().strip_prefix("done ")?.parse().ok())
        .unwrap_or_else(|| panic!("no `done <n>` line: {out:?}"))
}

/// A test child process driven line by line over stdin/stdout; killed and
/// reaped on drop.
pub struct ChildProcess {
    child: Child,
    stdin: std::process::ChildStdin,
    stdout: std::io::BufReader<std::process::ChildStdout>,
}

impl ChildProcess {
    /// Starts a test child with `args` (see [`child_command`]).
    pub fn start(args: &[&str]) -> ChildProcess {
        let mut child = child_command(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("start a test child {args:?}: {e}"));
        let stdin = child.stdin.take().unwrap();
        let stdout = std::io::BufReader::new(child.stdout.take().unwrap());
        ChildProcess {
            child,
            stdin,
            stdout,
        }
    }

    /// The next line it prints, trimmed (the harness's lines skipped).
    pub fn line(&mut self) -> String {
        loop {
            let mut line = String::new();
            let n = std::io::BufRead::read_line(&mut self.stdout, &mut line).unwrap();
            if n == 0 || !harness_line(&line) {
                return line.trim().to_owned();
            }
        }
    }

    /// Sends one command line and returns the answer line.
    pub fn ask(&mut self, command: &str) -> String {
        use std::io::Write;
        writeln!(self.stdin, "{command}").unwrap();
        self.stdin.flush().unwrap();
        self.line()
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends a signal (`STOP`, `CONT`, `KILL`).
    pub fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .args([&format!("-{sig}"), &self.child.id().to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill -{sig}");
    }

    /// Kills it now and waits for it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for ChildProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The cluster slot of `key` (CRC16 of it, or of its hash tag, mod 16384),
/// computed here as the server does, so a test can find a name for a slot
/// without asking the server once per candidate.
pub fn key_slot(key: &str) -> u16 {
    let key = key.as_bytes();
    let tagged = key.iter().position(|&b| b == b'{').and_then(|open| {
        let rest = &key[open + 1..];
        match rest.iter().position(|&b| b == b'}') {
            Some(len) if len > 0 => Some(&rest[..len]),
            _ => None,
        }
    });
    let mut crc: u16 = 0;
    for &byte in tagged.unwrap_or(key) {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc % 16384
}

/// A name `<prefix><n>` whose key lands in `slot` (checked against the
/// cluster once).
pub fn name_in_slot(cluster: &RedisCluster, slot: u16, prefix: &str) -> String {
    let name = (0..10_000_000u32)
        .map(|i| format!("{prefix}{i}"))
        .find(|n| key_slot(n) == slot)
        .expect("a name for the slot");
    assert_eq!(cluster.keyslot(&name), slot, "local slot of {name}");
    name
}
