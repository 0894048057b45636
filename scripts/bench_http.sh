#!/usr/bin/env bash
# The HTTP API's overhead against JSON-RPC, in one run: the same open-loop
# workload (bench/loadgen) sent as JSON-RPC generate and as streamed
# POST /v1/completions (server-sent events), each on a fresh kvtierd (a cold
# prefix cache every time), alternating for ROUNDS rounds; prints each
# run's throughput and TTFT p50 and the medians' ratios.
#
#   scripts/bench_http.sh [BUILD_DIR] [ROUNDS] [SECONDS] [RATE]
#                         (defaults: build 3 30 8)
set -euo pipefail
build=${1:-build}
rounds=${2:-3}
seconds=${3:-30}
rate=${4:-8}
here=$(cd "$(dirname "$0")/.." && pwd)
kvtierd="$here/$build/daemon/kvtierd"
loadgen="$here/$build/bench/loadgen"
for b in "$kvtierd" "$loadgen"; do [ -x "$b" ] || { echo "no $b: build first" >&2; exit 1; }; done
dir=$(mktemp -d)
trap 'kill "$(cat "$dir/pid" 2>/dev/null)" 2>/dev/null || true; rm -rf "$dir"' EXIT

# One run: a fresh daemon, loadgen over API; prints "tok/s ttft_p50_ms".
run() {
  local api=$1
  rm -f "$dir/k.sock"
  "$kvtierd" --socket "$dir/k.sock" --log-level warning 2>"$dir/kvtierd.log" &
  echo $! >"$dir/pid"
  for _ in $(seq 200); do [ -S "$dir/k.sock" ] && break; sleep 0.05; done
  "$loadgen" --socket "$dir/k.sock" --api "$api" --workload a,b,c,d --rate "$rate" \
    --duration "$seconds" --quiet --out-prefix "$dir/$api" >"$dir/out" 2>&1 ||
    { cat "$dir/out" >&2; exit 1; }
  kill "$(cat "$dir/pid")"; wait "$(cat "$dir/pid")" 2>/dev/null || true
  awk '/^throughput tok\/s/ { tok = $3 } /^TTFT p50 ms/ { p50 = $4 } END { print tok, p50 }' \
    "$dir/out"
}

median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

echo "workload a,b,c,d at $rate/s for $seconds s, $rounds rounds alternating, the bundled model"
printf "%-8s %6s %12s %14s\n" api round "tok/s" "TTFT p50 ms"
for i in $(seq "$rounds"); do
  for api in jsonrpc http; do
    read -r tok p50 < <(run "$api")
    printf "%-8s %6d %12s %14s\n" "$api" "$i" "$tok" "$p50"
    echo "$tok" >>"$dir/$api.tok"
    echo "$p50" >>"$dir/$api.p50"
  done
done
rt=$(median <"$dir/jsonrpc.tok"); ht=$(median <"$dir/http.tok")
rp=$(median <"$dir/jsonrpc.p50"); hp=$(median <"$dir/http.p50")
echo "medians: jsonrpc $rt tok/s, TTFT p50 $rp ms; http $ht tok/s, TTFT p50 $hp ms"
awk -v rt="$rt" -v ht="$ht" -v rp="$rp" -v hp="$hp" 'BEGIN {
  printf "ratio http / jsonrpc: throughput %.3f, TTFT p50 %.3f (target: within 5%%)\n", ht / rt, hp / rp }'
