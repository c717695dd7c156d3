//! A script call written once, straight in the Redis protocol (RESP: `*<n>`,
//! then `$<len>` and the bytes of each argument): what every transport
//! sends for a [`Call`](super::Call). The `redis` crate's `Cmd` keeps the
//! arguments in a buffer of its own and writes them out again into a second
//! one when the command is sent (with their lengths formatted a second
//! time): on the uncontended lock path that was the client's largest
//! single cost after the reply parser (about 4,500 instructions a lock +
//! unlock pair). Arguments are written by the `redis` crate's own
//! [`ToRedisArgs`] impls, as into a `Cmd`; a unit test checks the bytes
//! against `Cmd::get_packed_command` for the same arguments.

use std::io;

use redis::{RedisWrite, ToRedisArgs};

/// Room before the arguments for the count (`*` + up to 20 digits + CRLF),
/// written right-aligned against them once they are all in.
const HEAD: usize = 24;

/// A command being written, then written ([`bytes`](Self::bytes)).
#[derive(Debug, Clone)]
pub(crate) struct Packed {
    buf: Vec<u8>,
    /// Where the command begins in `buf` once finished (`HEAD` before).
    start: usize,
    args: usize,
    /// Where the argument a writer is writing began, while it writes: its
    /// bytes have no length before them until the writer is dropped. A
    /// writer never dropped (leaked) leaves them out of the command rather
    /// than sent as protocol of their own.
    open: Option<usize>,
}

impl Packed {
    /// A command of `args` (each written as [`ToRedisArgs`] writes it into
    /// a `Cmd`), `capacity` bytes of arguments sized at once.
    pub(crate) fn new(capacity: usize, args: impl ToRedisArgs) -> Packed {
        let mut buf = Vec::with_capacity(HEAD + capacity);
        buf.resize(HEAD, 0);
        let mut packed = Packed {
            buf,
            start: HEAD,
            args: 0,
            open: None,
        };
        args.write_redis_args(&mut packed);
        packed.finish();
        packed
    }

    /// The command as sent.
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.buf[self.start..]
    }

    /// Drops the bytes of an argument whose writer was never dropped.
    fn close(&mut self) {
        if let Some(at) = self.open.take() {
            self.buf.truncate(at);
        }
    }

    /// Writes the count before the arguments.
    fn finish(&mut self) {
        self.close();
        let (head, len) = head(b'*', self.args);
        self.start = HEAD - len;
        self.buf[self.start..HEAD].copy_from_slice(&head[..len]);
    }
}

/// A count or a length as RESP puts it before what it counts: `mark`
/// (`*` or `$`), `n` in decimal, CRLF — and how many bytes that is.
fn head(mark: u8, n: usize) -> ([u8; HEAD], usize) {
    let mut digits = [0u8; 20];
    let n = decimal(n as u64, &mut digits);
    let mut head = [0u8; HEAD];
    head[0] = mark;
    head[1..=n.len()].copy_from_slice(n);
    head[n.len() + 1..n.len() + 3].copy_from_slice(b"\r\n");
    (head, n.len() + 3)
}

/// `n` in decimal, in `digits` (no allocation, no formatting machinery:
/// the lock path writes a few a call).
pub(crate) fn decimal(mut n: u64, digits: &mut [u8; 20]) -> &[u8] {
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return &digits[i..];
        }
    }
}

impl RedisWrite for Packed {
    fn write_arg(&mut self, arg: &[u8]) {
        self.close();
        let (head, len) = head(b'$', arg.len());
        self.buf.extend_from_slice(&head[..len]);
        self.buf.extend_from_slice(arg);
        self.buf.extend_from_slice(b"\r\n");
        self.args += 1;
    }

    fn writer_for_next_arg(&mut self) -> impl io::Write + '_ {
        self.close();
        let at = self.buf.len();
        self.open = Some(at);
        ArgWriter { packed: self, at }
    }
}

/// One argument written in parts (a companion name: `names::Companion`):
/// its bytes go at the end of the command, and its length before them when
/// it is complete (moved up by the few bytes that takes).
struct ArgWriter<'p> {
    packed: &'p mut Packed,
    at: usize,
}

impl io::Write for ArgWriter<'_> {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.packed.buf.extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Drop for ArgWriter<'_> {
    fn drop(&mut self) {
        let buf = &mut self.packed.buf;
        let len = buf.len() - self.at;
        let (head, n) = head(b'$', len);
        buf.resize(buf.len() + n, 0);
        buf.copy_within(self.at..self.at + len, self.at + n);
        buf[self.at..self.at + n].copy_from_slice(&head[..n]);
        buf.extend_from_slice(b"\r\n");
        self.packed.args += 1;
        self.packed.open = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An argument written in parts, as a companion name is.
    struct Parts(&'static [&'static str]);

    impl ToRedisArgs for Parts {
        fn write_redis_args<W: ?Sized + RedisWrite>(&self, out: &mut W) {
            use std::io::Write;
            let mut arg = out.writer_for_next_arg();
            for part in self.0 {
                arg.write_all(part.as_bytes()).unwrap();
            }
        }
    }

    fn cmd_of(args: impl ToRedisArgs) -> Vec<u8> {
        let mut cmd = redis::Cmd::new();
        cmd.arg(args);
        cmd.get_packed_command()
    }

    #[test]
    fn the_bytes_are_what_the_redis_crate_sends_for_the_same_arguments() {
        let long = "k".repeat(1000);
        let cases: Vec<Vec<u8>> = vec![
            Packed::new(0, "PING").bytes().to_vec(),
            Packed::new(8, ("EVALSHA", "abc", 2usize, "key", ""))
                .bytes()
                .to_vec(),
            Packed::new(4, (u64::MAX, -1i64, 0u32, long.as_str()))
                .bytes()
                .to_vec(),
        ];
        let want = [
            cmd_of("PING"),
            cmd_of(("EVALSHA", "abc", 2usize, "key", "")),
            cmd_of((u64::MAX, -1i64, 0u32, long.clone())),
        ];
        for (got, want) in cases.iter().zip(want) {
            assert_eq!(String::from_utf8_lossy(got), String::from_utf8_lossy(&want));
        }
        // Ten and more arguments (a two-digit count); parts, empty parts,
        // and a part-written argument of a hundred bytes and more.
        let many: Vec<String> = (0..12).map(|i| format!("arg{i}")).collect();
        assert_eq!(Packed::new(0, &many).bytes(), &cmd_of(&many)[..]);
        let parts = Parts(&["a:", "", "{", "x", "}", ":b"]);
        let mut cmd = redis::Cmd::new();
        cmd.arg("X")
            .arg(&parts)
            .arg(Parts(&[]))
            .arg(Parts(&["y"; 150]));
        let got = Packed::new(0, ("X", &parts, Parts(&[]), Parts(&["y"; 150])));
        assert_eq!(got.bytes(), &cmd.get_packed_command()[..]);
    }

    /// An argument whose writer is leaked: written in part, never closed.
    struct Leaked(&'static str);

    impl ToRedisArgs for Leaked {
        fn write_redis_args<W: ?Sized + RedisWrite>(&self, out: &mut W) {
            use std::io::Write;
            let mut arg = out.writer_for_next_arg();
            arg.write_all(self.0.as_bytes()).unwrap();
            std::mem::forget(arg);
        }
    }

    #[test]
    fn a_leaked_writers_bytes_are_left_out_never_sent_as_protocol() {
        let inject = "\r\n*1\r\n$8\r\nFLUSHALL\r\n";
        for got in [
            Packed::new(0, ("GET", "k", Leaked(inject))),
            Packed::new(0, ("GET", Leaked(inject), "k")),
        ] {
            assert_eq!(got.bytes(), &cmd_of(("GET", "k"))[..]);
        }
    }
}
