#!/usr/bin/env bash
# The GPU checks in one run, for a GPU machine lent for minutes and reached
# only through a copy of this working tree (the device tool): build here,
# carry the programs there, run everything in one call, bring the logs back.
#
#   scripts/device_check.sh pack [BUILD_DIR]   # here: .devpkg.tar.xz from a CUDA build
#   scripts/device_check.sh run [SECONDS [STEPS]]  # there: the checks, logs to $OUT
#
# pack copies the programs of BUILD_DIR, default build-cuda, built for the
# GPU and for any x86-64 CPU with AVX2 (the other machine's is not this one's):
#   cmake -S . -B build-cuda -G Ninja -DCMAKE_BUILD_TYPE=Release -DKVTIER_CUDA=ON \
#     -DCMAKE_CUDA_ARCHITECTURES=90 -DKVTIER_NATIVE=OFF -DCMAKE_CXX_FLAGS=-march=x86-64-v3 \
#     -DKVTIER_CUDA_NANOCHAT=ON   # the nanochat GPU forward, until a GPU run lets it default on
#   ninja -C build-cuda kvtierd kvtierctl kvtier-router kvtier_tests engine_bench tier_bench \
#     kernels_bench soak loadgen
# with the shared libraries they load that a CUDA image may lack (RocksDB,
# liburing, hiredis, OpenBLAS, ...), and redis-server and redis-cli for the
# remote-tier tests, into .devpkg/, packed as .devpkg.tar.xz (about 18 MB,
# git-ignored through .git/info/exclude): carry that with the call.
#
# run, in order of what matters most, each step's log under $OUT:
#   1. nvidia-smi; every CUDA test (Cuda*, and those of open_device);
#   2. engine_bench (GPU figures after the CPU's), tier_bench --device cuda,
#      kernels_bench;
#   3. kvtierd --device cpu and --device cuda, each under pressure (a small L1,
#      L2, L3; exact tiers, then int8; the bundled nanochat model, exact), the
#      same workload (device_tokens.py): which requests give other tokens on
#      the GPU;
#   4. the whole suite in parallel shards (kvtierd's --device auto picks the
#      GPU there), and compute-sanitizer over the kernel tests beside it,
#      both stopped at the deadline (SECONDS from the start, default 360).
# STEPS (default "1 2 3 4") picks steps, to fit a short lease.
# The last lines printed are the summary.
set -uo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here" || exit 1
build="build-cuda"
pkg=".devpkg"

pack() {
  local src=${1:-$build}
  rm -rf "$pkg"
  mkdir -p "$pkg/$build"/{daemon,ctl,router,tests,bench} "$pkg"/{lib,lib-fallback,lib-glibc,bin}
  local progs=(daemon/kvtierd ctl/kvtierctl router/kvtier-router tests/kvtier_tests bench/engine_bench bench/tier_bench
    bench/kernels_bench bench/soak bench/loadgen)
  for p in "${progs[@]}"; do
    [[ -x $src/$p ]] || { echo "pack: $src/$p is missing (build it first)" >&2; return 1; }
    strip -o "$pkg/$build/$p" "$src/$p"
  done
  cp "$(command -v redis-server)" "$(command -v redis-cli)" "$pkg/bin/"
  cp -r "$src/daemon/systemd" "$pkg/$build/daemon/"  # tests/systemd_units_test.cpp reads it
  # Every library the programs load but glibc's own, the driver's and the
  # C++ runtime (the image's is newer); that one travels as a fall-back.
  local lib
  ldd "${progs[@]/#/$src/}" "$pkg"/bin/* | awk '/=> \// {print $3}' | sort -u |
    while read -r lib; do
      case $(basename "$lib") in
        libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|ld-linux*) cp -L "$lib" "$pkg/lib-glibc/" ;;
        libcuda.so*) ;;
        libstdc++.so*|libgcc_s.so*) cp -L "$lib" "$pkg/lib-fallback/" ;;
        *) cp -L "$lib" "$pkg/lib/" ;;
      esac
    done
  cp -L /lib64/ld-linux-x86-64.so.2 "$pkg/lib-glibc/"
  tar -cf - "$pkg" | xz -9 -T2 > "$pkg.tar.xz"
  local exclude
  exclude=$(git rev-parse --git-path info/exclude)
  mkdir -p "$(dirname "$exclude")"
  for p in "/$pkg/" "/$pkg.tar.xz"; do grep -qxF "$p" "$exclude" 2> /dev/null || echo "$p" >> "$exclude"; done
  du -sh "$pkg" "$pkg.tar.xz"
}

# Step 4 of run: the suite in shards beside compute-sanitizer, to the deadline.
suite() {
  local tests=$1 logs=$2 deadline=$3
  shift 3
  local loader=("$@") summary=$logs/summary.txt
  note() { echo "$*" | tee -a "$summary"; }
  local left=$((deadline - SECONDS)) shards=12 i
  ((left < 60)) && left=60
  local sanitizer=""
  if command -v compute-sanitizer > /dev/null; then
    timeout $((left - 5)) compute-sanitizer --tool memcheck --print-limit 20 "${loader[@]}" "$tests" \
      --gtest_filter='CudaKernels*:CudaForwardKernels*:CudaNanochatKernels*:CudaMatmul*:CudaKvCodec*' \
      > "$logs/memcheck.log" 2>&1 &
    sanitizer=$!
  fi
  local pids=()
  for ((i = 0; i < shards; i++)); do
    GTEST_TOTAL_SHARDS=$shards GTEST_SHARD_INDEX=$i OMP_NUM_THREADS=1 timeout "$left" "${loader[@]}" "$tests" \
      --gtest_brief=1 > "$logs/suite-$i.log" 2>&1 &
    pids+=($!)
  done
  for ((i = 0; i < shards; i++)); do
    wait "${pids[i]}" || note "suite shard $i: exit $? (1: a test failed; 124: stopped at the deadline)"
  done
  if [[ -n $sanitizer ]]; then
    wait "$sanitizer"
    note "memcheck: exit $? — $(grep -E 'ERROR SUMMARY|^\[  (PASSED|FAILED) ' "$logs/memcheck.log" | tr '\n' ' ')"
  else
    note "memcheck: compute-sanitizer is not on the PATH"
  fi
  count() { grep -h "^\[  $1\] [0-9]" "$logs"/suite-*.log | awk '{s += $4} END {print s + 0}'; }
  # --gtest_brief prints no count of failures: the failed tests, one line each.
  local failed
  failed=$(grep -hE '^\[  FAILED  \] [A-Za-z]' "$logs"/suite-*.log | sed 's/ (.*//' | sort -u)
  note "suite: $(count 'PASSED  ') passed, $(grep -c . <<< "$failed") failed, $(count 'SKIPPED ') skipped"
  [[ -n $failed ]] && echo "$failed" >> "$summary"
}

run() {
  local budget=${1:-360} steps=" ${2:-1 2 3 4} "
  local out=${OUT:-$here/device-out}
  local logs=$out/logs
  mkdir -p "$logs"
  local deadline=$((SECONDS + budget))
  # Python's tarfile: the image may have no xz.
  [[ -d $pkg ]] || python3 -c "import tarfile; tarfile.open('$pkg.tar.xz').extractall('.')" || return 1
  # The programs name the source folder and kvtierd by the paths they were
  # built with (/work/main/...): the same paths lead here.
  if [[ ! -e /work/main ]]; then mkdir -p /work && ln -s "$here" /work/main; fi
  [[ -e $build ]] || ln -s "$pkg/$build" "$build"
  export PATH=$here/$pkg/bin:$PATH:/usr/local/cuda/bin
  # The tests look for redis-server and redis-cli where Debian puts them.
  [[ -x /usr/bin/redis-server ]] || cp "$pkg"/bin/redis-* /usr/bin/
  export LD_LIBRARY_PATH=$here/$pkg/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  if ldd "$build/tests/kvtier_tests" | grep -q "not found"; then
    export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$here/$pkg/lib-fallback
  fi
  local tests=$build/tests/kvtier_tests summary=$logs/summary.txt
  : > "$summary"
  note() { echo "$*" | tee -a "$summary"; }
  # An image whose C library is older than the build machine's: the programs
  # run under the one they were built with (the kvtierd that tests start
  # cannot: those tests fail).
  local loader=()
  if ! "$tests" --gtest_list_tests > /dev/null 2> "$logs/start.txt"; then
    loader=("$here/$pkg/lib-glibc/ld-linux-x86-64.so.2" --library-path
      "$LD_LIBRARY_PATH:$here/$pkg/lib-fallback:$here/$pkg/lib-glibc")
    note "the programs do not start as built: $(head -c 400 "$logs/start.txt"); run under the build's C library"
  fi
  {
    date -u; uname -a; cat /etc/os-release; nvidia-smi; nproc; free -g
    ldd "$build/tests/kvtier_tests" "$build/daemon/kvtierd"
  } > "$logs/machine.txt" 2>&1
  note "device: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1)"

  # 1. The CUDA tests, alone on the GPU.
  if [[ $steps == *" 1 "* ]]; then
    OMP_NUM_THREADS=4 timeout 150 "${loader[@]}" "$tests" --gtest_filter='*Cuda*:*Device*' > "$logs/cuda_tests.log" 2>&1
    note "cuda tests: exit $? — $(grep -E '^\[  (PASSED  |FAILED  |SKIPPED )\] [0-9]' "$logs/cuda_tests.log" | tr '\n' ' ')"
    grep -E '^\[  (FAILED  |SKIPPED )\] [A-Za-z]' "$logs/cuda_tests.log" | sed 's/ (.*//' | sort -u >> "$summary"
  fi

  # 2. The figures, one program at a time.
  local name
  [[ $steps == *" 2 "* ]] && for name in engine_bench tier_bench kernels_bench; do
    local args=()
    [[ $name == tier_bench ]] && args=(--device cuda --l3-dir /tmp/tier_bench_l3)
    OMP_NUM_THREADS=2 timeout 150 "${loader[@]}" "$build/bench/$name" "${args[@]}" \
      > "$logs/$name.log" 2>&1
    note "$name: exit $?"
  done

  # 3. The daemon's tokens, CPU against GPU, under tier pressure.
  local run_name fmt dev model
  for run_name in exact int8 nanochat; do
    [[ $steps == *" 3 "* ]] || break
    fmt=$run_name model=models/fortunes-char
    [[ $run_name == nanochat ]] && fmt=exact model=models/fortunes-chat
    for dev in cpu cuda; do
      local dir=/tmp/kvtier-devcmp-$run_name-$dev
      rm -rf "$dir" && mkdir -p "$dir"
      "${loader[@]}" "$build/daemon/kvtierd" --model "$model" --device "$dev" --socket "$dir/k.sock" --max-kv-tokens 512 \
        --max-batch-size 8 --token-budget 64 --l2-bytes 2MiB --l3-path "$dir/l3" --l3-bytes 64MiB \
        --l2-format "$fmt" --l3-format "$fmt" > "$logs/kvtierd-$run_name-$dev.log" 2>&1 &
      local pid=$!
      for _ in $(seq 300); do [[ -S $dir/k.sock ]] && break; sleep 0.1; done
      timeout 120 python3 scripts/device_tokens.py run "$dir/k.sock" "$logs/tokens-$run_name-$dev.json" \
        >> "$summary" 2>&1 || note "device_tokens $run_name $dev: failed"
      kill -TERM "$pid" 2> /dev/null; wait "$pid"
      note "kvtierd --device $dev ($run_name: $model, $fmt tiers) exit $?"
    done
    [[ -f $logs/tokens-$run_name-cpu.json && -f $logs/tokens-$run_name-cuda.json ]] &&
      python3 scripts/device_tokens.py compare "$logs/tokens-$run_name-cpu.json" \
        "$logs/tokens-$run_name-cuda.json" >> "$summary" 2>&1
  done

  # 4. The whole suite in shards, compute-sanitizer beside it, to the deadline.
  [[ $steps == *" 4 "* ]] && suite "$tests" "$logs" "$deadline" "${loader[@]}"
  tar -C "$out" -czf "$out/logs.tar.gz" logs
  cp "$summary" "$out/summary.txt"
  rm -rf "$logs"
  echo "== summary"
  cat "$out/summary.txt"
}

case ${1:-} in
  pack) shift; pack "$@" ;;
  run) shift; run "$@" ;;
  *) sed -n '2,31p' "$0" >&2; exit 2 ;;
esac
