//! How a model client of the exclusive-lock simulation takes what comes
//! back: a reply (held, wait with or without the `j` flag, renewed or lost,
//! released), a reply that never came (the undo due before its next
//! acquire), and the grants on its channel — as the wait loop takes them.

use super::*;

impl Sim {
    /// A reply that never came: what the call may have done is undone
    /// before the owner acquires again.
    pub(super) fn lost(&mut self, c: usize, op: Op) {
        let now = self.w.now();
        let ride = self.cfg.ride_lost_acquires;
        let cl = &mut self.clients[c];
        match op {
            Op::Acquire { place } if ride && !place.is_empty() => {
                let place = match place.split_once('|') {
                    Some((_, bare)) => bare.to_owned(),
                    None => place,
                };
                cl.state = State::Waiting {
                    element: Some(format!("0|{place}")),
                    place,
                    confirm_at: now,
                };
            }
            Op::Acquire { place } => {
                cl.unsettled = Some(place);
                cl.state = State::Idle;
            }
            // Sent again until answered: it must reach Redis.
            Op::Release | Op::Leave { .. } => {
                let op = op.clone();
                self.send(c, op);
            }
            // The next renewal (a third of the lease later) tries again.
            Op::Renew => {}
            // A re-entry that may have counted one more hold in Redis, a
            // guard's release that may not have counted one less: the
            // owner's last release drops its field whatever the count.
            Op::Reenter { .. } | Op::Unhold { .. } => {}
        }
    }

    pub(super) fn answer(
        &mut self,
        c: usize,
        op: Op,
        sent_at: u64,
        reply: Reply,
    ) -> Result<(), String> {
        let now = self.w.now();
        let cl = &mut self.clients[c];
        match op {
            Op::Acquire { place } => match reply {
                Reply::Array(ref items) if matches!(items.as_slice(), [Reply::Int(_)]) => {
                    let Reply::Int(token) = items[0] else {
                        unreachable!()
                    };
                    let until = sent_at + cl.lease - 1;
                    if until <= now {
                        cl.state = State::Idle;
                        cl.unsettled = Some(place);
                        return Ok(());
                    }
                    cl.token = Some(token as u64);
                    self.hold(c, until)?;
                }
                Reply::Nil => {
                    let until = sent_at + cl.lease - 1;
                    if until <= now {
                        // Arrived after its lease could have run out: undo.
                        cl.state = State::Idle;
                        cl.unsettled = Some(place);
                        return Ok(());
                    }
                    self.hold(c, until)?;
                }
                Reply::Int(_) | Reply::Array(_) => {
                    let (ms, flags, until) = match reply {
                        Reply::Int(ms) => (ms, String::new(), None),
                        Reply::Array(items) => match items.as_slice() {
                            [Reply::Bulk(f), Reply::Int(ms)] => {
                                (*ms, String::from_utf8_lossy(f).into_owned(), None)
                            }
                            [Reply::Bulk(f), Reply::Int(ms), Reply::Int(until)] => {
                                (*ms, String::from_utf8_lossy(f).into_owned(), Some(*until))
                            }
                            other => return Err(format!("c{c}: acquire answered {other:?}")),
                        },
                        _ => unreachable!(),
                    };
                    // Sent as the place or as our element: the next attempt
                    // names the element this reply gives.
                    let place = match place.split_once('|') {
                        Some((_, bare)) => bare.to_owned(),
                        None => place,
                    };
                    let element = until.map(|until| format!("{until}|{place}"));
                    // Sent with the place: `sent_with_place` counts this one.
                    if flags.contains('j') && cl.sent_with_place > 1 && !self.cfg.trust_stale_grants
                    {
                        cl.stale_grants = true;
                    }
                    cl.confirmed_at = sent_at;
                    cl.foreign = flags.contains('f');
                    // A place is confirmed every third of its lease; a
                    // Redisson client waits for the holder's PTTL (its
                    // lease when none is known) or a message.
                    let third = match cl.redisson {
                        false => cl.lease.clamp(300, self.cfg.lock.place_lease()) / 3,
                        true => cl.lease.max(ms.max(1) as u64),
                    };
                    let wait = if ms < 0 {
                        third
                    } else {
                        (ms as u64).clamp(1, third)
                    };
                    cl.state = State::Waiting {
                        place,
                        element,
                        confirm_at: now + wait,
                    };
                    self.take_grants(c)?;
                }
                other => return Err(format!("c{c}: acquire answered {other:?}")),
            },
            Op::Renew => {
                if let State::Holding {
                    until, release_at, ..
                } = cl.state
                {
                    if reply == Reply::Int(1) {
                        let until = until.max(sent_at + cl.lease - 1);
                        cl.state = State::Holding {
                            until,
                            renew_at: now + cl.lease / 3,
                            release_at,
                        };
                    } else {
                        // Lost: the guard is told; its drop releases.
                        cl.state = State::Holding {
                            until: now,
                            renew_at: u64::MAX,
                            release_at: now,
                        };
                    }
                }
            }
            Op::Release | Op::Unhold { .. } => {
                if matches!(op, Op::Release) {
                    cl.state = State::Idle;
                }
            }
            Op::Reenter { lease } => {
                let held = matches!(&reply, Reply::Nil)
                    || matches!(&reply, Reply::Array(items) if matches!(items.as_slice(), [Reply::Int(_)]));
                if !held {
                    return Ok(()); // held elsewhere: our first guard's lease is gone
                }
                let until = sent_at + lease - 1;
                let outer = match cl.state {
                    State::Holding { until, .. } => until,
                    _ => 0,
                };
                if until <= now {
                    // Too late to count on: dropped at once (the first
                    // guard keeps what it counts on).
                    let keep = format!(">{}", keep_ms(outer.saturating_sub(now)));
                    self.send(c, Op::Unhold { keep });
                    return Ok(());
                }
                let cs = 1 + self.w.rng.below(2 * lease);
                self.clients[c].inner = Some(Inner {
                    until,
                    release_at: now + cs,
                });
                self.w.note(format!("c{c} re-entered until {until}"));
            }
            Op::Leave { .. } => {
                // A grant that came meanwhile is released.
                if reply == Reply::Int(1) {
                    cl.state = State::Holding {
                        until: 0,
                        renew_at: u64::MAX,
                        release_at: 0,
                    };
                }
            }
        }
        Ok(())
    }

    pub(super) fn hold(&mut self, c: usize, until: u64) -> Result<(), String> {
        let now = self.w.now();
        let cl = &mut self.clients[c];
        if cl.fenced {
            let token = cl
                .token
                .ok_or(format!("c{c} holds a fenced lock without a token"))?;
            if token <= self.last_token {
                return Err(format!(
                    "c{c}'s token {token} does not exceed the last holder's {}",
                    self.last_token
                ));
            }
            self.last_token = token;
        }
        let cl = &mut self.clients[c];
        let cs = 1 + self.w.rng.below(2 * cl.lease);
        cl.state = State::Holding {
            until,
            renew_at: now + (until - now) / 3,
            release_at: now + cs,
        };
        cl.acquired += 1;
        self.w.explored.acquired += 1;
        self.w.note(format!("c{c} holds until {until}"));
        Ok(())
    }

    /// The grants client `c` received, looked at as the wait loop does
    /// once no attempt is in flight: one naming our place is held at once
    /// — counted from the send time of the attempt that left us waiting,
    /// for the grant's lease — if less than half of that lease is gone.
    pub(super) fn take_grants(&mut self, c: usize) -> Result<(), String> {
        let now = self.w.now();
        let cl = &mut self.clients[c];
        let State::Waiting { place, element, .. } = &cl.state else {
            return Ok(());
        };
        if cl.inflight.is_some() {
            return Ok(());
        }
        let (place, element) = (place.clone(), element.clone());
        let grants = std::mem::take(&mut cl.grants);
        for grant in grants {
            let (named, token) = match grant.split_once(' ') {
                Some((named, token)) => (named, token.parse::<u64>().ok()),
                None => (grant.as_str(), None),
            };
            if named != place {
                // Not a grant of ours (`0`: try again; another wait's): the
                // wait wakes and attempts.
                cl.state = State::Waiting {
                    place: place.clone(),
                    element: element.clone(),
                    confirm_at: now,
                };
                continue;
            }
            let lease = cl.lease.min(GRANT_LEASE);
            let direct = !cl.stale_grants && !self.cfg.replicas && (token.is_some() || !cl.fenced);
            if !direct || now - cl.confirmed_at >= lease / 2 {
                // Too much of it gone to trust, or it must be taken as
                // asked: the attempt decides.
                cl.state = State::Waiting {
                    place,
                    element,
                    confirm_at: now,
                };
                return Ok(());
            }
            cl.token = token;
            let until = cl.confirmed_at + lease - 1;
            self.w.note(format!("c{c} granted"));
            return self.hold(c, until);
        }
        Ok(())
    }
}
