//! W5: read-mostly sections — the read/write lock against the plain lock on
//! the same work.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use leasehold::LockClient;

use crate::measure::*;

/// W5: read-mostly sections on one name — 8 threads of 2 clients, every
/// 10th section of a thread a write, the rest reads, each waiting ~100 µs
/// (sleeping, as on I/O) inside.
/// With `exclusive` every section takes the plain lock instead (the floor a
/// read/write lock has to beat). Returns (sections/s, most readers seen
/// inside at once, client commands per section).
pub(crate) fn w5(url: &str, secs: f64, exclusive: bool) -> (f64, usize, f64) {
    use std::sync::atomic::AtomicUsize;
    let clients: Vec<LockClient> = (0..2).map(|_| LockClient::new(url).unwrap()).collect();
    let name = if exclusive { "w5-plain" } else { "w5-rw" };
    let inside = Arc::new(AtomicUsize::new(0));
    let writing = Arc::new(AtomicBool::new(false));
    let most = Arc::new(AtomicUsize::new(0));
    let before = commandstats(url);
    let start = Instant::now() + Duration::from_millis(100);
    let until = start + Duration::from_secs_f64(secs);
    let handles: Vec<_> = (0..8)
        .map(|t| {
            let c = clients[t % 2].clone();
            let (inside, writing, most) = (inside.clone(), writing.clone(), most.clone());
            thread::spawn(move || {
                while Instant::now() < start {
                    thread::sleep(Duration::from_millis(1));
                }
                let mut done = 0u64;
                let mut i = t;
                while Instant::now() < until {
                    let write = i % 10 == 0;
                    i += 1;
                    let g = if exclusive {
                        c.lock(name)
                    } else if write {
                        c.write_lock(name)
                    } else {
                        c.read_lock(name)
                    }
                    .unwrap();
                    let n = inside.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(n, Ordering::SeqCst);
                    if write || exclusive {
                        assert!(
                            n == 1 && !writing.swap(true, Ordering::SeqCst),
                            "a writer was not alone"
                        );
                    } else {
                        assert!(!writing.load(Ordering::SeqCst), "a reader beside a writer");
                    }
                    // The section waits on something (a read of the
                    // guarded resource), as most critical sections do.
                    thread::sleep(Duration::from_micros(100));
                    if write || exclusive {
                        writing.store(false, Ordering::SeqCst);
                    }
                    inside.fetch_sub(1, Ordering::SeqCst);
                    g.unlock().unwrap();
                    done += 1;
                }
                done
            })
        })
        .collect();
    let done: u64 = handles.into_iter().map(|h| h.join().unwrap()).sum();
    let (client_cmds, _, _) = command_delta(&before, &commandstats(url), false);
    (
        done as f64 / secs,
        most.load(Ordering::SeqCst),
        client_cmds as f64 / done.max(1) as f64,
    )
}
