//! Where one Redis reply ends in bytes read so far ([`reply_len`]): what
//! the tokio transport (`runtime`) needs to know before it hands the reply
//! to the `redis` crate's parser — and the two replies of the uncontended
//! lock path, an integer and nil, read without it ([`simple`]: the
//! parser's three allocations a reply were a tenth of a pair's
//! allocations).

/// Where the reply that starts at `at` in `buf` ends, once `buf` holds all
/// of it (RESP2, as our connections speak: a line, a bulk string's line and
/// body, an array's line and elements).
pub(super) fn reply_len(buf: &[u8], at: usize) -> Option<usize> {
    let line = at + buf.get(at..)?.windows(2).position(|w| w == b"\r\n")? + 2;
    let n = || {
        std::str::from_utf8(&buf[at + 1..line - 2])
            .ok()?
            .parse::<i64>()
            .ok()
    };
    match buf[at] {
        b'$' => match usize::try_from(n()?) {
            Ok(len) => Some(line + len + 2).filter(|end| *end <= buf.len()),
            Err(_) => Some(line), // nil
        },
        b'*' => (0..n()?.max(0)).try_fold(line, |at, _| reply_len(buf, at)),
        _ => Some(line),
    }
}

/// A whole reply that is an integer (`:<n>`) or nil (`$-1`), as the
/// `redis` crate's parser reads it; `None` for any other (the parser's).
pub(super) fn simple(reply: &[u8]) -> Option<redis::Value> {
    match reply {
        b"$-1\r\n" => Some(redis::Value::Nil),
        [b':', n @ .., b'\r', b'\n'] => {
            let n = std::str::from_utf8(n).ok()?.parse().ok()?;
            Some(redis::Value::Int(n))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::{reply_len, simple};

    /// `reply_len` finds where `reply` ends, whole or followed by another,
    /// and nothing in any part of it; the `redis` crate parses it.
    fn ends_where_it_ends(reply: &[u8]) {
        let shown = String::from_utf8_lossy(reply);
        let parsed = redis::parse_redis_value(reply);
        assert!(parsed.is_ok(), "{shown:?}: {parsed:?}");
        if let Some(value) = simple(reply) {
            assert_eq!(Some(&value), parsed.as_ref().ok(), "{shown:?}");
        }
        assert_eq!(reply_len(reply, 0), Some(reply.len()), "{shown:?}");
        for cut in 0..reply.len() {
            assert_eq!(reply_len(&reply[..cut], 0), None, "{shown:?} cut at {cut}");
        }
        let two = [reply, b":7\r\n".as_slice()].concat();
        assert_eq!(
            reply_len(&two, 0),
            Some(reply.len()),
            "{shown:?} then another"
        );
    }

    #[test]
    fn a_reply_ends_where_its_last_part_ends_and_not_before() {
        let replies: [&[u8]; 9] = [
            b":1\r\n",
            b"$-1\r\n",
            b"$5\r\nhe\r\no\r\n",
            b"-NOSCRIPT No matching script\r\n",
            b"*2\r\n$1\r\na\r\n:-2\r\n",
            b"*-1\r\n",
            b"*0\r\n",
            b"*2\r\n*1\r\n+OK\r\n$0\r\n\r\n",
            b"+OK\r\n",
        ];
        replies.into_iter().for_each(ends_where_it_ends);
        assert_eq!(simple(b":-12\r\n"), Some(redis::Value::Int(-12)));
        assert_eq!(simple(b"$-1\r\n"), Some(redis::Value::Nil));
        assert_eq!(simple(b"+OK\r\n"), None, "the parser's");
        assert_eq!(simple(b":x\r\n"), None, "the parser's (an error)");
    }

    /// Against the `redis` crate's parser on random RESP2 replies: nested
    /// arrays, nil and empty arrays and bulk strings, bulk strings holding
    /// `\r\n`, negative integers, errors — whole, cut anywhere, and
    /// followed by another.
    #[test]
    fn reply_len_agrees_with_the_parser_on_random_resp2() {
        let mut seed = 0x9e3779b97f4a7c15u64;
        let mut rand = move |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        fn gen(rand: &mut impl FnMut(u64) -> u64, depth: u32, out: &mut Vec<u8>) {
            match rand(if depth > 3 { 6 } else { 8 }) {
                0 => out.extend_from_slice(format!(":{}\r\n", rand(1000) as i64 - 500).as_bytes()),
                1 => out.extend_from_slice(b"+OK\r\n"),
                2 => out.extend_from_slice(b"-ERR some error\r\n"),
                3 => out.extend_from_slice(b"$-1\r\n"),
                4 | 5 => {
                    let len = rand(20) as usize;
                    let body: Vec<u8> =
                        (0..len).map(|_| b"ab\r\n*$:-+"[rand(9) as usize]).collect();
                    out.extend_from_slice(format!("${len}\r\n").as_bytes());
                    out.extend_from_slice(&body);
                    out.extend_from_slice(b"\r\n");
                }
                6 => out.extend_from_slice(if rand(2) == 0 { b"*-1\r\n" } else { b"*0\r\n" }),
                _ => {
                    let n = rand(5);
                    out.extend_from_slice(format!("*{n}\r\n").as_bytes());
                    for _ in 0..n {
                        gen(rand, depth + 1, out);
                    }
                }
            }
        }
        for _ in 0..3000 {
            let mut reply = Vec::new();
            gen(&mut rand, 0, &mut reply);
            ends_where_it_ends(&reply);
        }
    }
}
