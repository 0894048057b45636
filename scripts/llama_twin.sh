#!/usr/bin/env bash
# llama.cpp's twins of bench/engine_bench's CPU rows, on the same GPT-2 124M
# shapes (fp32, random weights, 2 threads): llama-bench for prefill and batch-1
# decode, llama-batched-bench for decode of 1-16 private contexts and of 4 and
# 16 rows behind one shared 1016-token prompt. LLAMA_BIN_DIR is the bin dir of
# a llama.cpp build outside this repo; MODEL.gguf comes from
# scripts/make_gpt2_gguf.py. Prints the tables (llama.cpp's logs go to a temp
# file, named first); docs/bench.md ("Twins in llama.cpp") pairs each with its
# engine_bench row. About 5 minutes on 2 idle cores.
#
#   scripts/llama_twin.sh LLAMA_BIN_DIR MODEL.gguf
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: $0 LLAMA_BIN_DIR MODEL.gguf" >&2; exit 1; }
bin=$1
model=$2
for tool in llama-bench llama-batched-bench; do
  [ -x "$bin/$tool" ] || { echo "no $bin/$tool: build llama.cpp first" >&2; exit 1; }
done
[ -f "$model" ] || { echo "no $model: run scripts/make_gpt2_gguf.py first" >&2; exit 1; }
log=$(mktemp /tmp/llama_twin.XXXXXX.log)
echo "llama.cpp's logs: $log"

# Positions stop at the model's 1024: a 1024 context decodes its last 8
# (1016..1023), as engine_bench does; 128 decodes 128..135.
batched() {
  "$bin/llama-batched-bench" -m "$model" -t 2 -c 20480 -b 2048 -ub 512 -ntg 8 "$@" 2>>"$log"
}

echo "== prefill 128 / 512 / 1024 (pp); decode batch 1 at context 128 and 1024 (tg8 at depth)"
"$bin/llama-bench" -m "$model" -t 2 -p 128,512,1024 -n 0 -r 3 2>>"$log"
"$bin/llama-bench" -m "$model" -t 2 -p 0 -n 8 -d 128,1016 -r 3 2>>"$log"

echo "== decode batch 1/4/8/16, private contexts of 128 and 1016 tokens: S_TG t/s"
batched -npp 128,1016 -npl 1,4,8,16

echo "== decode batch 4/16 behind one shared 1016-token prompt: S_TG t/s"
batched -npp 1016 -npl 4,16 -pps -kvu
