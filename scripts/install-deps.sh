#!/usr/bin/env bash
# Installs the Debian packages kvtier builds and tests with, if any are
# missing. Uses sudo when not root. Safe to run again: it does nothing when
# everything is there.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git clang-format
  liburing-dev librocksdb-dev libboost-dev libcli11-dev nlohmann-json3-dev
  libxxhash-dev libssl-dev libhiredis-dev libsystemd-dev libgtest-dev libgmock-dev libbenchmark-dev
  libopenblas-dev fio gnuplot-nox redis-server redis-tools curl prometheus
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
echo "kvtier: installing ${missing[*]}" >&2
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
