#!/usr/bin/env bash
# The whole check: formatting, clippy, unit + integration + doc tests (each
# test starts its own redis-server), and warning-free docs — once with the
# default features and once with `tls` (rediss://, tested against a TLS-only
# redis-server with certificates made by openssl at test time).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/common.sh
ensure_cargo
ensure_redis_server
ensure_openssl
echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy --all-targets -- -D warnings (default features, then tls)"
cargo clippy --all-targets -- -D warnings
cargo clippy --all-targets --features tls -- -D warnings
echo "== cargo test (unit, integration, doc tests; default features)"
cargo test
echo "== cargo test --features tls"
cargo test --features tls
echo "== cargo doc"
RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --features tls --quiet
echo "all checks passed"
