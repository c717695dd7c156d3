//! A TCP fault proxy between a client and a test `redis-server`, switchable
//! at run time: forward, delay every chunk by N ms, blackhole (bytes vanish,
//! connections stay open), answer every command with one error reply (a
//! server that is loading its dataset, say), cut the reply to a request
//! naming a given key (it ran, then the connection closed), hold the connection whose
//! request names a given key (a stall just there), or reset every open
//! connection.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

const FORWARD: u8 = 0;
const DELAY: u8 = 1;
const BLACKHOLE: u8 = 2;
const REFUSE: u8 = 3;
const CUT_MATCHING: u8 = 4;
const HOLD_MATCHING: u8 = 5;

/// What the proxy does with the bytes it carries.
#[derive(Debug, Clone, Copy)]
pub enum Fault {
    Forward,
    /// Each chunk, in both directions, waits this long before it is passed on.
    Delay(Duration),
    /// Bytes are read and dropped; the connections stay open (a partition).
    Blackhole,
    /// Every command a client sends is answered by the proxy with this error
    /// (e.g. `LOADING …`) and never reaches the server; what the server
    /// sends on its own (pub/sub messages) still arrives.
    Refuse(&'static str),
    /// Commands reach the server; the reply to the next request holding
    /// these bytes (a key's name, say) is held for the duration, then
    /// dropped and that connection closed (the command ran, then the server
    /// closed the connection before its reply left: a `CLIENT KILL`, a
    /// crash). Then forward again.
    CutReplyTo(&'static str, Duration),
    /// A request holding these bytes (a key's name, say) and everything
    /// after it on its connection vanish; other connections, and that one
    /// before it, pass (a server that stalls at that moment).
    HoldMatching(&'static str),
}

struct State {
    mode: AtomicU8,
    delay_ms: AtomicU64,
    refusal: Mutex<&'static str>,
    held: Mutex<&'static str>,
    stop: AtomicBool,
    conns: Mutex<Vec<TcpStream>>,
}

/// The proxy; stops (and closes every connection) on drop.
pub struct FaultProxy {
    port: u16,
    state: Arc<State>,
}

impl FaultProxy {
    /// Listens on a free loopback port and forwards to `127.0.0.1:upstream`.
    pub fn start(upstream: u16) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the proxy");
        let port = listener.local_addr().unwrap().port();
        listener.set_nonblocking(true).unwrap();
        let state = Arc::new(State {
            mode: AtomicU8::new(FORWARD),
            delay_ms: AtomicU64::new(0),
            refusal: Mutex::new(""),
            held: Mutex::new(""),
            stop: AtomicBool::new(false),
            conns: Mutex::new(Vec::new()),
        });
        let st = Arc::clone(&state);
        thread::spawn(move || {
            while !st.stop.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((client, _)) => {
                        client.set_nonblocking(false).unwrap();
                        let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)) else {
                            let _ = client.shutdown(Shutdown::Both);
                            continue;
                        };
                        {
                            let mut conns = st.conns.lock().unwrap();
                            conns.push(client.try_clone().unwrap());
                            conns.push(server.try_clone().unwrap());
                        }
                        let armed = Arc::new(AtomicBool::new(false));
                        pump(
                            &st,
                            client.try_clone().unwrap(),
                            server.try_clone().unwrap(),
                            Some(client.try_clone().unwrap()),
                            Arc::clone(&armed),
                        );
                        pump(&st, server, client, None, armed);
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {
                        thread::sleep(Duration::from_millis(5));
                    }
                    Err(_) => break,
                }
            }
        });
        FaultProxy { port, state }
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:<proxy port>/`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    pub fn set(&self, fault: Fault) {
        let (mode, delay) = match fault {
            Fault::Forward => (FORWARD, 0),
            Fault::Delay(d) => (DELAY, d.as_millis() as u64),
            Fault::Blackhole => (BLACKHOLE, 0),
            Fault::Refuse(error) => {
                *self.state.refusal.lock().unwrap() = error;
                (REFUSE, 0)
            }
            Fault::CutReplyTo(bytes, after) => {
                *self.state.held.lock().unwrap() = bytes;
                (CUT_MATCHING, after.as_millis() as u64)
            }
            Fault::HoldMatching(bytes) => {
                *self.state.held.lock().unwrap() = bytes;
                (HOLD_MATCHING, 0)
            }
        };
        self.state.delay_ms.store(delay, Ordering::Relaxed);
        self.state.mode.store(mode, Ordering::Relaxed);
    }

    /// Closes every connection open now (new ones are accepted as usual).
    pub fn reset_all(&self) {
        for c in self.state.conns.lock().unwrap().drain(..) {
            let _ = c.shutdown(Shutdown::Both);
        }
    }

    /// Connections accepted and still tracked (two sockets each).
    pub fn connections(&self) -> usize {
        self.state.conns.lock().unwrap().len() / 2
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.state.stop.store(true, Ordering::Relaxed);
        self.reset_all();
    }
}

/// Copies `from` → `to` on its own thread, applying the current fault;
/// `back` is the client's socket when `from` is the client (where refusals
/// are answered); `armed`, shared by the connection's two pumps, is set
/// when its next reply is to be cut.
fn pump(
    state: &Arc<State>,
    mut from: TcpStream,
    mut to: TcpStream,
    mut back: Option<TcpStream>,
    armed: Arc<AtomicBool>,
) {
    let st = Arc::clone(state);
    thread::spawn(move || {
        let mut buf = [0u8; 16 * 1024];
        let mut held = false;
        loop {
            let n = match from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            if st.stop.load(Ordering::Relaxed) {
                break;
            }
            if held {
                continue;
            }
            if back.is_none() && armed.swap(false, Ordering::SeqCst) {
                // From the server: the reply to cut, after the hold.
                thread::sleep(Duration::from_millis(st.delay_ms.load(Ordering::Relaxed)));
                break;
            }
            let matches = || {
                let pattern = *st.held.lock().unwrap();
                let chunk = &buf[..n];
                chunk
                    .windows(pattern.len())
                    .any(|w| w == pattern.as_bytes())
            };
            match st.mode.load(Ordering::Relaxed) {
                BLACKHOLE => continue,
                HOLD_MATCHING if back.is_some() && matches() => {
                    held = true;
                    continue;
                }
                CUT_MATCHING if back.is_some() && matches() => {
                    // Once: this request's reply is cut.
                    let cut = st.mode.compare_exchange(
                        CUT_MATCHING,
                        FORWARD,
                        Ordering::SeqCst,
                        Ordering::SeqCst,
                    );
                    armed.store(cut.is_ok(), Ordering::SeqCst);
                }
                REFUSE => {
                    if let Some(back) = back.as_mut() {
                        let error = *st.refusal.lock().unwrap();
                        let reply = format!("-{error}\r\n").repeat(commands_in(&buf[..n]));
                        if back.write_all(reply.as_bytes()).is_err() {
                            break;
                        }
                        continue;
                    }
                }
                DELAY => thread::sleep(Duration::from_millis(st.delay_ms.load(Ordering::Relaxed))),
                _ => {}
            }
            if to.write_all(&buf[..n]).is_err() {
                break;
            }
        }
        let _ = to.shutdown(Shutdown::Both);
        let _ = from.shutdown(Shutdown::Both);
    });
}

/// How many RESP commands (`*<n>` arrays of bulk strings) a chunk from a
/// client holds; the clients in the tests write whole commands.
fn commands_in(mut chunk: &[u8]) -> usize {
    fn line(chunk: &[u8]) -> Option<(&[u8], &[u8])> {
        let end = chunk.windows(2).position(|w| w == b"\r\n")?;
        Some((&chunk[..end], &chunk[end + 2..]))
    }
    let mut count = 0;
    while let Some((head, rest)) = line(chunk) {
        let Some(n) = head
            .strip_prefix(b"*")
            .and_then(|n| std::str::from_utf8(n).ok()?.parse::<usize>().ok())
        else {
            break;
        };
        chunk = rest;
        for _ in 0..n {
            let Some((len, rest)) = line(chunk) else {
                return count + 1;
            };
            let len: usize = std::str::from_utf8(&len[1..])
                .ok()
                .and_then(|l| l.parse().ok())
                .unwrap_or(0);
            chunk = rest.get(len + 2..).unwrap_or(&[]);
        }
        count += 1;
    }
    count.max(1)
}
