//! Batches for a thread of its own (the renewal thread): its own
//! connections (one per server or cluster node, never waiting behind busy
//! pooled ones), one pipelined round trip per node for a batch of commands
//! each for a key, cluster redirects followed (once), and with replica
//! acknowledgement a `WAIT` ending each pipeline.

use std::collections::hash_map::{Entry, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::{Cmd, RedisResult, Value};

use super::cluster::{self, Router};
use super::wire::Wire;
use crate::error::Retry;

/// Opens the batch thread's connection to the server (or its primary).
pub(crate) type Connector = Box<dyn Fn() -> RedisResult<Wire> + Send>;

/// The connections of a thread that sends batches.
pub(crate) struct Batches {
    connector: Connector,
    /// A cluster's router: each command goes to the node serving its key.
    router: Option<Arc<Router>>,
    /// The connection to the server (`None`), or to cluster nodes (by
    /// `host:port`).
    cons: HashMap<Option<Arc<str>>, Wire>,
    /// Connect and reply timeout of the node connections.
    io_timeout: Duration,
    /// Replica acknowledgement: `WAIT <replicas> <timeout>` ends each
    /// pipeline, and a batch too few replicas acknowledged answers with an
    /// error to retry (its writes may not survive a failover).
    ack: Option<(u32, Duration)>,
}

/// What one batch did: each command's answer (in order), and the round
/// trips it took.
pub(crate) struct Sent {
    pub(crate) answers: Vec<RedisResult<Value>>,
    /// With replica acknowledgement: for each command whose pipeline too
    /// few replicas acknowledged, the error saying so — what it wrote may
    /// not survive a failover (the caller decides whether it wrote
    /// anything: a renewal that found the lease gone wrote nothing).
    pub(crate) unacknowledged: Vec<Option<redis::RedisError>>,
    pub(crate) round_trips: u64,
}

impl Batches {
    pub(crate) fn new(connector: Connector, router: Option<Arc<Router>>, io: Duration) -> Self {
        Batches {
            connector,
            router,
            cons: HashMap::new(),
            io_timeout: io,
            ack: None,
        }
    }

    /// Every batch acknowledged by `replicas` replicas within `timeout`
    /// (below the I/O timeout), when asked: a pipeline too few acknowledged
    /// marks its commands [`Sent::unacknowledged`].
    pub(crate) fn acknowledged(mut self, replicas: Option<(u32, Duration)>) -> Self {
        self.ack = replicas;
        self
    }

    /// Sends `commands` — each `(key, command)` — in one pipelined round
    /// trip per node serving their keys, `head` first in each pipeline (e.g.
    /// `SCRIPT LOAD` of the script the commands run: a pipeline does not
    /// reload a flushed script cache by itself). Every node's pipeline goes
    /// out before any reply is read: a node that stopped answering holds up
    /// the reading of its own replies (its socket timeout), not the other
    /// nodes' commands, which they ran as they came. Commands a cluster
    /// redirected are sent once more where it pointed. A command whose node
    /// cannot be reached, or that failed as a whole, answers with the error
    /// (retry it later).
    pub(crate) fn send(&mut self, head: &Cmd, commands: &[(&str, Cmd)]) -> Sent {
        let mut sent = Sent {
            answers: (0..commands.len()).map(|_| Ok(Value::Nil)).collect(),
            unacknowledged: vec![None; commands.len()],
            round_trips: 0,
        };
        let Some(router) = self.router.clone() else {
            let all: Vec<usize> = (0..commands.len()).collect();
            self.send_on(vec![(None, all)], head, commands, false, &mut sent);
            return sent;
        };
        // A cluster: one batch per primary, each command sent to the node
        // serving its key's slot (a batch never mixes nodes).
        let by = Some(Instant::now() + self.io_timeout);
        let mut groups: HashMap<Arc<str>, Vec<usize>> = HashMap::new();
        for (i, (key, _)) in commands.iter().enumerate() {
            match router.node_for_by(key, by) {
                Ok(node) => groups.entry(node).or_default().push(i),
                Err(e) => sent.answers[i] = Err(e),
            }
        }
        let groups = groups.into_iter().map(|(n, g)| (Some(n), g)).collect();
        let mut redirected = self.send_on(groups, head, commands, false, &mut sent);
        // Slots that moved (MOVED) or are moving (ASK: the key is on the
        // target already): once more, at once, where the node pointed — and
        // again for a slot that moved and is moving on (MOVED, then ASK),
        // up to the redirects any call follows. One still redirected is no
        // answer about its lease: retried.
        for _ in 0..super::CLUSTER_REDIRECTS {
            if redirected.is_empty() {
                break;
            }
            let mut again = Vec::new();
            for asking in [false, true] {
                let mut groups: HashMap<Arc<str>, Vec<usize>> = HashMap::new();
                for (i, to, ask) in &redirected {
                    if *ask == asking {
                        groups.entry(Arc::clone(to)).or_default().push(*i);
                    }
                }
                let groups = groups.into_iter().map(|(n, g)| (Some(n), g)).collect();
                again.extend(self.send_on(groups, head, commands, asking, &mut sent));
            }
            redirected = again;
        }
        for (i, to, _) in redirected {
            sent.answers[i] = Err(cluster::no_node(format!(
                "the slot of {:?} kept moving (last to {to}); retried",
                commands[i].0
            )));
        }
        sent
    }

    /// Sends each group — the commands numbered in it, to its node of a
    /// cluster (`None`: the server), each after `ASKING` when `asking` —
    /// in one round trip per node, all written before any reply is read,
    /// writing their answers into `sent`. Returns the ones a cluster
    /// redirected: (index, node, whether it was `ASK`) — a `MOVED` is noted
    /// in the slot table.
    fn send_on(
        &mut self,
        mut groups: Vec<(Option<Arc<str>>, Vec<usize>)>,
        head: &Cmd,
        commands: &[(&str, Cmd)],
        asking: bool,
        sent: &mut Sent,
    ) -> Vec<(usize, Arc<str>, bool)> {
        // Nodes with a connection first: a new one's handshake to a node
        // that stopped answering would hold up the writes after it.
        groups.sort_by_key(|(node, _)| !self.cons.contains_key(node));
        let mut out = Vec::with_capacity(groups.len());
        for (node, which) in groups {
            let pipe = self.pipe_of(head, commands, &which, asking);
            sent.round_trips += 1;
            let written = self.write(node.as_ref(), &pipe);
            out.push((node, which, pipe, written));
        }
        let mut redirected = Vec::new();
        let mut failed = None;
        for (node, which, pipe, written) in out {
            let read = written.and_then(|()| self.read(node.as_ref(), &pipe));
            if read.is_err() {
                failed = node.clone();
            }
            redirected.extend(self.answers(node.as_ref(), &which, asking, read, sent));
        }
        if let (Some(router), Some(node)) = (&self.router, failed) {
            // A node may have failed over: the table read again, from the
            // others first (the failed one may not answer), within a reply's
            // time.
            let _ = router.refresh_avoiding(Some(Instant::now() + self.io_timeout), &node);
        }
        redirected
    }

    /// The pipeline of the commands numbered `which`: `head`, each command
    /// (after `ASKING` when `asking`), and the `WAIT` of replica
    /// acknowledgement.
    fn pipe_of(
        &self,
        head: &Cmd,
        commands: &[(&str, Cmd)],
        which: &[usize],
        asking: bool,
    ) -> redis::Pipeline {
        let mut pipe = redis::pipe();
        pipe.add_command(head.clone()).ignore();
        for &i in which {
            if asking {
                pipe.cmd("ASKING").ignore();
            }
            pipe.add_command(commands[i].1.clone());
        }
        if let Some((replicas, timeout)) = self.ack {
            // At least 1 ms: `WAIT n 0` would block for good.
            let ms = timeout.as_millis().max(1) as u64;
            pipe.cmd("WAIT").arg(replicas).arg(ms);
        }
        pipe.ignore_errors();
        pipe
    }

    /// What the pipeline of the commands numbered `which` got (`read`),
    /// written into `sent`; the commands redirected (see
    /// [`send_on`](Self::send_on)).
    fn answers(
        &mut self,
        node: Option<&Arc<str>>,
        which: &[usize],
        asking: bool,
        read: RedisResult<Vec<RedisResult<Value>>>,
        sent: &mut Sent,
    ) -> Vec<(usize, Arc<str>, bool)> {
        let e = match read {
            Ok(mut answers) if answers.len() == which.len() + usize::from(self.ack.is_some()) => {
                let unacknowledged = self.ack.and_then(|(wanted, timeout)| {
                    let acked = match answers.pop() {
                        Some(Ok(Value::Int(n))) => n,
                        _ => 0,
                    };
                    (acked < i64::from(wanted)).then(|| {
                        no_ack(format!(
                            "only {acked} of {wanted} replicas acknowledged the batch within {timeout:?}"
                        ))
                    })
                });
                let mut redirected = Vec::new();
                let mut dropped = false;
                for (&i, answer) in which.iter().zip(answers) {
                    if let Err(e) = &answer {
                        let redirect = e.redirect_node().filter(|_| !asking);
                        if let (Some(router), Some((addr, slot))) = (&self.router, redirect) {
                            if Retry::of(e) == Retry::Redirect {
                                let ask = e.code() == Some("ASK");
                                if !ask {
                                    let by = Some(Instant::now() + self.io_timeout);
                                    router.moved_by(slot, addr, by);
                                }
                                redirected.push((i, Arc::from(addr), ask));
                                continue;
                            }
                        }
                        // The server is a replica now (a failover), loading,
                        // without a primary: not an answer about the key.
                        // Reconnect (to the new primary) next time.
                        if Retry::of(e) != Retry::No && !dropped {
                            self.cons.remove(&node.cloned());
                            dropped = true;
                        }
                    }
                    sent.unacknowledged[i] = unacknowledged.clone();
                    sent.answers[i] = answer;
                }
                return redirected;
            }
            Ok(answers) => {
                self.cons.remove(&node.cloned());
                cluster::no_node(format!(
                    "a batch of {} commands got {} answers",
                    which.len(),
                    answers.len()
                ))
            }
            Err(e) => e,
        };
        for &i in which {
            sent.answers[i] = Err(e.clone());
        }
        Vec::new()
    }

    /// One pipeline to the node serving `key` (the server, when not a
    /// cluster), its reply read at once.
    pub(crate) fn pipeline(&mut self, key: &str, pipe: &redis::Pipeline) -> RedisResult<()> {
        let by = Some(Instant::now() + self.io_timeout);
        let node = (self.router.as_ref())
            .map(|r| r.node_for_by(key, by))
            .transpose()?;
        self.write(node.as_ref(), pipe)?;
        self.read(node.as_ref(), pipe).map(drop)
    }

    /// Writes `pipe` on this thread's connection (to `node` of a cluster),
    /// (re)connecting as needed — one the server closed since the last
    /// round (its `timeout`, a restart) found so before anything is sent,
    /// and replaced: the round is not lost to it. One that failed is
    /// reopened next time.
    fn write(&mut self, node: Option<&Arc<str>>, pipe: &redis::Pipeline) -> RedisResult<()> {
        let stale = self.cons.get_mut(&node.cloned());
        if stale.is_some_and(|con| con.check_quiet().is_err()) {
            self.cons.remove(&node.cloned());
        }
        let con = match self.cons.entry(node.cloned()) {
            Entry::Occupied(con) => con.into_mut(),
            Entry::Vacant(slot) => slot.insert(match (node, &self.router) {
                (Some(node), Some(router)) => {
                    let info = router.info_for(node)?;
                    Wire::connect(&info, router.tls(), self.io_timeout, self.io_timeout)?
                }
                _ => (self.connector)()?,
            }),
        };
        let written = con.write(&pipe.get_packed_pipeline());
        if written.is_err() {
            self.cons.remove(&node.cloned());
        }
        written
    }

    /// The replies to `pipe`, which [`write`](Self::write) sent.
    fn read(
        &mut self,
        node: Option<&Arc<str>>,
        pipe: &redis::Pipeline,
    ) -> RedisResult<Vec<RedisResult<Value>>> {
        let Some(con) = self.cons.get_mut(&node.cloned()) else {
            return Err(cluster::no_node("the batch's connection went".into()));
        };
        let result = pipe.query(&mut con.replies());
        if result.is_err() {
            self.cons.remove(&node.cloned());
        }
        result
    }
}

/// A batch whose writes too few replicas acknowledged: not an answer about
/// the keys (retry it).
fn no_ack(message: String) -> redis::RedisError {
    redis::RedisError::from(std::io::Error::new(std::io::ErrorKind::TimedOut, message))
}
