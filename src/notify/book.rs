//! The subscriber's book of channels: per channel what its waiters listen
//! to (a plain lock's grant channel, and its unlock channel only while
//! another library holds the lock), the (un)subscribe commands sent and
//! not yet confirmed, wake-ups and grants not yet taken, and lingering
//! subscriptions nobody uses any more.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use super::{send, Listen};
use crate::conn::stream::Stream;
use crate::names::semaphore_waiters;
use crate::park::Signal;

#[derive(Default)]
pub(super) struct State {
    pub(super) channels: HashMap<String, Channel>,
    /// Grant channels → the plain lock's subscription they belong to.
    pub(super) routes: HashMap<String, String>,
    /// Plain lock keys → their channel, to resume a subscription by key.
    pub(super) lines: HashMap<String, String>,
    /// Write half of the live connection; `None` while disconnected.
    pub(super) writer: Option<Stream>,
    /// The subscription each (un)subscribe command sent on it and not yet
    /// answered serves, in order: what a refusal (an error reply) refers to.
    pub(super) sent: Sent,
    /// Sharded pub/sub (`SSUBSCRIBE`).
    pub(super) sharded: bool,
    pub(super) thread_started: bool,
    pub(super) closed: bool,
}

/// (Un)subscribe commands in flight: the subscription each serves.
type Sent = std::collections::VecDeque<String>;

#[derive(Default)]
pub(super) struct Channel {
    /// The channel it is named after is subscribed (as the last command
    /// sent asked): always, but a plain lock's unlock channel only while
    /// another library holds the lock.
    pub(super) unlock: bool,
    /// Redis refused it (NOPERM): nothing can come; never confirmed.
    pub(super) refused: bool,
    /// Sharded: its slot is served elsewhere now (`MOVED`, or Redis
    /// unsubscribed it when the slot left): its waiters subscribe again on
    /// the slot's node.
    pub(super) moved: bool,
    /// The plain lock key it serves.
    pub(super) key: Option<String>,
    /// The client's grant channel (a plain lock's, a semaphore's).
    pub(super) grant: Option<String>,
    /// Subscribed with the one it is named after: a semaphore's
    /// `leasehold_swait:{<key>}` (`names::semaphore_waiters`), which nobody
    /// publishes on.
    pub(super) also: Option<String>,
    /// Its grants are claimed by the waiter whose place they name (a
    /// semaphore's: several waiters of the client share it).
    pub(super) claims: bool,
    /// Local waiters holding a [`Subscription`].
    pub(super) refs: usize,
    /// The last command sent for it subscribed (it did not unsubscribe).
    pub(super) live: bool,
    /// Since when nobody uses it (it lingers).
    pub(super) idle_since: Option<Instant>,
    /// Subscribe/unsubscribe commands sent and not yet acknowledged.
    pub(super) inflight: u32,
    /// Grants received for a waiter to take (the messages, unparsed).
    pub(super) grants: Vec<Vec<u8>>,
    /// Wake-ups granted and not yet taken.
    pub(super) permits: usize,
    /// Unlock messages received on this channel since it was registered.
    pub(super) messages: u64,
    /// Wake-all messages (`1`) received since then: every waiter that saw
    /// fewer wakes, whatever the permits say.
    pub(super) broadcasts: u64,
    /// Its waiters retried while it was not subscribed (a disconnect, a
    /// confirmation too late): all woken once Redis confirms it.
    pub(super) resync: bool,
    pub(super) cv: Arc<Signal>,
}

impl Channel {
    pub(super) fn new(listen: Listen<'_>) -> Self {
        match listen {
            Listen::Channel(_) => Channel {
                unlock: true,
                ..Channel::default()
            },
            Listen::Line {
                key,
                channel,
                grant,
                unlock,
                claims,
            } => Channel {
                unlock,
                grant: Some(grant.to_owned()),
                key: Some(key.to_owned()),
                claims,
                also: claims.then(|| semaphore_waiters(channel)).flatten(),
                ..Channel::default()
            },
        }
    }

    pub(super) fn wake_all(&mut self) {
        self.permits = self.refs;
        self.cv.notify_all();
    }

    /// Sharded: the slot is served by another node now; its waiters wake
    /// and subscribe again (see [`Subscription::moved`]).
    pub(super) fn slot_moved(&mut self) {
        self.moved = true;
        self.live = false;
        self.wake_all();
    }

    /// Appends the commands that (un)subscribe everything this channel
    /// listens to, recording them in `sent`; returns how many
    /// acknowledgements they bring.
    pub(super) fn commands(
        &mut self,
        name: &str,
        subscribe: bool,
        sharded: bool,
        out: &mut Vec<u8>,
        sent: &mut Sent,
    ) -> u32 {
        if subscribe {
            self.refused = false;
        }
        let unlock = self.unlock.then(|| self.unlock_wires(name)).into_iter();
        let wires = self.grant.as_deref().into_iter().chain(unlock.flatten());
        write(wires, name, (subscribe, sharded), out, sent)
    }

    /// The channel `name` it is named after, and the one beside it.
    fn unlock_wires<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a str> {
        std::iter::once(name).chain(self.also.as_deref())
    }
}

/// Appends `SUBSCRIBE` (`subscribe`: else `UNSUBSCRIBE`; `sharded`: their
/// sharded forms) of each of `wires` to `out` for subscription `name`,
/// recording each in `sent`; returns how many acknowledgements they bring.
fn write<'a>(
    wires: impl Iterator<Item = &'a str>,
    name: &str,
    (subscribe, sharded): (bool, bool),
    out: &mut Vec<u8>,
    sent: &mut Sent,
) -> u32 {
    let cmd = match (subscribe, sharded) {
        (true, false) => "SUBSCRIBE",
        (false, false) => "UNSUBSCRIBE",
        (true, true) => "SSUBSCRIBE",
        (false, true) => "SUNSUBSCRIBE",
    };
    let mut acks = 0;
    for wire in wires {
        redis::cmd(cmd).arg(wire).write_packed_command(out);
        sent.push_back(name.to_owned());
        acks += 1;
    }
    acks
}

/// The live connection's writing side.
pub(super) struct Link<'a> {
    w: &'a mut Stream,
    sent: &'a mut Sent,
    sharded: bool,
}

/// A plain lock's subscription `name` (its unlock channel) starts or stops
/// hearing the unlock channel besides its grant channel.
pub(super) fn toggle_unlock(link: Link<'_>, name: &str, c: &mut Channel, on: bool) {
    let mut bytes = Vec::new();
    let wires = c.unlock_wires(name);
    c.inflight += write(wires, name, (on, link.sharded), &mut bytes, link.sent);
    c.unlock = on;
    send(link.w, &bytes);
}

/// Sends the commands that (un)subscribe channel `name`, counting the
/// acknowledgements they bring.
pub(super) fn toggle(link: &mut Link<'_>, name: &str, c: &mut Channel, subscribe: bool) {
    let mut bytes = Vec::new();
    c.inflight += c.commands(name, subscribe, link.sharded, &mut bytes, link.sent);
    c.live = subscribe;
    send(link.w, &bytes);
}

impl State {
    /// Forgets channel `name` and the wire names that route to it.
    pub(super) fn remove(&mut self, name: &str) {
        if let Some(c) = self.channels.remove(name) {
            for wire in c.grant.iter().chain(c.also.iter()) {
                self.routes.remove(wire);
            }
            if let Some(k) = c.key {
                self.lines.remove(&k);
            }
        }
    }

    /// Forgets the channels nobody waits on (lingering ones, on a new or
    /// lost connection).
    pub(super) fn forget_idle(&mut self) {
        let idle: Vec<String> = self
            .channels
            .iter()
            .filter(|(_, c)| c.refs == 0)
            .map(|(name, _)| name.clone())
            .collect();
        for name in idle {
            self.remove(&name);
        }
    }

    /// The channel a wire name (channel, grant channel) serves.
    pub(super) fn route<'a>(&'a self, wire: &'a str) -> &'a str {
        self.routes.get(wire).map_or(wire, String::as_str)
    }

    /// The channels, and the live connection's writing side (`None` while
    /// disconnected) to send their commands on.
    pub(super) fn split(&mut self) -> (&mut HashMap<String, Channel>, Option<Link<'_>>) {
        let (sent, sharded) = (&mut self.sent, self.sharded);
        let link = self.writer.as_mut().map(|w| Link { w, sent, sharded });
        (&mut self.channels, link)
    }

    /// Channel `name`'s entry, and the link to send its commands on.
    pub(super) fn parts(&mut self, name: &str) -> (Option<&mut Channel>, Option<Link<'_>>) {
        let (channels, link) = self.split();
        (channels.get_mut(name), link)
    }

    /// Ends lingering subscriptions idle since before `cutoff`.
    pub(super) fn sweep(&mut self, cutoff: Instant) {
        let (channels, Some(mut link)) = self.split() else {
            return;
        };
        for (name, c) in channels.iter_mut() {
            if c.refs == 0 && c.live && c.idle_since.is_some_and(|t| t <= cutoff) {
                toggle(&mut link, name, c, false);
            }
        }
    }
}
