#!/usr/bin/env bash
# Sets up this machine (Debian 12), builds kvtier and runs kvtierd with the
# larger bundled character-level model (models/fortunes-char-5m; --model DIR
# for another). Extra arguments go to kvtierd:
#   scripts/run.sh                                   # one generation from a sample prompt
#   scripts/run.sh --prompt "Q: Why" --temperature 0 # one generation from yours
#   scripts/run.sh --socket /tmp/kvtier.sock         # serve (no --prompt): kvtierctl, curl, ...
# Set-up and build output go to stderr, so stdout is kvtierd's alone (the
# generated text, in one-shot mode).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh >&2
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DKVTIER_BUILD_TESTS=OFF >/dev/null
cmake --build build --target kvtierd kvtierctl >&2
case " $* " in
  *" --prompt"* | *" --socket"* | *" --config"* | *" --help"* | *" -h "* | *" --version"*) ;;
  *) set -- --prompt "The secret of life is" "$@" ;;
esac
# The larger bundled model writes readable text; kvtierd's own default is the
# small one, which the tests use.
case " $* " in
  *" --model"* | *" --config"*) ;;
  *) set -- --model models/fortunes-char-5m "$@" ;;
esac
exec build/daemon/kvtierd "$@"
