#!/usr/bin/env bash
# The whole check: formatting, import cycles, clippy (default features and `tls`+`cli`), unit +
# integration + doc tests (each test starts its own redis-servers — single
# nodes, replicas, Sentinels, clusters), and warning-free docs. With the `tls`
# feature (rediss://, tested against a TLS-only redis-server with certificates
# made by openssl at test time) the unit tests, the TLS tests and the core
# lock/wait/renewal tests run again: the feature changes the connection and
# subscriber code they go through, not the rest.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/common.sh
ensure_cargo
ensure_redis_server
ensure_redis_cli
ensure_openssl
echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== import cycles between modules (../shared/tools/modcycles; tests/layers.rs checks the layer order too)"
if [ -x ../shared/tools/modcycles ]; then
    ../shared/tools/modcycles src
elif [ -n "${CI:-}" ]; then
    echo "../shared/tools/modcycles is missing beside the checkout (CI has shared/ there)" >&2
    exit 1
else
    echo "../shared/tools/modcycles is not beside this checkout; tests/layers.rs (in cargo test) checks the layers instead"
fi
echo "== cargo clippy --all-targets -- -D warnings (default features, then tls)"
cargo clippy --all-targets -- -D warnings
cargo clippy --all-targets --features tls,cli -- -D warnings
echo "== cargo test (unit, integration, doc tests; default features)"
cargo test
echo "== cargo test --features tls,cli (unit, TLS, the core lock test, the operators' CLI end to end)"
cargo test --features tls,cli --lib --test tls --test lock --test cli
echo "== cargo doc"
RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --features tls --quiet
echo "all checks passed"
