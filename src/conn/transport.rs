//! The one round trip of the lock path ([`Connections::call`]): a script
//! call sent where its caller waits — inline on a pooled connection for a
//! thread; for a task, on its own tokio runtime (feature `tokio`,
//! `runtime`), else — or where that cannot go — on the I/O threads. Chosen
//! here, once per call: the raw layer writes each operation once.
//!
//! What becomes of a call whose caller went away while it was out is the
//! transport's business too, the same for every operation: its [`Outcome`]
//! goes to the call's [`Forsaken`] hook — after its reply, so that an undo
//! sent on another connection cannot overtake a request held up on the
//! way; as [`Outcome::Unknown`] when no answer came.

use std::sync::Arc;

use redis::RedisResult;

use super::{Bound, Connections};
use crate::error::Result;
use crate::park::Park;
use crate::protocol::{Call, Reply};

/// What became of a call whose caller went away before its answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// It was not sent: nothing ran.
    NotSent,
    /// Redis answered it: it ran.
    Ran,
    /// It went out and no answer came, or an error reply (`BUSY`,
    /// `LOADING`, …): it may have run, or may not, or may still be on its
    /// way.
    Unknown,
}

impl Outcome {
    /// The outcome of a call that ended as `result`, its request out or
    /// not (`sent`).
    pub(crate) fn of<T, E>(result: &std::result::Result<T, E>, sent: bool) -> Outcome {
        match (result, sent) {
            (Ok(_), _) => Outcome::Ran,
            (Err(_), false) => Outcome::NotSent,
            (Err(_), true) => Outcome::Unknown,
        }
    }
}

/// What undoes a call whose caller went away while it was out, told its
/// [`Outcome`]. It must not block (it may run on an executor's thread):
/// round trips go to the background.
pub(crate) type Forsaken = Box<dyn FnOnce(Outcome) + Send>;

/// Makes a call's [`Forsaken`] hook — only when it is needed (most calls
/// end with their caller, and the hook owns what it undoes).
pub(crate) type MakeForsaken<'a> = &'a (dyn Fn() -> Forsaken + Sync);

impl Connections {
    /// Sends `call` for `key` within `bound` where `park`'s caller waits,
    /// its reply read with `read`: the result, and whether the request went
    /// out (a failure after it may have run in Redis). The hook `forsaken`
    /// makes runs if the caller's future is dropped before this returns
    /// (never for a thread, which waits to the end).
    pub(crate) async fn call<T, R>(
        self: &Arc<Self>,
        park: Park,
        key: &str,
        bound: Bound,
        call: Call,
        read: R,
        forsaken: Option<MakeForsaken<'_>>,
    ) -> (Result<T>, bool)
    where
        T: Send + 'static,
        R: Fn(Reply) -> RedisResult<T> + Send + Sync + 'static,
    {
        if park == Park::Thread {
            return self.run_sent(key, bound, |con| read(call.run(con)?));
        }
        #[cfg(feature = "tokio")]
        let call = match self.on_runtime(key, bound, call, &read, forsaken).await {
            Ok(done) => return done,
            Err(unsent) => unsent,
        };
        // On an I/O thread the call runs to its end whatever becomes of
        // the task; its outcome goes to the hook when the task is gone.
        let forsaken = forsaken.map(|make| make());
        let (conns, key) = (Arc::clone(self), key.to_owned());
        let job = move || conns.run_sent(&key, bound, |con| read(call.run(con)?));
        let lost = move |(result, sent): (Result<T>, bool)| {
            if let Some(forsaken) = forsaken {
                forsaken(Outcome::of(&result, sent));
            }
        };
        let done = self.threads.io(Park::Task, job, lost).await;
        done.unwrap_or_else(|e| (Err(e), false))
    }

    /// The call on the task's own tokio runtime, its errors explained as a
    /// pooled connection's are; the call back, unsent, where it cannot go
    /// there: not a task of a tokio runtime (or one without an I/O driver),
    /// a client of other than one server over TCP, replica acknowledgement
    /// (the I/O threads send a script and its `WAIT`), no connection now.
    #[cfg(feature = "tokio")]
    async fn on_runtime<T>(
        &self,
        key: &str,
        bound: Bound,
        call: Call,
        read: &impl Fn(Reply) -> RedisResult<T>,
        forsaken: Option<MakeForsaken<'_>>,
    ) -> std::result::Result<(Result<T>, bool), Call> {
        let Some(tokio) = self.tokio.as_ref().filter(|_| call.wait.is_none()) else {
            return Err(call);
        };
        let (io, by_deadline) = self.io_timeout(bound);
        if io.is_zero() {
            return Err(call);
        }
        let connect = self.pool_wait(bound).unwrap_or(self.connect_timeout());
        let (reply, sent) = tokio.call(call, (connect, io, bound.end), forsaken).await?;
        let result = reply.and_then(read).map_err(|e| {
            let at = super::At {
                addr: self.pool.addr(),
                io,
                by_deadline,
                sent,
            };
            self.explained(crate::error::Error::from_redis(e, key), &at)
        });
        Ok((result, sent))
    }
}
