#!/usr/bin/env bash
# The main job: several worker processes x threads drain a shared list of jobs,
# each job guarded by client.lock("job:<id>"), and we prove none ran twice.
# Then the async service: request handlers on a tokio runtime lock
# "order:<id>" across .await, and we prove each order is charged once.
# Uses $REDIS_URL when set; otherwise starts a throwaway redis-server.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/common.sh
ensure_cargo
if [ -z "${REDIS_URL:-}" ]; then
    ensure_redis_server
    start_throwaway_redis
fi
cargo build --release --example batch_jobs --quiet
target/release/examples/batch_jobs --url "$REDIS_URL" \
    --processes "${PROCESSES:-4}" --threads "${THREADS:-4}" \
    --jobs "${JOBS:-400}" --work-ms "${WORK_MS:-2}" --compare
echo
echo "== the async face: a service's request handlers (examples/service.rs) =="
cargo build --release --example service --quiet
target/release/examples/service --url "$REDIS_URL" \
    --orders "${ORDERS:-20}" --requests "${REQUESTS:-2000}" --pay-ms "${PAY_MS:-3}"
