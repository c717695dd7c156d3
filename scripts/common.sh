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
