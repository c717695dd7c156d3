//! Redis Cluster: the slot table (`CLUSTER SLOTS`) that sends every lock
//! command to the primary serving its key's slot — all keys and channels of
//! one lock share it (the hash tags `{<key>}` of Redisson's layout), so
//! every script runs on one node — and the pub/sub the cluster's locks use.
//! `MOVED` updates the table; a connection error has it read again, so after
//! a failover commands go to the promoted replica (the redirects themselves
//! are followed by `Connections::run` and `Batches`).
//!
//! Our own routing, not the `redis` crate's cluster connection: the renewal
//! thread sends one pipeline per node that starts with `SCRIPT LOAD` and
//! holds `EVALSHA`s — neither of which a cluster pipeline can carry — and it
//! must see `MOVED` per renewal to keep a lease through a reshard.

use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Mutex, RwLock};
use redis::{ConnectionAddr, ConnectionInfo, RedisResult, Value};

use super::stream::TlsConfig;
use super::wire::Wire;
use crate::error::Retry;
use crate::options::ShardedPubSub;
use crate::protocol::PubSub;

/// Slots in a Redis Cluster.
const SLOTS: usize = 16384;

/// The slot of `key`: CRC16 (XMODEM) of the key, or of its hash tag — the
/// part between the first `{` and the next `}`, when not empty — mod 16384,
/// as the server computes it.
pub(crate) fn key_slot(key: &[u8]) -> u16 {
    let tagged = key.iter().position(|&b| b == b'{').and_then(|open| {
        let rest = &key[open + 1..];
        match rest.iter().position(|&b| b == b'}') {
            Some(len) if len > 0 => Some(&rest[..len]),
            _ => None,
        }
    });
    crc16(tagged.unwrap_or(key)) % SLOTS as u16
}

fn crc16(data: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in data {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// Where a cluster's slots are, and how to reach its nodes.
pub(crate) struct Router {
    /// The seed nodes' connection settings (auth, TCP, TLS or not); a
    /// node's info is a seed's with the node's address.
    seeds: Vec<ConnectionInfo>,
    /// TLS for every node when the seeds are `rediss://`.
    tls: TlsConfig,
    connect_timeout: Duration,
    socket_timeout: Duration,
    /// Slot → `host:port` of the primary serving it.
    table: RwLock<Vec<Option<Arc<str>>>>,
    /// When the table was last read successfully (held while reading).
    last_refresh: Mutex<Option<Instant>>,
    /// Rotates the node the subscriber tries first.
    next_node: AtomicUsize,
    /// The pub/sub in use: [`UNKNOWN`] (or [`WANTED`]) until the first
    /// table read probes the cluster, then [`CLASSIC`] or [`SHARDED`] for
    /// good (as Redisson decides once).
    pubsub: AtomicU8,
}

/// [`ShardedPubSub::Auto`], not probed yet.
const UNKNOWN: u8 = 0;
const CLASSIC: u8 = 1;
const SHARDED: u8 = 2;
/// [`ShardedPubSub::On`], not probed yet: sharded unless the cluster has
/// none (Redis < 7), which is classic with a warning.
const WANTED: u8 = 3;

/// Whether the refusal `e` of `PUBSUB SHARDNUMSUB` comes from a server
/// that knows the subcommand: an ACL refusal naming it (Redis 7 and Valkey
/// say `… the 'pubsub|shardnumsub' command`; Redis 6.2 refuses the unknown
/// subcommand, `ERR Unknown subcommand`, or, to an ACL user, `… the 'pubsub'
/// command or its subcommand`).
fn knows_shardnumsub(e: &redis::RedisError) -> bool {
    e.code() == Some("NOPERM") && e.to_string().to_ascii_lowercase().contains("shardnumsub")
}

/// A table refresh at most this often (a burst of errors refreshes once).
const REFRESH_EVERY: Duration = Duration::from_millis(100);

impl Router {
    pub(crate) fn new(
        seeds: Vec<ConnectionInfo>,
        connect_timeout: Duration,
        socket_timeout: Duration,
        pubsub: ShardedPubSub,
        tls: TlsConfig,
    ) -> Self {
        Router {
            seeds,
            tls,
            connect_timeout,
            socket_timeout,
            table: RwLock::new(vec![None; SLOTS]),
            last_refresh: Mutex::new(None),
            next_node: AtomicUsize::new(0),
            pubsub: AtomicU8::new(match pubsub {
                ShardedPubSub::Auto => UNKNOWN,
                ShardedPubSub::On => WANTED,
                ShardedPubSub::Off => CLASSIC,
            }),
        }
    }

    /// The TLS configuration every node is reached with (`None`: plain TCP).
    pub(crate) fn tls(&self) -> &TlsConfig {
        &self.tls
    }

    /// The pub/sub the cluster's locks use. Decided by the first table read
    /// (every command routes first); classic until then.
    pub(crate) fn pubsub(&self) -> PubSub {
        match self.pubsub.load(Ordering::Relaxed) {
            SHARDED => PubSub::Sharded,
            _ => PubSub::Classic,
        }
    }

    /// The primary serving `key`'s slot as last read (no round trip).
    pub(crate) fn known_node(&self, key: &str) -> Option<Arc<str>> {
        self.table.read()[usize::from(key_slot(key.as_bytes()))].clone()
    }

    /// Whether the table (as last read) has `node` serve any slot.
    pub(crate) fn serves(&self, node: &str) -> bool {
        self.table.read().iter().any(|n| n.as_deref() == Some(node))
    }

    /// Forgets which node serves `key`'s slot (it left the node we knew):
    /// the next command that needs it reads the table again.
    pub(crate) fn forget_slot_of(&self, key: &str) {
        let slot = usize::from(key_slot(key.as_bytes()));
        self.table.write()[slot] = None;
    }

    /// The slot `slot` is served by `addr` now (a `MOVED` seen where no
    /// command can be retried, e.g. on the subscriber): noted without asking
    /// the cluster; the next command routed through the slot corrects it.
    pub(crate) fn note_moved(&self, slot: u16, addr: &str) {
        if let Some(entry) = self.table.write().get_mut(usize::from(slot)) {
            *entry = Some(Arc::from(addr));
        }
    }

    /// The primary serving `key`'s slot (`host:port`), reading the slot
    /// table from the cluster when it does not know.
    pub(crate) fn node_for(&self, key: &str) -> RedisResult<Arc<str>> {
        self.node_for_by(key, None)
    }

    /// [`node_for`](Self::node_for) for a call that must end by `end` (the
    /// read of the table bounded as [`refresh_by`](Self::refresh_by)'s).
    pub(crate) fn node_for_by(&self, key: &str, end: Option<Instant>) -> RedisResult<Arc<str>> {
        let slot = usize::from(key_slot(key.as_bytes()));
        if let Some(node) = &self.table.read()[slot] {
            return Ok(Arc::clone(node));
        }
        self.refresh_by(end)?;
        self.table.read()[slot].clone().ok_or_else(|| {
            no_node(format!(
                "no cluster node serves slot {slot} (cluster down?)"
            ))
        })
    }

    /// Every primary of the table as last read, once each, in slot order.
    fn known_primaries(&self) -> Vec<Arc<str>> {
        let mut nodes: Vec<Arc<str>> = Vec::new();
        for node in self.table.read().iter().flatten() {
            if !nodes.iter().any(|n| n == node) {
                nodes.push(Arc::clone(node));
            }
        }
        nodes
    }

    /// Every primary serving slots, from a fresh read of the table (unless
    /// one was made in the last [`REFRESH_EVERY`]).
    pub(crate) fn primaries(&self) -> RedisResult<Vec<Arc<str>>> {
        self.refresh()?;
        let nodes = self.known_primaries();
        if nodes.is_empty() {
            return Err(no_node(
                "no cluster node serves any slot (cluster down?)".to_owned(),
            ));
        }
        Ok(nodes)
    }

    /// `MOVED slot host:port`: the slot is served there now — and the
    /// table read again, for a call that must end by `end` (bounded as
    /// [`refresh_by`](Self::refresh_by)'s).
    pub(crate) fn moved_by(&self, slot: u16, addr: &str, end: Option<Instant>) {
        self.note_moved(slot, addr);
        // Other slots probably moved with it (a reshard, a failover).
        let _ = self.refresh_by(end);
    }

    /// Reads the slot table (`CLUSTER SLOTS`) from the first node that
    /// answers (see [`candidates`](Self::candidates)), at most once per
    /// [`REFRESH_EVERY`].
    pub(crate) fn refresh(&self) -> RedisResult<()> {
        self.refresh_by(None)
    }

    /// [`refresh`](Self::refresh) for a call that must end by `end`: the
    /// wait for another refresh under way, and each node's connect and
    /// reply, are bounded by what is left (a node that stopped answering
    /// would otherwise hold the call its connect and socket timeouts).
    pub(crate) fn refresh_by(&self, end: Option<Instant>) -> RedisResult<()> {
        self.refresh_from(end, None)
    }

    /// [`refresh_by`](Self::refresh_by), asking `node` last (it just
    /// failed: it may not answer).
    pub(crate) fn refresh_avoiding(&self, end: Option<Instant>, node: &str) -> RedisResult<()> {
        self.refresh_from(end, Some(node))
    }

    fn refresh_from(&self, end: Option<Instant>, last_asked: Option<&str>) -> RedisResult<()> {
        // One refresh at a time; whoever waited for it uses its result.
        let mut last = match end {
            None => self.last_refresh.lock(),
            Some(end) => self
                .last_refresh
                .try_lock_until(end)
                .ok_or_else(|| no_node("no time left to read the slot table".into()))?,
        };
        if last.is_some_and(|t| t.elapsed() < REFRESH_EVERY) {
            return Ok(());
        }
        let mut last_err = None;
        for info in self.candidates(last_asked) {
            let mut timeouts = (self.connect_timeout, self.socket_timeout);
            if let Some(end) = end {
                let left = end.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break;
                }
                timeouts = (timeouts.0.min(left), timeouts.1.min(left));
            }
            match self.read_slots(&info, timeouts) {
                Ok(table) => {
                    *self.table.write() = table;
                    *last = Some(Instant::now());
                    return Ok(());
                }
                Err(e) => last_err = Some(e),
            }
        }
        Err(last_err.unwrap_or_else(|| no_node("no cluster node to ask".into())))
    }

    fn read_slots(
        &self,
        info: &ConnectionInfo,
        (connect, socket): (Duration, Duration),
    ) -> RedisResult<Vec<Option<Arc<str>>>> {
        let mut con = Wire::connect(info, &self.tls, connect, socket)?;
        let ranges: Vec<Value> = redis::cmd("CLUSTER").arg("SLOTS").query(&mut con)?;
        let asked = self.pubsub.load(Ordering::Relaxed);
        if asked == UNKNOWN || asked == WANTED {
            // Redisson's probe: sharded pub/sub when the node knows
            // `PUBSUB SHARDNUMSUB` (Redis ≥ 7); any refusal means classic
            // (Redis 6.2 has no `SPUBLISH`: a release script using it
            // would fail, so even `On` cannot have it there).
            let probe: RedisResult<Value> = redis::cmd("PUBSUB")
                .arg("SHARDNUMSUB")
                .arg(0)
                .query(&mut con);
            let mode = match &probe {
                Ok(_) => SHARDED,
                // The node failing (not refusing the command) decides
                // nothing: read the table elsewhere.
                Err(e) if Retry::of(e) == Retry::Reconnect => return Err(probe.unwrap_err()),
                // Loading, a failover under way: the next read decides.
                Err(e) if Retry::of(e) == Retry::Later => asked,
                // Asked for: only a server that does not know the command
                // (Redis < 7) makes it classic — a user that may not run
                // it on a server that knows it still publishes with
                // `SPUBLISH`.
                Err(e) if asked == WANTED && knows_shardnumsub(e) => {
                    tracing::warn!(error = %e, "leasehold: could not ask the cluster whether it has sharded pub/sub; using it, as ShardedPubSub::On asks");
                    SHARDED
                }
                Err(e) if asked == WANTED => {
                    tracing::warn!(error = %e, "leasehold: sharded pub/sub was asked for (ShardedPubSub::On) but the cluster has none (Redis < 7); using classic PUBLISH/SUBSCRIBE");
                    CLASSIC
                }
                Err(e) => {
                    tracing::info!(error = %e, "leasehold: the cluster has no sharded pub/sub (PUBSUB SHARDNUMSUB refused); using classic PUBLISH/SUBSCRIBE");
                    CLASSIC
                }
            };
            self.pubsub.store(mode, Ordering::Relaxed);
        }
        let mut table = vec![None; SLOTS];
        for range in ranges {
            let Value::Array(parts) = range else { continue };
            let (Some(Value::Int(start)), Some(Value::Int(end)), Some(Value::Array(primary))) =
                (parts.first(), parts.get(1), parts.get(2))
            else {
                continue;
            };
            let (Some(Ok(host)), Some(Value::Int(port))) = (
                primary.first().map(redis::from_redis_value_ref::<String>),
                primary.get(1),
            ) else {
                continue;
            };
            // An empty host means "the address you asked" (cluster-announce).
            let host = if host.is_empty() || host == "?" {
                match info.addr() {
                    ConnectionAddr::Tcp(h, _) | ConnectionAddr::TcpTls { host: h, .. } => h.clone(),
                    _ => continue,
                }
            } else {
                host
            };
            let node: Arc<str> = Arc::from(format!("{host}:{port}"));
            let (start, end) = (*start as usize, *end as usize);
            for slot in table.iter_mut().take(end.min(SLOTS - 1) + 1).skip(start) {
                *slot = Some(Arc::clone(&node));
            }
        }
        if table.iter().all(Option::is_none) {
            return Err(no_node("CLUSTER SLOTS listed no slot".into()));
        }
        Ok(table)
    }

    /// Known primaries, then the seeds — each once; `last` (a known
    /// primary) after them all.
    fn candidates(&self, last: Option<&str>) -> Vec<ConnectionInfo> {
        let nodes = self.known_primaries();
        let (first, after): (Vec<_>, Vec<_>) = nodes.iter().partition(|n| Some(&***n) != last);
        let info = |n: &&Arc<str>| self.info_for(n).ok();
        let mut infos: Vec<ConnectionInfo> = first.iter().filter_map(info).collect();
        infos.extend(self.seeds.iter().cloned());
        infos.extend(after.iter().filter_map(info));
        infos
    }

    /// Connection settings for the node `host:port`: the first seed's, with
    /// the node's address (over TLS when the seed's is).
    pub(crate) fn info_for(&self, node: &str) -> RedisResult<ConnectionInfo> {
        let bad = || no_node(format!("bad cluster node address {node:?}"));
        let (host, port) = node.rsplit_once(':').ok_or_else(bad)?;
        let port: u16 = port.parse().map_err(|_| bad())?;
        let seed = self.seeds.first().ok_or_else(bad)?;
        let host = host.to_owned();
        let addr = match seed.addr() {
            ConnectionAddr::TcpTls {
                insecure,
                tls_params,
                ..
            } => ConnectionAddr::TcpTls {
                host,
                port,
                insecure: *insecure,
                tls_params: tls_params.clone(),
            },
            _ => ConnectionAddr::Tcp(host, port),
        };
        Ok(seed.clone().set_addr(addr))
    }

    /// A node for the subscriber (classic pub/sub reaches every node of a
    /// cluster): each call starts from the next candidate, so a dead node is
    /// not tried forever.
    pub(crate) fn any_node(&self) -> RedisResult<redis::Client> {
        let candidates = self.candidates(None);
        if candidates.is_empty() {
            return Err(no_node("no cluster node known".into()));
        }
        let i = self.next_node.fetch_add(1, Ordering::Relaxed) % candidates.len();
        redis::Client::open(candidates[i].clone())
    }
}

/// The `MOVED <slot> <host:port>` in an error's text (a subscription the
/// node refused because the channel's slot is served elsewhere), if any.
pub(crate) fn moved_in(error: &str) -> Option<(u16, String)> {
    let mut words = error.split_whitespace();
    words.position(|w| w == "MOVED")?;
    let slot = words.next()?.parse::<u16>().ok()?;
    Some((slot, words.next()?.to_owned()))
}

/// No node to ask (a cluster's routing, Sentinel naming no primary), as a
/// connection error (retried by waiters, `is_connection()` for callers).
pub(crate) fn no_node(message: String) -> redis::RedisError {
    redis::RedisError::from(std::io::Error::new(
        std::io::ErrorKind::NotConnected,
        message,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_moved_refusal_names_the_slot_and_node() {
        assert_eq!(
            moved_in("MOVED 3999 127.0.0.1:6381"),
            Some((3999, "127.0.0.1:6381".to_owned()))
        );
        assert_eq!(
            moved_in("An error was signalled by the server - Moved: MOVED 12 10.0.0.1:7000"),
            Some((12, "10.0.0.1:7000".to_owned()))
        );
        assert_eq!(moved_in("NOPERM this user has no permissions"), None);
        assert_eq!(moved_in("MOVED x y"), None);
    }

    #[test]
    fn slots_match_the_server() {
        // Values from `CLUSTER KEYSLOT` of Redis 7.0.
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"123456789"), 12739);
        assert_eq!(key_slot(b"{user1000}.following"), key_slot(b"user1000"));
        assert_eq!(
            key_slot(b"redisson_lock__channel:{order:pay}"),
            key_slot(b"order:pay")
        );
        // An empty tag does not count; only the first tag does.
        assert_eq!(key_slot(b"{}x"), crc16(b"{}x") % 16384);
        assert_eq!(key_slot(b"a{b}{c}"), key_slot(b"b"));
        assert_eq!(key_slot(b"a{b"), crc16(b"a{b") % 16384);
    }
}
