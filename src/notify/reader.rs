//! The subscriber thread: connects (with backoff, one WARN per outage),
//! resubscribes every channel with waiters, routes messages to their
//! channel's waiters (permits, wake-alls, grants), and handles Redis
//! refusing a subscription (`MOVED`, or its waiters retry on their own).

use std::io;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use redis::Value;

use super::*;
use crate::conn::cluster::moved_in;
use crate::conn::stream;
use crate::protocol::Message;

impl Shared {
    /// The thread: connect, resubscribe, read until the connection breaks,
    /// repeat with backoff; exit when the client is gone.
    pub(super) fn run(self: Arc<Self>) {
        let mut backoff = BACKOFF_MIN;
        // One WARN per outage, not one per retry.
        let mut warned = false;
        loop {
            match self.connect() {
                Ok((reader, writer)) => {
                    if !self.install(writer) {
                        return;
                    }
                    *self.last_error.lock() = None;
                    if std::mem::take(&mut warned) {
                        tracing::info!(addr = ?self.info.addr(), "leasehold: subscriber connected again; waiters are woken by unlock messages");
                    }
                    let since = Instant::now();
                    self.read_loop(reader);
                    if !self.disconnected() {
                        return;
                    }
                    // A connection that broke at once (the server closes it
                    // right after the handshake) backs off like a failure.
                    if since.elapsed() >= BACKOFF_MAX {
                        backoff = BACKOFF_MIN;
                    }
                }
                Err(e) => {
                    if !std::mem::replace(&mut warned, true) {
                        tracing::warn!(error = %e, addr = ?self.info.addr(), "leasehold: subscriber could not connect; waiters retry every second at most until it does (see stats())");
                    } else {
                        tracing::debug!(error = %e, "leasehold: subscriber still cannot connect");
                    }
                    *self.last_error.lock() = Some(e.to_string());
                }
            }
            let mut st = self.state.lock();
            if !st.closed {
                self.thread_cv.wait_for(&mut st, backoff);
            }
            // Reconnect only while someone waits: an idle client keeps no retry loop.
            while !st.closed && !st.channels.values().any(|c| c.refs > 0) {
                if let Some((node, router)) = &self.shard {
                    // A node that serves no slot any more (failed over,
                    // removed): its thread ends; a waiter that needs the
                    // node again starts a new one.
                    if !router.serves(node) {
                        st.thread_started = false;
                        return;
                    }
                }
                self.thread_cv.wait(&mut st);
            }
            if st.closed {
                return;
            }
            backoff = (backoff * 2).min(BACKOFF_MAX);
        }
    }

    /// Opens the subscriber connection — to Sentinel's current primary, or
    /// the configured server — with the handshake every connection of ours
    /// makes, named so operators see it; returns its reading and writing
    /// halves.
    fn connect(&self) -> io::Result<(Stream, Stream)> {
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
        stream.set_timeouts(SWEEP, self.io_timeout)?;
        let writer = stream.try_clone()?;
        Ok((stream, writer))
    }

    /// Makes `writer` the live connection and subscribes every channel with
    /// waiters; false when the client was closed meanwhile.
    fn install(&self, mut writer: Stream) -> bool {
        let mut st = self.state.lock();
        if st.closed {
            writer.shutdown();
            return false;
        }
        st.forget_idle();
        let mut bytes = Vec::new();
        let st = &mut *st;
        st.sent.clear();
        for (name, c) in st.channels.iter_mut() {
            if c.moved {
                continue; // its waiters subscribe on the slot's node
            }
            c.inflight = c.commands(name, true, st.sharded, &mut bytes, &mut st.sent);
            c.live = true;
        }
        send(&mut writer, &bytes); // empty when nothing has waiters: no write
        st.writer = Some(writer);
        self.connected.store(true, Ordering::Relaxed);
        self.connects.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// Forgets the broken connection and wakes every waiter to retry at
    /// once; false when the client is closed (the thread exits).
    fn disconnected(&self) -> bool {
        self.connected.store(false, Ordering::Relaxed);
        let mut st = self.state.lock();
        if let Some(w) = st.writer.take() {
            w.shutdown();
        }
        for c in st.channels.values_mut() {
            c.inflight = 0;
            c.live = false;
            // Retry now, and again once subscribed on the next connection:
            // messages published in between are lost.
            c.resync = true;
            c.wake_all();
        }
        st.forget_idle();
        !st.closed
    }

    /// Redis refused the (un)subscribe command sent for subscription
    /// `what`: sharded, a `MOVED` (the slot is served elsewhere; its waiters
    /// subscribe again there); otherwise (NOPERM for the channel) its
    /// waiters are never confirmed and retry on their own; one WARN.
    fn refused(&self, st: &mut State, what: Option<String>, error: String) {
        if let (Some(name), Some((_, router))) = (&what, &self.shard) {
            if let Some((slot, addr)) = moved_in(&error) {
                router.note_moved(slot, &addr);
                if let Some(c) = st.channels.get_mut(name) {
                    c.inflight = c.inflight.saturating_sub(1);
                    c.slot_moved();
                }
                return;
            }
        }
        if let Some(c) = what.and_then(|name| st.channels.get_mut(&name)) {
            c.inflight = c.inflight.saturating_sub(1);
            c.refused = true;
        }
        if self.last_error.lock().replace(error.clone()).is_none() {
            tracing::warn!(error = %error, "leasehold: redis refused a subscription; its waiters retry every second at most (see stats())");
        }
    }

    fn read_loop(&self, mut reader: Stream) {
        let mut parser = redis::Parser::new();
        let mut heard = Instant::now();
        let mut pinged = false;
        loop {
            match parser.parse_value(&mut reader) {
                Ok(value) => {
                    heard = Instant::now();
                    pinged = false;
                    self.handle(value);
                }
                Err(e) if e.is_timeout() => {
                    let now = Instant::now();
                    let mut st = self.state.lock();
                    st.sweep(now.checked_sub(LINGER).unwrap_or(now));
                    if now.duration_since(heard) < KEEPALIVE {
                        continue;
                    }
                    if pinged {
                        return; // a second silent period: dead
                    }
                    match st.writer.as_mut() {
                        Some(w) => send(w, &redis::cmd("PING").get_packed_command()),
                        None => return,
                    }
                    heard = now;
                    pinged = true;
                }
                Err(e) => {
                    if !self.state.lock().closed {
                        tracing::debug!(error = %e, "leasehold: subscriber connection lost; reconnecting");
                    }
                    return;
                }
            }
        }
    }

    fn handle(&self, value: Value) {
        let items = match value {
            Value::Array(items) => items,
            Value::Push { data, .. } => data,
            Value::ServerError(e) => {
                let mut st = self.state.lock();
                let refused = st.sent.pop_front();
                self.refused(&mut st, refused, redis::RedisError::from(e).to_string());
                return;
            }
            _ => return,
        };
        let kind = items.first().and_then(as_bytes);
        let wire = items.get(1).and_then(as_bytes).map(std::str::from_utf8);
        let (Some(kind), Some(Ok(wire))) = (kind, wire) else {
            return;
        };
        let mut st = self.state.lock();
        let name = st.route(wire).to_owned();
        match kind {
            b"message" | b"smessage" => {
                let payload = items.get(2).and_then(as_bytes).unwrap_or_default();
                let Some(c) = st.channels.get_mut(&name) else {
                    return;
                };
                match Message::of(payload) {
                    // A claimed grant (a semaphore's): kept for the waiter
                    // whose place it names (the oldest goes when too many
                    // wait: theirs were left meanwhile); the others woken
                    // look and park again.
                    Message::Grant if c.claims && c.refs > 0 => {
                        if c.grants.len() >= CLAIMED_GRANTS_MAX {
                            c.grants.remove(0);
                        }
                        c.grants.push(payload.to_vec());
                        c.cv.notify_all();
                    }
                    // For the waiter to take (and check) when it wakes;
                    // nobody waits → its place is gone already (a claimed
                    // grant's too).
                    Message::Grant => {
                        if c.refs > 0 && c.grants.len() < GRANTS_MAX {
                            c.grants.push(payload.to_vec());
                            c.permits = (c.permits + 1).min(c.refs);
                            c.cv.notify_all();
                        }
                    }
                    Message::WakeAll if !c.claims => {
                        c.messages += 1;
                        c.broadcasts += 1;
                        c.cv.notify_all();
                    }
                    // A semaphore's count (`1` too): one waiter tries.
                    Message::Unlock | Message::WakeAll => {
                        c.messages += 1;
                        if c.refs > 0 {
                            c.permits = (c.permits + 1).min(c.refs);
                            c.cv.notify_all();
                        }
                    }
                }
            }
            b"sunsubscribe" if st.channels.get(&name).is_none_or(|c| c.inflight == 0) => {
                // Not asked for: the slot left this node (a reshard, a
                // failover); its waiters subscribe again where it went.
                if let Some(c) = st.channels.get_mut(&name) {
                    c.slot_moved();
                    if c.refs == 0 {
                        st.remove(&name); // it lingered: nobody to tell
                    }
                }
                if let Some((_, router)) = &self.shard {
                    router.forget_slot_of(&name);
                }
            }
            b"subscribe" | b"unsubscribe" | b"ssubscribe" | b"sunsubscribe" => {
                st.sent.pop_front();
                let Some(c) = st.channels.get_mut(&name) else {
                    return;
                };
                c.inflight = c.inflight.saturating_sub(1);
                if c.inflight > 0 {
                    return;
                }
                if c.refs == 0 && !c.live {
                    st.remove(&name);
                } else if c.resync && c.refs > 0 {
                    c.resync = false;
                    c.wake_all();
                } else {
                    c.cv.notify_all(); // the subscriber waiting for confirmation
                }
            }
            _ => {}
        }
    }
}

fn as_bytes(v: &Value) -> Option<&[u8]> {
    match v {
        Value::BulkString(b) => Some(b),
        Value::SimpleString(s) => Some(s.as_bytes()),
        _ => None,
    }
}
