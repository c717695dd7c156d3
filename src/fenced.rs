//! A fenced resource: a value in Redis that only accepts writes carrying a
//! fencing token at least as new as the newest it has seen.

use redis::{ConnectionLike, Script};

use crate::error::{Error, Result};

/// Writes only if the caller's token is not older than the newest one seen.
/// The same holder writes more than once with its token, so an equal token
/// is accepted; a holder whose lease ran out while it was paused carries a
/// smaller token than the one who took over, and is refused.
const WRITE: &str = r#"
local seen = tonumber(redis.call('hget', KEYS[1], 'fence') or '0')
if tonumber(ARGV[1]) < seen then
    return 0
end
redis.call('hset', KEYS[1], 'fence', ARGV[1], 'value', ARGV[2])
return 1
"#;

/// A value in Redis guarded by fencing tokens — the pattern to copy into the
/// store you protect with a [fenced lock](crate::LockOptions::fenced).
///
/// A lease lock alone cannot stop a holder that was paused (GC, swap,
/// `SIGSTOP`) past its lease from writing after someone else took the lock.
/// The resource can: it remembers the newest token it has seen and refuses
/// writes with an older one. Here the resource is a Redis hash
/// `{fence, value}` and the check is one Lua script; your database can do the
/// same with a `WHERE fence <= $token` condition.
///
/// ```no_run
/// # fn main() -> Result<(), leasehold::Error> {
/// use leasehold::{FencedStore, LockClient, LockOptions};
///
/// let client = LockClient::new("redis://127.0.0.1/")?;
/// let mut con = redis::Client::open("redis://127.0.0.1/")
///     .and_then(|c| c.get_connection())
///     .map_err(leasehold::Error::from)?;
/// let store = FencedStore::new("config:current");
///
/// let guard = client.lock_with("config", LockOptions::new().fenced())?;
/// let token = guard.fence().expect("a fenced lock has a token");
/// if !store.write(&mut con, token, "v42")? {
///     // Someone with a newer token wrote first: our lock was lost.
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct FencedStore {
    key: String,
    script: Script,
}

impl FencedStore {
    /// A fenced value at `key` (a hash with fields `fence` and `value`).
    pub fn new(key: impl Into<String>) -> Self {
        FencedStore {
            key: key.into(),
            script: Script::new(WRITE),
        }
    }

    /// The Redis key of the value.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// Writes `value` if `token` is not older than the newest token seen;
    /// returns whether it was written.
    ///
    /// # Errors
    /// [`Error`] when Redis fails or the key holds another type.
    pub fn write(&self, con: &mut dyn ConnectionLike, token: u64, value: &str) -> Result<bool> {
        let written: i64 = self
            .script
            .key(&self.key)
            .arg(token)
            .arg(value)
            .invoke(con)
            .map_err(|e| Error::from_redis(e, &self.key))?;
        Ok(written == 1)
    }

    /// The newest token seen and the value written with it, if any.
    ///
    /// # Errors
    /// [`Error`] when Redis fails or the key holds another type.
    pub fn read(&self, con: &mut dyn ConnectionLike) -> Result<Option<(u64, String)>> {
        let (fence, value): (Option<u64>, Option<String>) = self
            .read_cmd()
            .query(con)
            .map_err(|e| Error::from_redis(e, &self.key))?;
        Ok(fence.zip(value))
    }

    /// [`write`](Self::write) for a task, on an async connection of the
    /// `redis` crate (feature `tokio`, which gives the re-exported
    /// [`redis`](crate::redis) its tokio connections) — as the `redis`
    /// crate pairs `invoke` with `invoke_async`:
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), leasehold::Error> {
    /// use leasehold::{AsyncLockClient, FencedStore, LockOptions};
    ///
    /// let client = AsyncLockClient::connect("redis://127.0.0.1/").await?;
    /// let mut con = leasehold::redis::Client::open("redis://127.0.0.1/")?
    ///     .get_multiplexed_async_connection()
    ///     .await?;
    /// let store = FencedStore::new("config:current");
    /// let guard = client.lock_with("config", LockOptions::new().fenced()).await?;
    /// let token = guard.fence().expect("a fenced lock has a token");
    /// if !store.write_async(&mut con, token, "v42").await? {
    ///     // Someone with a newer token wrote first: our lock was lost.
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`write`](Self::write).
    #[cfg(feature = "tokio")]
    pub async fn write_async(
        &self,
        con: &mut impl redis::aio::ConnectionLike,
        token: u64,
        value: &str,
    ) -> Result<bool> {
        let written: i64 = (self.script.key(&self.key).arg(token).arg(value))
            .invoke_async(con)
            .await
            .map_err(|e| Error::from_redis(e, &self.key))?;
        Ok(written == 1)
    }

    /// [`read`](Self::read) for a task, on an async connection (feature
    /// `tokio`; see [`write_async`](Self::write_async)).
    ///
    /// # Errors
    /// As [`read`](Self::read).
    #[cfg(feature = "tokio")]
    pub async fn read_async(
        &self,
        con: &mut impl redis::aio::ConnectionLike,
    ) -> Result<Option<(u64, String)>> {
        let (fence, value): (Option<u64>, Option<String>) = self
            .read_cmd()
            .query_async(con)
            .await
            .map_err(|e| Error::from_redis(e, &self.key))?;
        Ok(fence.zip(value))
    }

    /// `HMGET <key> fence value`: what both reads send.
    fn read_cmd(&self) -> redis::Cmd {
        let mut cmd = redis::cmd("HMGET");
        cmd.arg(&self.key).arg("fence").arg("value");
        cmd
    }
}
