//! [`block_on`]: the blocking API's way into the one async acquire path —
//! with [`Park::Thread`](super::Park::Thread) the future is ready at its
//! first poll; should it ever not be, the thread parks until woken.

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::thread::Thread;

struct Unpark(Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
}

/// Runs `future` to completion on this thread.
pub(crate) fn block_on<F: Future>(future: F) -> F::Output {
    let mut future = pin!(future);
    // Ready at once on the blocking path: no waker to make.
    let noop = Waker::noop();
    if let Poll::Ready(out) = future.as_mut().poll(&mut Context::from_waker(noop)) {
        return out;
    }
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    loop {
        if let Poll::Ready(out) = future.as_mut().poll(&mut cx) {
            return out;
        }
        std::thread::park();
    }
}
