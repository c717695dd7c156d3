//! The raw layer on the reactor lane (feature `tokio`; see `conn::lane`):
//! a task's attempt and release of a lock of any kind sent on its own
//! tokio runtime, ending exactly as the blocking calls end (`Raw::attempted`,
//! `Raw::released_or_pending`), and what a call that was out when its
//! future was dropped leaves to undo ([`InFlight`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use super::Raw;
use crate::conn::{Bound, MakeUndo};
use crate::error::Result;
use crate::park::Park;
use crate::protocol::{Attempt, Call, Release, Released, Request, Scripts};

/// Runs its hook when dropped before [`landed`](Self::landed): a call
/// whose future was dropped while it was out (it may have run or not; the
/// hook looks at the call's `sent` flag, set only while its request is out
/// on the lane).
pub(crate) struct InFlight<F: FnOnce()>(Option<F>);

impl<F: FnOnce()> InFlight<F> {
    pub(crate) fn new(hook: F) -> Self {
        InFlight(Some(hook))
    }

    /// The call's answer came: nothing to undo here.
    pub(crate) fn landed(mut self) {
        self.0 = None;
    }
}

impl<F: FnOnce()> Drop for InFlight<F> {
    fn drop(&mut self) {
        if let Some(hook) = self.0.take() {
            hook();
        }
    }
}

impl Raw {
    /// One attempt on the reactor lane, with the same ending as the
    /// blocking one: `None` when it cannot go there now — replica
    /// acknowledgement (a `WAIT` after the script),
    /// an earlier lost reply still to undo, nothing sent — and the I/O
    /// threads send it instead. `undo`: what undoes it when its future is
    /// dropped while it is out (see `conn::Connections::run_lane`).
    pub(crate) async fn attempt_on_lane(
        self: &Arc<Self>,
        name: &str,
        req: &Request<'_>,
        bound: Bound,
        (sent, undo): (&AtomicBool, Option<MakeUndo<'_>>),
    ) -> Option<Result<Attempt>> {
        if self.replicas.is_some() || self.orphans.any() {
            return None;
        }
        let call = self.scripts().acquire_call(req);
        let sent_at = Instant::now();
        let (answer, sent) = self
            .conns
            .run_lane(
                req.key,
                bound,
                &call,
                |v| Scripts::acquire_reply(req.kind, v),
                sent,
                undo,
            )
            .await?;
        let answer = answer.map(|a| (a, None));
        Some(self.attempted(name, req, sent_at, (answer, sent)))
    }

    /// Sends release `rel` for a task: on the reactor lane, or where the
    /// lane cannot send it, on an I/O thread.
    ///
    /// A task gone before the answer: `undo` makes what the lane does once
    /// it read the reply of a release that was out (see
    /// `conn::Connections::run_lane`); `lost` what the I/O thread does with
    /// the outcome.
    pub(super) async fn release_for_task<L>(
        self: &Arc<Self>,
        rel: &Release<'_>,
        bound: Bound,
        (sent, undo): (&AtomicBool, Option<MakeUndo<'_>>),
        lost: impl FnOnce() -> L,
    ) -> Result<Released>
    where
        L: FnOnce(Result<Released>) + Send + 'static,
    {
        let (call, kind) = (self.scripts().release_call(rel), rel.kind);
        if let Some((ran, _)) = self
            .conns
            .run_lane(
                rel.key,
                bound,
                &call,
                |v| Scripts::release_reply(kind, v),
                sent,
                undo,
            )
            .await
        {
            return ran;
        }
        // On an I/O thread it runs to its end, whatever becomes of the task.
        sent.store(false, Ordering::Relaxed);
        let raw = Arc::clone(self);
        let (key, script, source) = (
            rel.key.to_owned(),
            call.script.clone(),
            call.source.to_owned(),
        );
        let cmd = call.cmd;
        let job = move || {
            let call = Call {
                script: &script,
                source: &source,
                cmd,
            };
            raw.conns
                .run_sent(&key, bound, |con| {
                    Scripts::release_reply(kind, call.run(con)?)
                })
                .0
        };
        Park::Task.io(job, lost()).await?
    }
}
