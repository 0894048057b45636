#!/usr/bin/env bash
# Sets up this machine (Debian 12), builds kvtier and runs the bundled
# character-level model on a prompt. Extra arguments go to kvtierd, e.g.
#   scripts/run.sh --prompt "Q: Why" --temperature 0
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DKVTIER_BUILD_TESTS=OFF >/dev/null
cmake --build build --target kvtierd
case " $* " in
  *" --prompt"*) ;;
  *) set -- --prompt "The secret of life is" "$@" ;;
esac
exec build/daemon/kvtierd "$@"
