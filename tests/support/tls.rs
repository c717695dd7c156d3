//! TLS-only servers: a throwaway CA and certificates made with the
//! `openssl` command, and servers (and cluster nodes) that speak only TLS.

use std::path::PathBuf;
use std::process::{Command, Stdio};

use super::server::{free_port, server_dir, RedisServer};

impl RedisServer {
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
            match Self::spawn(port, dir.clone(), extra, pw, Some(certs.ca.clone())) {
                Ok(server) => return server,
                Err(log) if log.contains("Address already in use") => {
                    let _ = std::fs::remove_dir_all(&dir);
                    last_log = log
                }
                Err(log) => panic!("redis-server (TLS) did not start; its log:\n{log}"),
            }
        }
        panic!("redis-server (TLS) found no free port after 5 tries; last log:\n{last_log}");
    }

    /// A TLS-only cluster node with `certs`, TLS on the cluster bus and to
    /// its primary too.
    pub(super) fn start_tls_node(certs: &TlsFiles, more: &[&str]) -> Self {
        for _ in 0..5 {
            let port = free_port();
            let mut extra = certs.server_args(port);
            extra.extend(
                ["--tls-cluster", "yes", "--tls-replication", "yes"]
                    .iter()
                    .chain(more)
                    .map(|s| s.to_string()),
            );
            let dir = server_dir(port);
            match Self::spawn(port, dir.clone(), extra, None, Some(certs.ca.clone())) {
                Ok(server) => return server,
                Err(log) if log.contains("Address already in use") => {
                    let _ = std::fs::remove_dir_all(&dir);
                    continue;
                }
                Err(log) => panic!("redis-server (TLS cluster node) did not start:\n{log}"),
            }
        }
        panic!("redis-server (TLS cluster node) found no free port after 5 tries");
    }

    /// The certificate a client must trust to talk to [`Self::start_tls`].
    pub fn tls_ca(&self) -> Option<&[u8]> {
        self.tls_ca.as_deref()
    }
}

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
