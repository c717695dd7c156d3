#!/usr/bin/env bash
# The whole check: formatting, clippy, unit + integration + doc tests (each
# test starts its own redis-server), and warning-free docs.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/common.sh
ensure_cargo
ensure_redis_server
echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy --all-targets -- -D warnings"
cargo clippy --all-targets -- -D warnings
echo "== cargo test (unit, integration, doc tests)"
cargo test
echo "== cargo doc"
RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --quiet
echo "all checks passed"
