//! Where a cross-process handoff's time goes (`BENCH_ONLY=split`): two
//! clients, a thread each, hand one lock back and forth through the line
//! (each waits in line while the other holds, then is granted it), and a
//! third connection subscribed to the grant channels times each grant
//! message. Per handoff: the holder's release call (its round trip), from
//! the start of the release to a subscriber hearing the grant (the release
//! script's Redis work and the trip out), and from there to the waiter in
//! its critical section (its subscriber thread reads the grant and wakes
//! it). The probe is one more process thread to wake, so the parts are a
//! guide, not an exact sum; run pinned (`taskset -c 0`) as the table's
//! pinned mode is.

use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};

use leasehold::LockClient;

/// The medians of one run, µs.
pub(crate) struct Split {
    pub(crate) handoffs: usize,
    pub(crate) release_call: f64,
    pub(crate) to_grant_heard: f64,
    pub(crate) heard_to_section: f64,
    pub(crate) total: f64,
}

/// `n` handoffs of lock `split` between two clients on `url`.
pub(crate) fn measure(url: &str, n: usize) -> Split {
    let base = Instant::now();
    let now = move || base.elapsed().as_nanos() as i64;
    let heard = Arc::new(Mutex::new(Vec::<i64>::new()));
    {
        let (heard, url) = (Arc::clone(&heard), url.to_owned());
        let mut con = redis::Client::open(url.as_str())
            .unwrap()
            .get_connection()
            .unwrap();
        // Detached: it ends with the process (the bench's last step).
        std::thread::spawn(move || {
            let mut sub = con.as_pubsub();
            sub.psubscribe("leasehold_grant:{split}:*").unwrap();
            while sub.get_message().is_ok() {
                heard.lock().unwrap().push(now());
            }
        });
    }
    std::thread::sleep(Duration::from_millis(200));
    // (release started, release returned) by the holder; entered by the
    // waiter; one of each per handoff, in order.
    let released = Arc::new(Mutex::new(Vec::<(i64, i64)>::new()));
    let entered = Arc::new(Mutex::new(Vec::<i64>::new()));
    let barrier = Arc::new(Barrier::new(2));
    let threads: Vec<_> = (0..2usize)
        .map(|me| {
            let (released, entered, barrier) = (
                Arc::clone(&released),
                Arc::clone(&entered),
                Arc::clone(&barrier),
            );
            let url = url.to_owned();
            std::thread::spawn(move || {
                let client = LockClient::new(url.as_str()).unwrap();
                let mut con = redis::Client::open(url.as_str())
                    .unwrap()
                    .get_connection()
                    .unwrap();
                let mut held = (me == 0).then(|| client.lock("split").unwrap());
                barrier.wait();
                for round in 0..n {
                    if round % 2 == me {
                        // Release once the other waits in line.
                        while redis::cmd("LLEN")
                            .arg("leasehold_line:{split}")
                            .query::<usize>(&mut con)
                            .unwrap()
                            == 0
                        {
                            std::thread::sleep(Duration::from_micros(50));
                        }
                        std::thread::sleep(Duration::from_micros(300));
                        let start = now();
                        drop(held.take());
                        released.lock().unwrap().push((start, now()));
                    } else {
                        held = Some(client.lock("split").unwrap());
                        entered.lock().unwrap().push(now());
                    }
                    barrier.wait();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let (released, entered) = (released.lock().unwrap(), entered.lock().unwrap());
    let heard = heard.lock().unwrap();
    let (mut call, mut out, mut wake, mut total) = (vec![], vec![], vec![], vec![]);
    for (&(start, done), &inside) in released.iter().zip(entered.iter()) {
        call.push(done - start);
        total.push(inside - start);
        if let Some(&h) = heard.iter().find(|&&h| h >= start && h <= inside) {
            out.push(h - start);
            wake.push(inside - h);
        }
    }
    let p50 = |mut v: Vec<i64>| {
        v.sort_unstable();
        v.get(v.len() / 2).map_or(f64::NAN, |&x| x as f64 / 1e3)
    };
    Split {
        handoffs: total.len(),
        release_call: p50(call),
        to_grant_heard: p50(out),
        heard_to_section: p50(wake),
        total: p50(total),
    }
}
