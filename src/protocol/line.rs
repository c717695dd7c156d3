//! The plain lock's line of waiting clients, as the scripts see it: the
//! leases of its places, of the line and of a grant (each in Rust and as a
//! Lua literal), and the Lua helpers the acquire and the release share —
//! the server's clock, an element's place and expiry (`<until>|<place>`),
//! the line's expiry, and the leases a place names; in Rust, an element
//! made and read. The semaphore's line reads the same leases.

use std::time::Duration;

/// How long a waiting client's place in the line lasts at most unless its
/// waiter confirms it (see `protocol::place_lease`). In the scripts as
/// [`place_lease_ms!`].
pub(crate) const PLACE_LEASE: Duration = Duration::from_secs(3);
macro_rules! place_lease_ms {
    () => {
        "3000"
    };
}
pub(crate) use place_lease_ms;

/// How long the line lives when a place taken or confirmed lengthens it:
/// two place leases, lengthened again once less than one is left — so it
/// outlives every place in it, and most calls read an expiry (`PTTL`)
/// instead of setting one (`PEXPIRE` costs Redis twice as much). In the scripts as [`line_lease_ms!`].
macro_rules! line_lease_ms {
    () => {
        "6000"
    };
}
pub(crate) use line_lease_ms;

/// The longest lease a release sets when it gives the lock to the first
/// waiter in line (the waiter's own lease when shorter, named in its place:
/// `protocol::grant_lease`): short, so a waiter that died after its place
/// was last confirmed costs the others this much, never a whole watchdog
/// lease. The grantee's renewal lengthens it to its own lease within a
/// third of this. In the scripts as [`grant_lease_ms!`].
pub(crate) const GRANT_LEASE: Duration = Duration::from_secs(3);
macro_rules! grant_lease_ms {
    () => {
        "3000"
    };
}
pub(crate) use grant_lease_ms;

/// The Lua helpers of the line that acquire and release share:
/// `granted`/`placed` ([`granted_fn!`]); `now()` — the server's clock in
/// ms, read once per script and only when a line exists; `entry(el)` — an
/// element of the line, `<until>|<place>`: its place and until when it
/// lives (ms by that clock), or nil when it is dead or no element a client
/// made. The place's expiry lives in its element, where the line already
/// is: set from the waiter's place lease when it joins, rewritten (`LSET`)
/// when its waiter confirms it, read by the release that pops it — no
/// second key, no read or delete beside the pop. `line_live(line)`: the
/// line expires one to two [`PLACE_LEASE`]s after a place was last taken or
/// confirmed ([`line_lease_ms!`]) — no place lives longer, so the line of
/// waiters that all died goes by itself (the protocol simulator found the
/// line left behind for good when it had no expiry: `tests/simulation.rs`).
/// Every key is one the caller names (`KEYS`), none is built in Lua; a
/// script reads one or two elements, never the whole line (leaving it
/// does, rarely). What only one script uses is defined in it (the
/// acquire's `ours`, `head` and `join`): each helper a script defines costs
/// Redis a closure on every call that reaches it.
macro_rules! line_fns {
    () => {
        concat!(
            $crate::protocol::line::granted_fn!(),
            r#"
local clock = false
local function now()
    if not clock then
        local t = redis.call('time')
        -- Arithmetic reads the numbers (half what `tonumber` costs).
        clock = t[1] * 1000 + math.floor(t[2] / 1000)
    end
    return clock
end
local function entry(el)
    local bar = string.find(el, '|', 2, true)
    local ms = bar and tonumber(string.sub(el, 1, bar - 1))
    if not (ms and ms > now()) then
        return nil
    end
    -- `<owner>:<n>#<rest>` at the least: what `^.+:.+#.+$` says, by plain
    -- finds (the first colon past the start leaves the most room).
    local place = string.sub(el, bar + 1)
    local colon = string.find(place, ':', 2, true)
    local hash = colon and string.find(place, '#', colon + 2, true)
    if hash and hash < #place then
        return place, ms
    end
    return nil
end
local function line_live(line)
    if redis.call('pttl', line) < "#,
            $crate::protocol::line::place_lease_ms!(),
            r#" then
        redis.call('pexpire', line, "#,
            $crate::protocol::line::line_lease_ms!(),
            r#")
    end
end
"#
        )
    };
}
pub(crate) use line_fns;

/// The Lua helpers `granted(place)` — the lease in ms a grant to waiting
/// place `place` sets — and `placed(place)` — how long the place lives
/// unconfirmed: the ones its waiter asked for, named in the place
/// (`<owner>#<n>@<grant ms>/<place ms>[f]`, see `protocol::place_of`), or
/// [`GRANT_LEASE`] and [`PLACE_LEASE`] when it names none. The numbers are
/// Rust's (`protocol::grant_lease`, `protocol::place_lease`); the scripts
/// only read them — with plain finds, not patterns: a `string.match` costs
/// Redis about as much as a command (`benches/script_cost.rs`).
/// Anything but a whole number of ms from 1 up reads as the default.
macro_rules! granted_fn {
    () => {
        concat!(
            r#"
local function granted(place)
    local at = string.find(place, '@', 1, true)
    local slash = at and string.find(place, '/', at, true)
    local ms = slash and tonumber(string.sub(place, at + 1, slash - 1))
    if ms and ms >= 1 and ms % 1 == 0 then
        return ms
    end
    return "#,
            $crate::protocol::line::grant_lease_ms!(),
            r#"
end
local function placed(place)
    local slash = string.find(place, '/', 1, true)
    local last = string.byte(place, -1) == 102 and -2 or -1
    local ms = slash and tonumber(string.sub(place, slash + 1, last))
    if ms and ms >= 1 and ms % 1 == 0 then
        return ms
    end
    return "#,
            $crate::protocol::line::place_lease_ms!(),
            r#"
end
"#
        )
    };
}
pub(crate) use granted_fn;

/// A plain waiter's element in the line: `<until>|<place>` — its place
/// (`protocol::place_of`) and until when it lives (ms by the server's
/// clock, as the acquire that last took or confirmed it replied). The next
/// attempt sends it instead of the bare place, and the script confirms
/// that element where it stands.
pub(crate) fn element(until: u64, place: &str) -> String {
    format!("{until}|{place}")
}

/// The place an element of a plain lock's line names (see [`element`]);
/// anything without an expiry in front, as it is.
pub(crate) fn element_place(element: &str) -> &str {
    element.split_once('|').map_or(element, |(_, place)| place)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::millis;

    #[test]
    fn the_scripts_constants_agree_with_rust() {
        assert_eq!(place_lease_ms!(), millis(PLACE_LEASE).to_string());
        assert_eq!(line_lease_ms!(), millis(2 * PLACE_LEASE).to_string());
        assert_eq!(grant_lease_ms!(), millis(GRANT_LEASE).to_string());
    }

    #[test]
    fn an_elements_place_is_what_follows_its_expiry() {
        let place = "c:1#2@3000/3000f";
        assert_eq!(element_place(&element(1_700_000_000_000, place)), place);
        assert_eq!(element_place(&element(0, place)), place);
        assert_eq!(element_place(place), place);
    }
}
