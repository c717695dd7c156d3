# Shared by scripts/demo.sh, scripts/test.sh and scripts/bench.sh (sourced, not run).

# Installs redis-server when it is missing: with apt-get as root, otherwise
# prints the exact command and stops.
ensure_redis_server() {
    if command -v redis-server >/dev/null 2>&1; then
        return 0
    fi
    if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
        echo "redis-server is missing; installing it (apt-get install -y redis-server)..."
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null
        command -v redis-server >/dev/null 2>&1 || { echo "installing redis-server failed" >&2; exit 1; }
        echo "installed: $(redis-server --version)"
    else
        echo "redis-server is needed and missing. Install it with:" >&2
        echo "    sudo apt-get update && sudo apt-get install -y redis-server" >&2
        exit 1
    fi
}

# The cluster tests make their cluster with `redis-cli --cluster create`
# (Debian's redis-server pulls in redis-tools, which has it).
ensure_redis_cli() {
    if command -v redis-cli >/dev/null 2>&1; then
        return 0
    fi
    if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
        echo "redis-cli is missing; installing it (apt-get install -y redis-tools)..."
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-tools >/dev/null
        command -v redis-cli >/dev/null 2>&1 || { echo "installing redis-tools failed" >&2; exit 1; }
    else
        echo "redis-cli is needed by the cluster tests and missing. Install it with:" >&2
        echo "    sudo apt-get update && sudo apt-get install -y redis-tools" >&2
        exit 1
    fi
}

# The TLS tests make their certificates with the openssl command.
ensure_openssl() {
    if command -v openssl >/dev/null 2>&1; then
        return 0
    fi
    if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
        echo "openssl is missing; installing it (apt-get install -y openssl)..."
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openssl >/dev/null
        command -v openssl >/dev/null 2>&1 || { echo "installing openssl failed" >&2; exit 1; }
    else
        echo "openssl is needed by the TLS tests and missing. Install it with:" >&2
        echo "    sudo apt-get update && sudo apt-get install -y openssl" >&2
        exit 1
    fi
}

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
