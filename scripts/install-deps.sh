#!/usr/bin/env bash
# Installs the Debian packages kvtier builds and tests with, if any are
# missing. Uses sudo when not root. Safe to run again: it does nothing when
# everything is there.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git clang-format
  liburing-dev librocksdb-dev libboost-dev libcli11-dev nlohmann-json3-dev
  libxxhash-dev libtomlplusplus-dev libpcre2-dev libssl-dev libhiredis-dev libsystemd-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libopenblas-dev fio gnuplot-nox redis-server redis-tools curl prometheus nodejs python3-httpx python3-numpy chromium
)

# The npm packages the tests run as real clients and oracles, where npm can
# reach its registry (each test skips with the reason where it cannot): the
# openai library (tests/openai_client_test.cpp), tiktoken
# (tests/tiktoken_tokenizer_test.cpp) and puppeteer-core, which drives
# Debian's chromium through the page (tests/page_test.cpp).
npm_packages() {
  local root dir package
  root="$(cd "$(dirname "$0")/.." && pwd)/tests"
  command -v npm >/dev/null || return 0
  for entry in openai_client:openai tiktoken_oracle:tiktoken browser:puppeteer-core; do
    dir="$root/${entry%%:*}" package="${entry##*:}"
    [ -f "$dir/node_modules/$package/package.json" ] && continue
    echo "kvtier: installing the $package npm package in $dir" >&2
    (cd "$dir" && timeout 300 npm ci --no-audit --no-fund --loglevel=error) ||
      echo "kvtier: npm ci failed in $dir; the tests that use $package will skip" >&2
  done
}

# The CUDA Toolkit is optional and not a Debian package this build can use
# (Debian 12's nvidia-cuda-toolkit is 11.8, which refuses g++ 12): say what
# the build will find, so that a CPU-only build is never a surprise.
cuda_toolkit() {
  local nvcc
  nvcc="$(command -v nvcc || true)"
  [ -z "$nvcc" ] && [ -x /usr/local/cuda/bin/nvcc ] && nvcc=/usr/local/cuda/bin/nvcc
  if [ -n "$nvcc" ]; then
    echo "kvtier: CUDA Toolkit: $("$nvcc" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p') at $nvcc (the build adds the GPU engine)" >&2
  else
    echo "kvtier: no CUDA Toolkit (nvcc): the build is CPU only; README \"On a GPU\" says how to add it" >&2
  fi
}

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -eq 0 ]; then
  npm_packages
  cuda_toolkit
  exit 0
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
echo "kvtier: installing ${missing[*]}" >&2
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
npm_packages
cuda_toolkit
