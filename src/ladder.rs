//! The rungs of the ladder for each lock kind — fair, read, write — on both
//! faces, written once: for kind `k`, `k_lock` (as long as it takes),
//! `try_k_lock` (one attempt), `try_k_lock_for` (a `Duration`),
//! `try_k_lock_until` (an `Instant`), each `kind ∘ the plain rung` with the
//! same return convention as the plain lock's (`None`: the wait ran out).
//! The plain and owned rungs are the faces' own (`client`, `task`); options
//! of every kind go through `lock_with` / `try_lock_with`.

use std::time::{Duration, Instant};

use crate::client::LockClient;
use crate::error::Result;
use crate::guard::LockGuard;
use crate::options::LockOptions;
use crate::task::{AsyncLockClient, AsyncLockGuard};

/// The four rungs of one kind on both faces: `$kind` names it in the docs,
/// `$with` makes its options from `LockOptions::new()`, `$lock_doc` is the
/// first rung's own documentation.
macro_rules! kind_rungs {
    ($kind:literal, $with:expr, [$lock:ident, $try:ident, $try_for:ident, $try_until:ident],
     $(#[doc = $lock_doc:literal])*) => {
        impl LockClient {
            $(#[doc = $lock_doc])*
            ///
            /// # Errors
            /// As [`lock_with`](Self::lock_with).
            pub fn $lock(&self, name: &str) -> Result<LockGuard> {
                self.lock_with(name, $with(LockOptions::new()))
            }

            #[doc = concat!("One attempt at the ", $kind, " lock `name`: `None` when it is not to be had now.")]
            ///
            /// # Errors
            /// As [`lock_with`](Self::lock_with).
            pub fn $try(&self, name: &str) -> Result<Option<LockGuard>> {
                self.take(name, $with(LockOptions::new()), Some(Instant::now()))
            }

            #[doc = concat!("The ", $kind, " lock `name`, waiting up to `wait` (and leaving the line at once after it): `None` when the wait ran out.")]
            ///
            /// # Errors
            /// As [`lock_with`](Self::lock_with).
            pub fn $try_for(&self, name: &str, wait: Duration) -> Result<Option<LockGuard>> {
                self.take(name, $with(LockOptions::new()), Some(crate::options::deadline_after(wait)))
            }

            #[doc = concat!("The ", $kind, " lock `name`, waiting until `deadline`: `None` when it passed.")]
            ///
            /// # Errors
            /// As [`lock_with`](Self::lock_with).
            pub fn $try_until(&self, name: &str, deadline: Instant) -> Result<Option<LockGuard>> {
                self.take(name, $with(LockOptions::new()), Some(deadline))
            }
        }

        impl AsyncLockClient {
            #[doc = concat!("Takes the ", $kind, " lock `name`, waiting as long as it takes (see [`LockClient::", stringify!($lock), "`]). Dropping the future cancels the wait.")]
            ///
            /// # Errors
            /// As [`lock_with`](Self::lock_with).
            pub fn $lock<'a>(
                &'a self,
                name: &'a str,
            ) -> impl std::future::Future<Output = Result<AsyncLockGuard>> + Send + 'a {
                self.lock_with(name, $with(LockOptions::new()))
            }

            #[doc = concat!("One attempt at the ", $kind, " lock `name`: `None` when it is not to be had now.")]
            ///
            /// # Errors
            /// As [`lock_with`](Self::lock_with).
            pub fn $try<'a>(
                &'a self,
                name: &'a str,
            ) -> impl std::future::Future<Output = Result<Option<AsyncLockGuard>>> + Send + 'a {
                self.take(name, &$with(LockOptions::new()), || Some(Instant::now()), Ok)
            }

            #[doc = concat!("The ", $kind, " lock `name`, waiting up to `wait` (counted from the first poll): `None` when the wait ran out.")]
            ///
            /// # Errors
            /// As [`lock_with`](Self::lock_with).
            pub fn $try_for<'a>(
                &'a self,
                name: &'a str,
                wait: Duration,
            ) -> impl std::future::Future<Output = Result<Option<AsyncLockGuard>>> + Send + 'a {
                self.take(
                    name,
                    &$with(LockOptions::new()),
                    move || Some(crate::options::deadline_after(wait)),
                    Ok,
                )
            }

            #[doc = concat!("The ", $kind, " lock `name`, waiting until `deadline`: `None` when it passed.")]
            ///
            /// # Errors
            /// As [`lock_with`](Self::lock_with).
            pub fn $try_until<'a>(
                &'a self,
                name: &'a str,
                deadline: Instant,
            ) -> impl std::future::Future<Output = Result<Option<AsyncLockGuard>>> + Send + 'a {
                self.take(name, &$with(LockOptions::new()), move || Some(deadline), Ok)
            }
        }
    };
}

kind_rungs!(
    "fair",
    LockOptions::fair,
    [fair_lock, try_fair_lock, try_fair_lock_for, try_fair_lock_until],
    /// Takes the fair lock `name`: waits in line behind everyone — in this
    /// process or any other — who asked before (see [`LockOptions::fair`]).
    /// A release grants the lock to the next leasehold waiter in the queue
    /// directly; Redisson's waiters in the same queue are woken with
    /// Redisson's message instead.
);

kind_rungs!(
    "read",
    LockOptions::read,
    [read_lock, try_read_lock, try_read_lock_for, try_read_lock_until],
    /// Takes the read side of the read/write lock `name`: any number of
    /// threads and processes may read at once; it waits while someone writes
    /// — and while a writer waits, so that readers cannot starve writers
    /// (a thread that already reads, or writes, re-enters at once). The
    /// guard is renewed by the watchdog and reports a lost lease like any
    /// other; dropping it releases this read hold. A writer may also read
    /// (and keep reading after it stops writing); a reader asking to write is
    /// refused ([`Error::UpgradeWouldDeadlock`](crate::Error::UpgradeWouldDeadlock))
    /// instead of hanging.
    ///
    /// The layout is Redisson's `RReadWriteLock` (see
    /// [`write_lock`](Self::write_lock)), so Java services using Redisson
    /// share the lock.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), leasehold::Error> {
    /// let client = leasehold::LockClient::new("redis://127.0.0.1/")?;
    /// {
    ///     let _r1 = client.read_lock("catalog")?;
    ///     let _r2 = client.read_lock("catalog")?; // readers share
    /// }
    /// let w = client.write_lock("catalog")?;       // alone
    /// let r = client.read_lock("catalog")?;        // a writer may also read
    /// drop(w);                                     // … and keeps reading
    /// # drop(r);
    /// # Ok(()) }
    /// ```
);

kind_rungs!(
    "write",
    LockOptions::write,
    [write_lock, try_write_lock, try_write_lock_for, try_write_lock_until],
    /// Takes the write side of the read/write lock `name`: waits until no
    /// one else reads or writes, alone then. While it waits, new readers
    /// wait behind it (readers holding already finish first). Reentrant;
    /// the writer may also take the read lock (a downgrade: release the
    /// write guard and keep reading). The reverse — taking the write lock
    /// while this thread holds the read lock — would wait for itself, and
    /// is refused with
    /// [`Error::UpgradeWouldDeadlock`](crate::Error::UpgradeWouldDeadlock).
);
