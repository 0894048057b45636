#!/usr/bin/env bash
# The remote tier's figures in one run: a redis-server of its own (a temp
# dir, persistence off, a Unix socket and a free loopback port), then
# remote_bench over each, then redis-benchmark's SET and GET of the same
# value size and pipeline depth on the same server, for comparison. The
# server holds about 0.8 GB while it runs (640 blocks of GPT-2 124M).
#
#   scripts/bench_remote.sh [BUILD_DIR]   (default: build)
set -euo pipefail
build=${1:-build}
here=$(cd "$(dirname "$0")/.." && pwd)
bench="$here/$build/bench/remote_bench"
[ -x "$bench" ] || { echo "no $bench: build first" >&2; exit 1; }
command -v redis-server >/dev/null || { echo "redis-server is not installed (scripts/install-deps.sh)" >&2; exit 1; }
dir=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
redis-server --port "$port" --bind 127.0.0.1 --unixsocket "$dir/redis.sock" --unixsocketperm 700 \
  --save '' --appendonly no --dir "$dir" --logfile "$dir/redis.log" --daemonize yes \
  --pidfile "$dir/redis.pid"
trap 'kill "$(cat "$dir/redis.pid")" 2>/dev/null || true; rm -rf "$dir"' EXIT
for _ in $(seq 100); do redis-cli -s "$dir/redis.sock" ping >/dev/null 2>&1 && break; sleep 0.05; done

# GPT-2 124M, page 16: 12 layers x K,V x 16 tokens x 768 x 4 bytes; the
# store pipelines 16 MiB a round, 14 such values.
value=$((12 * 2 * 16 * 768 * 4))
depth=14
for where in "$dir/redis.sock" "127.0.0.1:$port"; do
  "$bench" --redis "$where" --l3-dir "$dir/l3"
  redis-cli -s "$dir/redis.sock" flushall >/dev/null
done
echo
# One connection, as the store has: redis-benchmark's 50 would measure
# the server under 50 clients instead.
echo "== redis-benchmark, same server, value $value bytes, pipeline $depth, 1 connection"
for where in "-s $dir/redis.sock" "-h 127.0.0.1 -p $port"; do
  # shellcheck disable=SC2086  # $where is two words on purpose
  redis-benchmark $where -c 1 -t set,get -d "$value" -n 640 -P "$depth" -q |
    tr '\r' '\n' | grep 'requests per second' | sed "s|^|  ${where%% *} |"
done
echo "  (requests/s x $value bytes = bytes/s, against the store's blocks/s above)"
