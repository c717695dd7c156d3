#!/usr/bin/env bash
# A long run of the protocol simulator (docs/verification.md): the plain
# (also beside Redisson's clients, and through failovers with replica
# acknowledgement), fair and read/write locks', the semaphore's and
# Redlock's fault profiles on many fresh seeds, in a release build, then
# per profile the steps, distinct states, scripts and faults explored. A
# failure prints its seed, the end of its trace and the shortest run found
# failing so; LEASEHOLD_SIM_FROM=<seed> LEASEHOLD_SIM_SEEDS=1 replays it.
#
#   scripts/simulate.sh            10,000 seeds per profile: 40 million steps
#                                  each, a few minutes
#   scripts/simulate.sh 20000      that many seeds per profile
#
# Environment: LEASEHOLD_SIM_FROM (the first seed; fresh by default).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/common.sh
ensure_cargo
seeds=${1:-10000}
[[ $seeds =~ ^[0-9]+$ ]] || { echo "usage: scripts/simulate.sh [seeds per profile]" >&2; exit 2; }
export LEASEHOLD_SIM_SEEDS=$seeds
export LEASEHOLD_SIM_FROM=${LEASEHOLD_SIM_FROM:-$(date +%s%N)}
echo "simulating $seeds seeds per profile from seed $LEASEHOLD_SIM_FROM..."
start=$(date +%s)
cargo test --release -q -p leasehold-tests --test simulation -- --nocapture --test-threads 2 \
    keeps_its_promises failovers_lose_holds_only_without_replica_acknowledgement \
    2>&1 | grep -E "^(plain lock|fair lock|semaphore|read/write lock|redlock|with)|panicked|seed|shortest|test result" 
echo "done in $(( $(date +%s) - start )) s"
