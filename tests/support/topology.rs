//! Servers that work together: a one-node cluster, a replica, Sentinels,
//! and a Redis Cluster made with `redis-cli --cluster create`; cluster
//! slots computed as the server does.

use std::process::{Command, Stdio};
use std::time::Duration;

use super::eventually;
use super::server::{free_port, server_bin, server_dir, RedisServer};
use super::tls::TlsFiles;
use leasehold::testing::TestServer;

impl RedisServer {
    /// A one-node Redis Cluster serving every slot: `CLUSTER KEYSLOT` works,
    /// and a script whose keys span two slots fails with CROSSSLOT.
    pub fn start_cluster_node() -> Self {
        let server = Self::start_with(&["--cluster-enabled", "yes"], None);
        let mut con = server.connection();
        // ADDSLOTS, not ADDSLOTSRANGE (Redis ≥ 7): every server takes it.
        redis::cmd("CLUSTER")
            .arg("ADDSLOTS")
            .arg((0..16384).collect::<Vec<u16>>())
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
            let mut builder = TestServer::builder()
                .port(port)
                .dir(&dir)
                .binary(server_bin())
                .config_file(&conf)
                .arg("--sentinel");
            if let Some(t) = &tls {
                builder = builder.args(t.server_args(port));
                #[cfg(feature = "tls")]
                {
                    builder = builder.tls_ca(t.ca.clone());
                }
            }
            if let Some(pw) = password {
                builder = builder.password(pw);
            }
            match builder.start() {
                Ok(server) => {
                    return RedisServer {
                        server,
                        port,
                        dir,
                        password: password.map(str::to_owned),
                        extra: Vec::new(),
                        tls_ca: tls.as_ref().map(|t| t.ca.clone()),
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {
                    let _ = std::fs::remove_dir_all(&dir);
                    continue;
                }
                Err(e) => panic!("redis sentinel did not start: {e}"),
            }
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

    /// How many clients listen on `channel` in the whole cluster: sharded
    /// subscribers (on the node of the channel's slot) or classic ones (on
    /// any node). Nodes that do not answer (killed) count none.
    pub fn listeners(&self, channel: &str, sharded: bool) -> i64 {
        self.nodes
            .iter()
            .filter_map(|n| n.listeners(channel, sharded))
            .sum()
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
