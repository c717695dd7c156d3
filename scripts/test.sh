#!/usr/bin/env bash
# The whole check: formatting, import cycles, clippy (default features and
# `tls`+`cli`+`tokio`), unit + integration + doc tests (each test starts its
# own redis-servers — single nodes, replicas, Sentinels, clusters; the
# protocol simulator among them), the failover soak, and beside it the
# server matrix (Valkey 8.1, Redis 6.2) and the loom models of the
# in-process machinery.
# With the features on (`tls`: rediss://, tested against a TLS-only
# redis-server with certificates made by openssl at test time; `tokio`: the
# async face's round trips on the runtime's reactor) the unit tests, the TLS
# tests, the core lock test and the async tests run again: the features
# change the connection, subscriber and task code they go through, not the
# rest. Then the README's and docs/' examples compiled against leasehold
# alone, the docs, what the published package holds, and (when its
# toolchain is installed) the minimum Rust version.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/common.sh
ensure_cargo
# A clean build gains nothing from incremental state, and it doubled the
# target dir (CI's disk ran out once): none here.
export CARGO_INCREMENTAL=0
started=$SECONDS
# Each stage's heading, with the seconds since the start (the suite must stay
# within CI's budget: see docs/contributing.md, "CI").
stage() { echo "== $* [t=$((SECONDS - started))s]"; }
ensure_redis_server
ensure_redis_cli
ensure_openssl
stage "cargo fmt --check"
cargo fmt --all -- --check
stage "import cycles between modules (../shared/tools/modcycles; tests/layers.rs checks the layer order too)"
if [ -x ../shared/tools/modcycles ]; then
    ../shared/tools/modcycles src
elif [ -n "${CI:-}" ]; then
    echo "../shared/tools/modcycles is missing beside the checkout (CI has shared/ there)" >&2
    exit 1
else
    echo "../shared/tools/modcycles is not beside this checkout; tests/layers.rs (in cargo test) checks the layers instead"
fi
stage "cargo clippy --all-targets -- -D warnings (default features, then tls, cli, tokio and metrics)"
cargo clippy --all-targets -- -D warnings
cargo clippy --all-targets --features tls,cli,tokio,metrics,leasehold-tests/peers -- -D warnings
stage "cargo test (unit, integration, doc tests; default features) against $(redis-server --version | cut -d' ' -f1-3)"
cargo test
stage "the failover soak (tests/failover_soak.rs, about a minute; its figures are docs/design.md's failover table), the stalls and the Sentinel failover, a job's windows across five skewed replicas (a minute), and beside them the server matrix and the in-process machinery under loom"
# They mostly wait (for failovers, for leases, for stopped processes), so
# they share the time: the soak, the stall and Sentinel tests (kept out of
# the plain `cargo test` for this), the matrix's two servers, and (niced,
# so the waiting tests keep their timing) the loom models — the library's
# unit tests built with --cfg loom (src/{ledger,park,renewal}/loom.rs:
# every interleaving with at most 3 preemptions; docs/verification.md, the
# last section), in a target dir of their own (the cfg changes every
# crate's build), without the tokio feature (tokio reads cfg(loom) and then
# wants loom itself), built for time: no debug info, loom's scheduler
# optimised (the models run 3x faster), the rest not (a release build takes
# twice as long to build as all of this).
logs=$(mktemp -d "${TMPDIR:-/tmp}/leasehold-test.XXXXXX")
RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom LOOM_MAX_PREEMPTIONS=3 \
    CARGO_INCREMENTAL=0 CARGO_PROFILE_DEV_DEBUG=0 CARGO_PROFILE_TEST_DEBUG=0 \
    nice -n 10 cargo test -p leasehold --lib \
    --config 'profile.test.package.loom.opt-level=3' \
    --config 'profile.test.package.generator.opt-level=3' loom >"$logs/loom.log" 2>&1 &
loom=$!
cargo test --test failover_soak --test stalls --test sentinel --test job_windows --no-run --quiet
cargo test --test failover_soak -- --nocapture >"$logs/soak.log" 2>&1 &
soak=$!
cargo test --test job_windows -- --nocapture >"$logs/jobs.log" 2>&1 &
jobs=$!
cargo test --test stalls --test sentinel >"$logs/slow.log" 2>&1 &
slow=$!
ensure_matrix_servers
run_matrix "$VALKEY_SERVER" "$logs/valkey.log" &
valkey=$!
run_matrix "$REDIS62_SERVER" "$logs/redis62.log" &
redis62=$!
failed=0
wait "$valkey" || failed=1
wait "$redis62" || failed=1
for server in "$VALKEY_SERVER:$logs/valkey.log" "$REDIS62_SERVER:$logs/redis62.log"; do
    report_matrix "${server%%:*}" "${server#*:}"
done
if wait "$slow"; then
    awk '/^ *Running /{file = $2} /^test result:/{printf "%-16s %s\n", file, $0}' "$logs/slow.log"
else
    cat "$logs/slow.log" >&2
    echo "the stall or Sentinel tests failed" >&2
    failed=1
fi
if wait "$soak"; then
    grep -vE '^(running|test |$)' "$logs/soak.log"
else
    cat "$logs/soak.log" >&2
    echo "the failover soak failed" >&2
    failed=1
fi
if wait "$jobs"; then
    grep -E 'windows of' "$logs/jobs.log"
else
    cat "$logs/jobs.log" >&2
    echo "the scheduled jobs' windows across skewed replicas failed" >&2
    failed=1
fi
if wait "$loom"; then
    grep -E '^test result:' "$logs/loom.log" | sed 's/^/loom models: /'
else
    cat "$logs/loom.log" >&2
    echo "the loom models failed" >&2
    failed=1
fi
rm -rf "$logs"
[ "$failed" = 0 ] || exit 1
stage "cargo test --features tls,cli,tokio,metrics (unit, TLS, the counters through a recorder, the core lock test, the operators' CLI end to end, the async face on the tokio transport, calls dropped while out on every transport, the tokio transport's connections, a cancel of 200 waits, blocking calls refused on an executor)"
cargo test --features tls,cli,tokio,metrics --lib --test tls --test lock --test cli --test tasks --test tokio_transport --test tokio_connections --test lock_all --test executor --test cancel --test dropped_calls --test metrics
stage "the examples of the README and docs/*.md as doc tests of a crate that depends only on leasehold (tests/downstream)"
cp Cargo.lock tests/downstream/Cargo.lock
(cd tests/downstream && CARGO_TARGET_DIR="$PWD/../../target" cargo test --doc --quiet)
stage "cargo doc (default features, and every feature)"
RUSTDOCFLAGS="-D warnings" cargo doc --no-deps -p leasehold --quiet
RUSTDOCFLAGS="-D warnings" cargo doc --no-deps -p leasehold --all-features --quiet
stage "the package: only the library, its CLI, examples, docs and licenses; cargo publish --dry-run without warnings"
listed=$(cargo package --list --allow-dirty -p leasehold --quiet)
unexpected=$(grep -vE '^(src/.*\.rs|examples/[a-z_]+\.rs|Cargo\.toml|Cargo\.toml\.orig|Cargo\.lock|README\.md|CHANGELOG\.md|LICENSE-MIT|LICENSE-APACHE|\.cargo_vcs_info\.json)$' <<<"$listed" || true)
if [ -n "$unexpected" ]; then
    echo "files in the package that a user does not need:" >&2
    echo "$unexpected" >&2
    exit 1
fi
# The one warning a dry run always prints is that it did not upload.
published=$(cargo publish --dry-run --allow-dirty -p leasehold 2>&1) || { echo "$published" >&2; exit 1; }
warnings=$(grep -i 'warning' <<<"$published" | grep -v 'aborting upload due to dry run' || true)
if [ -n "$warnings" ]; then
    echo "cargo publish --dry-run warned:" >&2
    echo "$warnings" >&2
    exit 1
fi
echo "packaged: $(wc -l <<<"$listed") files"
stage "the minimum Rust version (rust-version in Cargo.toml)"
msrv=$(sed -n 's/^rust-version = "\(.*\)"/\1/p' Cargo.toml)
if command -v rustup >/dev/null 2>&1 && ! rustup run "$msrv" rustc --version >/dev/null 2>&1; then
    # Installed as redis-server is: what the check needs, once (a minute).
    echo "installing Rust $msrv (rustup, minimal profile) to check that the crate builds with it…"
    timeout 300 rustup toolchain install "$msrv" --profile minimal >/dev/null 2>&1 \
        || echo "could not install Rust $msrv (no network?)"
fi
if command -v rustup >/dev/null 2>&1 && rustup run "$msrv" rustc --version >/dev/null 2>&1; then
    cargo "+$msrv" check -p leasehold --all-features --lib --bins --quiet
    echo "builds with Rust $msrv"
else
    echo "not checked: the Rust $msrv toolchain is not installed (rustup toolchain install $msrv --profile minimal)"
fi
echo "all checks passed in $((SECONDS - started)) s"
