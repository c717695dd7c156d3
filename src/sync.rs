//! The synchronisation primitives of the in-process machinery (the ledger's
//! queue and handover, the signal a wait parks on, `Cancel`, a lease's
//! state and the renewal gate): `parking_lot`'s `Mutex` and `Condvar` and
//! `std`'s atomics, plain re-exports — or, in the unit tests built with
//! `--cfg loom` (loom is a dev-dependency), loom's, so that the models
//! (`ledger/loom.rs`, `park/loom.rs`, `renewal/loom.rs`) run every
//! interleaving of that same code. Under loom a thin wrapper gives loom's
//! types `parking_lot`'s face (no poisoning, `wait(&mut guard)`), and a
//! timed wait is a plain wait: loom does not model time, so the models use
//! far deadlines or none and time never decides.

#[cfg(not(all(test, loom)))]
pub(crate) use parking_lot::{Condvar, Mutex};

/// `std`'s atomics (loom's under `cfg(loom)`).
pub(crate) mod atomic {
    #[cfg(all(test, loom))]
    pub(crate) use loom::sync::atomic::{AtomicBool, AtomicU64};
    pub(crate) use std::sync::atomic::Ordering;
    #[cfg(not(all(test, loom)))]
    pub(crate) use std::sync::atomic::{AtomicBool, AtomicU64};
}

#[cfg(all(test, loom))]
pub(crate) use modelled::{Condvar, Mutex};

/// loom's `Mutex` and `Condvar` with `parking_lot`'s face.
#[cfg(all(test, loom))]
mod modelled {
    use std::ops::{Deref, DerefMut};
    use std::time::{Duration, Instant};

    #[derive(Default)]
    pub(crate) struct Mutex<T>(loom::sync::Mutex<T>);

    /// A held lock; `None` only inside [`Condvar::wait`], which puts it
    /// back before it returns — so the `expect("held")`s below cannot fail
    /// (and this module exists only in the loom models' test build).
    pub(crate) struct MutexGuard<'a, T>(Option<loom::sync::MutexGuard<'a, T>>);

    impl<T> Mutex<T> {
        pub(crate) fn new(value: T) -> Self {
            Mutex(loom::sync::Mutex::new(value))
        }

        pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
            MutexGuard(Some(self.0.lock().unwrap_or_else(|e| e.into_inner())))
        }
    }

    impl<T> Deref for MutexGuard<'_, T> {
        type Target = T;
        fn deref(&self) -> &T {
            self.0.as_ref().expect("held")
        }
    }

    impl<T> DerefMut for MutexGuard<'_, T> {
        fn deref_mut(&mut self) -> &mut T {
            self.0.as_mut().expect("held")
        }
    }

    #[derive(Default)]
    pub(crate) struct Condvar(loom::sync::Condvar);

    /// Whether a timed wait timed out: never, under loom.
    pub(crate) struct WaitTimeoutResult;

    impl WaitTimeoutResult {
        pub(crate) fn timed_out(&self) -> bool {
            false
        }
    }

    impl Condvar {
        pub(crate) fn new() -> Self {
            Condvar(loom::sync::Condvar::new())
        }

        pub(crate) fn wait<T>(&self, guard: &mut MutexGuard<'_, T>) {
            let held = guard.0.take().expect("held");
            guard.0 = Some(self.0.wait(held).unwrap_or_else(|e| e.into_inner()));
        }

        /// A plain wait: time is not modelled.
        pub(crate) fn wait_until<T>(
            &self,
            guard: &mut MutexGuard<'_, T>,
            _: Instant,
        ) -> WaitTimeoutResult {
            self.wait(guard);
            WaitTimeoutResult
        }

        /// A plain wait: time is not modelled.
        pub(crate) fn wait_for<T>(
            &self,
            guard: &mut MutexGuard<'_, T>,
            _: Duration,
        ) -> WaitTimeoutResult {
            self.wait(guard);
            WaitTimeoutResult
        }

        pub(crate) fn notify_one(&self) {
            self.0.notify_one();
        }

        pub(crate) fn notify_all(&self) {
            self.0.notify_all();
        }
    }
}

/// Runs model `name` under loom: every interleaving of `f`'s threads with
/// at most `LOOM_MAX_PREEMPTIONS` preemptions (3 when unset), then prints
/// how many it explored and how long that took.
#[cfg(all(test, loom))]
pub(crate) fn model(name: &str, f: impl Fn() + Sync + Send + 'static) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = builder.preemption_bound.or(Some(3));
    let runs = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&runs);
    let started = std::time::Instant::now();
    builder.check(move || {
        counted.fetch_add(1, Ordering::Relaxed);
        f();
    });
    let bound = builder.preemption_bound.unwrap_or_default();
    eprintln!(
        "loom model {name}: {} interleavings (at most {bound} preemptions) in {:.1?}",
        runs.load(Ordering::Relaxed),
        started.elapsed()
    );
}
