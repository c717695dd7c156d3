//! Checking a history of critical sections recorded by workers: no two
//! overlap, and the shared counter saw every one.

/// Replays the enter/exit records of every name: no critical section may
/// start while another is open, except after one of the `killed` process's
/// sections that never finished. Returns (finished, unfinished) sections and
/// checks each counter against them.
pub fn check_history(
    con: &mut redis::Connection,
    names: &[&str],
    killed: Option<&str>,
) -> (u64, u64) {
    let (mut finished, mut unfinished) = (0, 0);
    for name in names {
        let events: Vec<String> =
            redis::Commands::lrange(con, format!("events:{name}"), 0, -1).unwrap();
        let (mut done_here, mut open_here) = (0u64, 0u64);
        let mut inside: Option<String> = None;
        for ev in &events {
            let (kind, id) = ev.split_once(' ').unwrap();
            match kind {
                "E" => {
                    if let Some(prev) = inside.take() {
                        let from_killed =
                            killed.is_some_and(|k| prev.starts_with(&format!("{k}.")));
                        assert!(from_killed, "{name}: {id} entered while {prev} was inside");
                        open_here += 1;
                    }
                    inside = Some(id.to_owned());
                }
                "X" => {
                    assert_eq!(
                        inside.as_deref(),
                        Some(id),
                        "{name}: exit of {id} out of turn"
                    );
                    inside = None;
                    done_here += 1;
                }
                _ => panic!("bad record {ev:?}"),
            }
        }
        if let Some(prev) = inside {
            assert!(
                killed.is_some_and(|k| prev.starts_with(&format!("{k}."))),
                "{name}: {prev} never left"
            );
            open_here += 1;
        }
        let count: u64 = redis::Commands::get(con, format!("count:{name}")).unwrap_or(0);
        assert!(
            count >= done_here && count <= done_here + open_here,
            "{name}: counter {count} for {done_here} finished and {open_here} unfinished sections"
        );
        finished += done_here;
        unfinished += open_here;
    }
    (finished, unfinished)
}
