#!/usr/bin/env bash
# The performance table: W1 uncontended, W2 contended threads, W2p contended
# processes, W2c/W2P one client per contender (threads / processes) beside
# the handoff floors (a BLPOP token ring, a bare grant lock), W3 many names,
# W4 100k live guards, W5 read-mostly — every leasehold figure beside its
# raw-Redis floor measured in the same run, as a ratio — and what each
# script path costs Redis in instructions (benches/script_cost.rs).
#
#   scripts/bench.sh              both modes, pinned first (about 4 minutes)
#   scripts/bench.sh --pinned     redis-server and every client thread on CPU 0
#   scripts/bench.sh --unpinned   the scheduler places them
#
# Pinned mode exists because unpinned loopback timings on 2 vCPUs swing by 2x:
# with one CPU for everything, a ratio measures CPU work per operation.
# Environment: BENCH_SECS (2 per run), BENCH_ROUNDS (3; the median round is shown), GUARDS (100000; 0 skips W4), REDIS_URL
# (use that server instead of a throwaway one; it cannot be pinned then).
# The tables are printed and written to target/bench-summary.md.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/common.sh
ensure_cargo
[ -n "${REDIS_URL:-}" ] || ensure_redis_server

modes="pinned unpinned"
case "${1:-}" in
    --pinned) modes="pinned" ;;
    --unpinned) modes="unpinned" ;;
    "") ;;
    *) echo "usage: scripts/bench.sh [--pinned|--unpinned]" >&2; exit 2 ;;
esac
if [[ $modes == *pinned* && $modes != unpinned ]] && ! command -v taskset >/dev/null 2>&1; then
    echo "taskset (util-linux) is needed for the pinned mode" >&2
    exit 1
fi

echo "building the benches…"
# With the `tokio` feature: the async rows (A1, A2c) measure a tokio user's
# build (round trips on the runtime's reactor); the blocking rows are the
# same code either way. With `peers`: the R1 row beside rslock.
cargo bench --no-run -p leasehold-tests --features tokio,peers --bench workloads --bench lock --quiet 2>&1 | grep -v "^ *Executable" || true

summary=target/bench-summary.md
cpu=$(grep -m1 "model name" /proc/cpuinfo 2>/dev/null | cut -d: -f2- | sed 's/^ *//' || true)
{
    echo "## leasehold performance — $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo
    echo "$(nproc) CPUs${cpu:+ ($cpu)}; redis-server $(redis-server --version 2>/dev/null | sed -n 's/.*v=\([0-9.]*\).*/\1/p')."
    echo "Ratios are leasehold / raw floor from the same run (higher is better for rates)."
    echo "RTT = loopback PING round trip. CS = critical section. Built with the \`tokio\` feature (the async rows' round trips on the runtime's reactor)."
    echo
} >"$summary"

for mode in $modes; do
    pin=()
    label="unpinned (scheduler's choice on $(nproc) CPUs)"
    if [ "$mode" = pinned ]; then
        pin=(taskset -c 0)
        label="pinned (redis-server and all clients on CPU 0)"
        [ -n "${REDIS_URL:-}" ] && label="pinned clients only (REDIS_URL given: server not pinned)"
    fi
    echo
    echo "== $label =="
    part=$(mktemp)
    BENCH_MODE="$label" BENCH_SUMMARY="$part" "${pin[@]}" cargo bench --quiet -p leasehold-tests --features tokio,peers --bench workloads
    cat "$part" >>"$summary"
    echo >>"$summary"
    rm -f "$part"
    if [ "$mode" = "${modes%% *}" ]; then
        echo "== criterion, W1 detail ($label) =="
        "${pin[@]}" cargo bench --quiet -p leasehold-tests --features tokio,peers --bench lock 2>&1 | grep -E "time:|thrpt:|^uncontended|^[a-z_+]+/" || true
    fi
done

# What each script path costs Redis in instructions (valgrind: the same
# count whatever else the machine does) — the figure to compare before and
# after a script change, where timings swing.
if command -v valgrind >/dev/null 2>&1; then
    echo
    echo "== Redis instructions per script path (benches/script_cost.rs, under valgrind) =="
    part=$(mktemp)
    cargo bench --quiet -p leasehold-tests --bench script_cost | tee "$part"
    cat "$part" >>"$summary"
    rm -f "$part"
else
    echo "valgrind is not installed: no instruction counts (apt-get install -y valgrind)" | tee -a "$summary"
fi

echo
echo "== summary (also in $summary) =="
cat "$summary"
