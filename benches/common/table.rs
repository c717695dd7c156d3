//! The performance table of one mode, as markdown, from every workload's
//! figures.

use crate::contend::Contended;
use crate::floors::Floors;
use crate::sem::SemFigures;
use crate::tasks::AsyncUncontended;
use crate::uncontended::Uncontended;
use crate::w4::W4;
use std::process::Command;

/// Everything one mode measured.
pub struct Results {
    pub mode: String,
    pub secs: f64,
    pub rounds: usize,
    pub rtt: f64,
    pub redis_version: String,
    pub u: Uncontended,
    pub w2_raw: Contended,
    pub w2_lh: Contended,
    pub w2p_raw: Contended,
    pub w2p_lh: Contended,
    pub w2c_raw: Contended,
    pub w2c_lh: Contended,
    pub a1: AsyncUncontended,
    /// A1 for the other kinds: (kind, figures).
    pub a1_kinds: Vec<(&'static str, AsyncUncontended)>,
    /// W2c measured in the same rounds as A2c (its median round's).
    pub a2c_w2c: Contended,
    pub a2c: Contended,
    pub w2pp_raw: Contended,
    pub w2pp_lh: Contended,
    pub floors: Floors,
    pub w2_fair: Contended,
    pub w2p_fair: Contended,
    pub w5_plain: (f64, usize, f64),
    pub w5_rw: (f64, usize, f64),
    pub w3_raw: f64,
    pub w3_lh: f64,
    pub w4: Option<W4>,
    pub sem: SemFigures,
    /// R1, with the `peers` feature.
    #[cfg(feature = "peers")]
    pub peer: crate::peer::Peer,
}

fn met(ok: bool) -> &'static str {
    if ok {
        "met"
    } else {
        "**missed**"
    }
}

/// The table, one row per figure.
pub fn render(r: &Results) -> String {
    let Results {
        mode,
        secs,
        rounds,
        rtt,
        redis_version,
        u,
        w2_raw,
        w2_lh,
        w2p_raw,
        w2p_lh,
        w2c_raw,
        w2c_lh,
        a1,
        a1_kinds,
        a2c_w2c,
        a2c,
        w2pp_raw,
        w2pp_lh,
        floors,
        w2_fair,
        w2p_fair,
        w5_plain,
        w5_rw,
        w3_raw,
        w3_lh,
        w4,
        sem,
        ..
    } = r;
    let (secs, rounds, rtt, w3_raw, w3_lh) = (*secs, *rounds, *rtt, *w3_raw, *w3_lh);
    let mut t = String::new();
    let date = Command::new("date")
        .arg("+%Y-%m-%d %H:%M %Z")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default();
    t += &format!(
        "### {mode} — {date}, redis {redis_version}, {secs} s per run, W2/W2p/W3 median of {rounds} rounds, loopback PING p50 {rtt:.1} µs\n\n"
    );
    t += "| workload | figure | raw floor | leasehold | ratio | target | |\n";
    t += "|---|---|---:|---:|---:|---|---|\n";
    let mut row = |w: &str,
                   f: &str,
                   raw: String,
                   lh: String,
                   ratio: String,
                   target: &str,
                   ok: Option<bool>| {
        t += &format!(
            "| {w} | {f} | {raw} | {lh} | {ratio} | {target} | {} |\n",
            ok.map(met).unwrap_or("")
        );
    };
    row(
        "W1 uncontended",
        "lock+unlock pairs/s",
        format!("{:.0}", u.raw_rate),
        format!("{:.0}", u.lh_rate),
        format!("{:.2}", u.ratio),
        "≥ 0.90",
        Some(u.ratio >= 0.90),
    );
    row(
        "W1 uncontended",
        "leasehold's scripts alone (plain connection)",
        String::new(),
        String::new(),
        format!("{:.2}", u.protocol_ratio),
        "",
        None,
    );
    row(
        "W1 uncontended",
        "pair latency p50 / p99 µs",
        format!("{:.0} / {:.0}", u.raw_p50, u.raw_p99),
        format!("{:.0} / {:.0}", u.lh_p50, u.lh_p99),
        String::new(),
        "",
        None,
    );
    for (w, raw, lh, procs) in [
        ("W2 8 threads", &w2_raw, &w2_lh, false),
        ("W2p 4 proc × 2 thr", &w2p_raw, &w2p_lh, true),
    ] {
        let ratio = lh.pairs_per_s / raw.pairs_per_s;
        row(
            w,
            "critical sections/s",
            format!("{:.0}", raw.pairs_per_s),
            format!("{:.0}", lh.pairs_per_s),
            format!("{ratio:.2}"),
            if procs { "" } else { "≥ 1.5" },
            (!procs).then_some(ratio >= 1.5),
        );
        let cmd_target = if procs { 4.0 } else { 3.0 };
        row(
            w,
            "client commands / CS (all incl. script calls)",
            format!("{:.1} ({:.1})", raw.client_cmds_per_cs, raw.all_cmds_per_cs),
            format!("{:.2} ({:.1})", lh.client_cmds_per_cs, lh.all_cmds_per_cs),
            String::new(),
            if procs { "≤ 4" } else { "≤ 3" },
            Some(lh.client_cmds_per_cs <= cmd_target),
        );
        let p50_rtt = lh.handoff_p50_us / rtt;
        row(
            w,
            "handoff p50 / p99 µs",
            format!("{:.0} / {:.0}", raw.handoff_p50_us, raw.handoff_p99_us),
            format!("{:.0} / {:.0}", lh.handoff_p50_us, lh.handoff_p99_us),
            format!("p50 = {p50_rtt:.1} RTT"),
            if procs {
                "p50 ≤ 3 RTT, p99 ≤ 1 ms"
            } else {
                "p99 ≤ 0.5 ms"
            },
            Some(if procs {
                p50_rtt <= 3.0 && lh.handoff_p99_us <= 1_000.0
            } else {
                lh.handoff_p99_us <= 500.0
            }),
        );
        if procs {
            row(
                w,
                "of which across processes: p50 / p99 µs",
                format!("{:.0} / {:.0}", raw.cross_p50_us, raw.cross_p99_us),
                format!("{:.0} / {:.0}", lh.cross_p50_us, lh.cross_p99_us),
                format!("p50 = {:.1} RTT", lh.cross_p50_us / rtt),
                "",
                None,
            );
        }
        row(
            w,
            "least / most busy worker vs mean share",
            format!("{:.2} / {:.2}", raw.least_share, raw.most_share),
            format!("{:.2} / {:.2}", lh.least_share, lh.most_share),
            String::new(),
            if procs {
                "every worker gets turns"
            } else {
                "least ≥ 0.50"
            },
            Some(if procs {
                lh.shares.iter().all(|&s| s > 0)
            } else {
                lh.least_share >= 0.5
            }),
        );
        row(
            w,
            "turns back to the same worker",
            format!("{:.0} %", raw.same_worker * 100.0),
            format!("{:.0} %", lh.same_worker * 100.0),
            String::new(),
            "",
            None,
        );
        row(
            w,
            "turns that were in-process handoffs",
            String::new(),
            format!("{:.0} %", lh.in_process * 100.0),
            String::new(),
            "",
            None,
        );
        if procs {
            row(
                w,
                "turns per worker",
                format!("{:?}", raw.shares),
                format!("{:?}", lh.shares),
                String::new(),
                "",
                None,
            );
        }
    }
    // One client per contender (issue 13's targets): every handoff is
    // between clients, as between processes.
    for (w, raw, lh) in [
        ("W2c 8 threads, a client each", w2c_raw, w2c_lh),
        ("W2P 8 proc × 1 thr", w2pp_raw, w2pp_lh),
    ] {
        let ratio = lh.pairs_per_s / raw.pairs_per_s;
        row(
            w,
            "critical sections/s",
            format!("{:.0}", raw.pairs_per_s),
            format!("{:.0}", lh.pairs_per_s),
            format!("{ratio:.2}"),
            "≥ 1.5",
            Some(ratio >= 1.5),
        );
        row(
            w,
            "client commands / CS (all incl. script calls)",
            format!("{:.1} ({:.1})", raw.client_cmds_per_cs, raw.all_cmds_per_cs),
            format!("{:.2} ({:.1})", lh.client_cmds_per_cs, lh.all_cmds_per_cs),
            String::new(),
            "≤ 3",
            Some(lh.client_cmds_per_cs <= 3.0),
        );
        // Redis's cost per CS, which should stay below the floor's.
        let mut below_floor = |figure: &str, raw: f64, lh: f64| {
            row(
                w,
                figure,
                format!("{raw:.1}"),
                format!("{lh:.1}"),
                format!("{:.2}", lh / raw.max(f64::MIN_POSITIVE)),
                "< floor",
                Some(lh < raw),
            )
        };
        below_floor(
            "redis µs in client commands / CS",
            raw.redis_us_per_cs,
            lh.redis_us_per_cs,
        );
        below_floor(
            "redis CPU µs / CS (INFO cpu: user + sys, network included)",
            raw.redis_cpu_us_per_cs,
            lh.redis_cpu_us_per_cs,
        );
        let p50_rtt = lh.handoff_p50_us / rtt;
        row(
            w,
            "handoff p50 / p99 µs",
            format!("{:.0} / {:.0}", raw.handoff_p50_us, raw.handoff_p99_us),
            format!("{:.0} / {:.0}", lh.handoff_p50_us, lh.handoff_p99_us),
            format!("p50 = {p50_rtt:.1} RTT"),
            "p50 ≤ 3 RTT, p99 ≤ 1 ms",
            Some(p50_rtt <= 3.0 && lh.handoff_p99_us <= 1_000.0),
        );
        row(
            w,
            "least / most busy worker vs mean share",
            format!("{:.2} / {:.2}", raw.least_share, raw.most_share),
            format!("{:.2} / {:.2}", lh.least_share, lh.most_share),
            String::new(),
            "least ≥ 0.50",
            Some(lh.least_share >= 0.5),
        );
        row(
            w,
            "turns back to the same worker",
            format!("{:.0} %", raw.same_worker * 100.0),
            format!("{:.0} %", lh.same_worker * 100.0),
            String::new(),
            "",
            None,
        );
    }
    // The async API against the blocking figures of the same run.
    for (f, blocking, asynch, ratio, target, ok) in async_rows(a1, a2c_w2c, a2c) {
        row("A async API", &f, blocking, asynch, ratio, target, Some(ok));
    }
    for (f, blocking, asynch, ratio) in kind_rows(a1_kinds) {
        row("A async API", &f, blocking, asynch, ratio, "", None);
    }
    // The async face against rslock, in rslock's shape.
    #[cfg(feature = "peers")]
    for (f, rslock, lh, ratio, target, ok) in crate::peer::rows(&r.peer) {
        row("R peers", &f, rslock, lh, ratio, target, ok);
    }
    // The semaphore against the floor a user would write by hand.
    for (f, floor, lh, ratio, target, ok) in crate::sem::rows(sem) {
        row("S semaphore", &f, floor, lh, ratio, target, Some(ok));
    }
    // What "≤ 3 RTT" asks, measured: the least a handoff through Redis
    // costs here, with no lock at all and with the barest grant lock.
    for (f, floor) in [
        (
            "handoff floor: token ring over BLPOP (no lock)",
            floors.ring,
        ),
        (
            "handoff floor: bare grant lock (BLPOP-blocked waiters)",
            floors.bare,
        ),
    ] {
        row(
            "W2c shape, 8 threads",
            &format!("{f}: handoff p50 / p99 µs; CS/s; redis µs in client commands / CS"),
            format!(
                "{:.0} / {:.0}; {:.0}; {:.1}",
                floor.p50_us, floor.p99_us, floor.per_s, floor.redis_us_per_cs
            ),
            String::new(),
            format!("p50 = {:.1} RTT", floor.p50_us / rtt),
            "",
            None,
        );
    }
    for (w, raw, fair) in [
        ("W2 fair lock, 8 threads", &w2_raw, &w2_fair),
        ("W2p fair lock, 4 proc × 2 thr", &w2p_raw, &w2p_fair),
    ] {
        let ratio = fair.pairs_per_s / raw.pairs_per_s;
        row(
            w,
            "critical sections/s; client commands / CS",
            format!("{:.0}; {:.1}", raw.pairs_per_s, raw.client_cmds_per_cs),
            format!("{:.0}; {:.2}", fair.pairs_per_s, fair.client_cmds_per_cs),
            format!("{ratio:.2}"),
            "≥ 1.20; ≤ 3 cmds",
            Some(ratio >= 1.2 && fair.client_cmds_per_cs <= 3.05),
        );
        row(
            w,
            "handoff p50 / p99 µs; least / most vs mean share",
            format!(
                "{:.0} / {:.0}; {:.2} / {:.2}",
                raw.handoff_p50_us, raw.handoff_p99_us, raw.least_share, raw.most_share
            ),
            format!(
                "{:.0} / {:.0}; {:.2} / {:.2}",
                fair.handoff_p50_us, fair.handoff_p99_us, fair.least_share, fair.most_share
            ),
            format!("p50 = {:.1} RTT", fair.handoff_p50_us / rtt),
            "",
            None,
        );
    }
    row(
        "W5 read-mostly, 8 threads (1 in 10 writes)",
        "sections/s (floor: the plain lock); client commands / section; most readers at once",
        format!("{:.0}; {:.2}", w5_plain.0, w5_plain.2),
        format!("{:.0}; {:.2}; {}", w5_rw.0, w5_rw.2, w5_rw.1),
        format!("{:.2}", w5_rw.0 / w5_plain.0),
        "",
        None,
    );
    let r3 = w3_lh / w3_raw;
    row(
        "W3 8 names × 8 threads",
        "lock+unlock pairs/s",
        format!("{w3_raw:.0}"),
        format!("{w3_lh:.0}"),
        format!("{r3:.2}"),
        "≥ 0.85",
        Some(r3 >= 0.85),
    );
    if let Some(w) = &w4 {
        row(
            &format!("W4 {} guards", w.guards),
            &format!("renewal round trips per {:?} period", w.period),
            format!("{:.0} (1 per 1,000)", w.renewals_per_period / 1_000.0),
            format!("{:.0}", w.round_trips_per_period),
            format!(
                "{:.2}",
                w.round_trips_per_period / (w.renewals_per_period / 1_000.0).max(1.0)
            ),
            "",
            None,
        );
        row(
            &format!("W4 {} guards", w.guards),
            "renewal thread CPU per period; memory per guard",
            String::new(),
            format!(
                "{:.2} s ({:.2} % of a core); {:.0} B (took {:.1} s to acquire)",
                w.cpu_secs_per_period, w.cpu_percent, w.bytes_per_guard, w.acquire_secs
            ),
            String::new(),
            "",
            Some(w.leases_lost == 0),
        );
    }
    t
}

/// One line for `BENCH_ONLY=w2c` / `w2P`.
pub fn one_client_each_line(w: &str, raw: &Contended, lh: &Contended, rtt: f64) -> String {
    format!(
        "{w}: raw {:.0}/s leasehold {:.0}/s ratio {:.2}; cmds/CS {:.2} (raw {:.1}); redis µs/CS {:.1} (raw {:.1}); redis CPU µs/CS {:.1} (raw {:.1}); handoff p50 {:.0} µs = {:.1} RTT, p99 {:.0} µs; least/most {:.2}/{:.2}; same worker {:.0} %",
        raw.pairs_per_s,
        lh.pairs_per_s,
        lh.pairs_per_s / raw.pairs_per_s,
        lh.client_cmds_per_cs,
        raw.client_cmds_per_cs,
        lh.redis_us_per_cs,
        raw.redis_us_per_cs,
        lh.redis_cpu_us_per_cs,
        raw.redis_cpu_us_per_cs,
        lh.handoff_p50_us,
        lh.handoff_p50_us / rtt,
        lh.handoff_p99_us,
        lh.least_share,
        lh.most_share,
        lh.same_worker * 100.0
    )
}

/// One line for `BENCH_ONLY=floors`.
pub fn floors_line(f: &Floors, rtt: f64) -> String {
    format!(
        "floors: ring p50 {:.0} µs = {:.1} RTT, p99 {:.0} µs, {:.0}/s, redis µs/CS {:.1}; bare grant lock p50 {:.0} µs = {:.1} RTT, p99 {:.0} µs, {:.0}/s, redis µs/CS {:.1}",
        f.ring.p50_us,
        f.ring.p50_us / rtt,
        f.ring.p99_us,
        f.ring.per_s,
        f.ring.redis_us_per_cs,
        f.bare.p50_us,
        f.bare.p50_us / rtt,
        f.bare.p99_us,
        f.bare.per_s,
        f.bare.redis_us_per_cs
    )
}

/// The async API's rows: (figure, blocking, async, ratio, target, met).
fn async_rows(
    a1: &AsyncUncontended,
    w2c: &Contended,
    a2c: &Contended,
) -> Vec<(String, String, String, String, &'static str, bool)> {
    let rate = a2c.pairs_per_s / w2c.pairs_per_s;
    let p50 = a2c.handoff_p50_us / w2c.handoff_p50_us;
    vec![
        (
            "A1 one task, lock+unlock pairs/s (blocking: W1's, same blocks)".into(),
            format!("{:.0}", a1.blocking_rate),
            format!("{:.0}", a1.async_rate),
            format!("{:.2}", a1.ratio),
            "≥ 0.90",
            a1.ratio >= 0.90,
        ),
        (
            "A2c 8 tasks, a client each: critical sections/s (blocking: W2c)".into(),
            format!("{:.0}", w2c.pairs_per_s),
            format!("{:.0}", a2c.pairs_per_s),
            format!("{rate:.2}"),
            "≥ 1.0",
            rate >= 1.0,
        ),
        (
            "A2c handoff p50 / p99 µs (blocking: W2c)".into(),
            format!("{:.0} / {:.0}", w2c.handoff_p50_us, w2c.handoff_p99_us),
            format!("{:.0} / {:.0}", a2c.handoff_p50_us, a2c.handoff_p99_us),
            format!("p50 {p50:.2}×"),
            "p50 ≤ 1.2×",
            p50 <= 1.2,
        ),
        (
            "A2c client commands / CS".into(),
            format!("{:.2}", w2c.client_cmds_per_cs),
            format!("{:.2}", a2c.client_cmds_per_cs),
            String::new(),
            "≤ 3",
            a2c.client_cmds_per_cs <= 3.0,
        ),
    ]
}

/// A1's shape for the other kinds (no target: what the tokio transport gives
/// them): (figure, blocking, async, ratio).
fn kind_rows(kinds: &[(&'static str, AsyncUncontended)]) -> Vec<(String, String, String, String)> {
    kinds
        .iter()
        .map(|(kind, a)| {
            (
                format!("A1 {kind}: one task, pairs/s (blocking: the same kind's, same blocks)"),
                format!("{:.0}", a.blocking_rate),
                format!("{:.0}", a.async_rate),
                format!("{:.2}", a.ratio),
            )
        })
        .collect()
}

/// A1's other kinds, as lines (`BENCH_ONLY=async`).
pub fn kind_lines(kinds: &[(&'static str, AsyncUncontended)]) -> String {
    kind_rows(kinds)
        .into_iter()
        .map(|(f, b, a, r)| format!("{f}: blocking {b}, async {a}, {r}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The async rows alone, as lines (`BENCH_ONLY=async`).
pub fn async_lines(a1: &AsyncUncontended, w2c: &Contended, a2c: &Contended) -> String {
    async_rows(a1, w2c, a2c)
        .into_iter()
        .map(|(f, b, a, r, target, ok)| {
            format!(
                "{f}: blocking {b}, async {a}, {r} (target {target}: {})",
                met(ok)
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}
