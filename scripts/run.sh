#!/usr/bin/env bash
# Sets up this machine (Debian 12), builds kvtier and runs kvtierd with the
# larger bundled character-level model (models/fortunes-char-5m; --model DIR
# for another). Extra arguments go to kvtierd:
#   scripts/run.sh                                   # one generation from a sample prompt
#   scripts/run.sh --prompt "Q: Why" --temperature 0 # one generation from yours
#   scripts/run.sh --socket /tmp/kvtier.sock         # serve (no --prompt): kvtierctl, curl, ...
#   scripts/run.sh chat                              # chat with the bundled nanochat model
#                                                    # (models/fortunes-chat) in kvtierctl chat
# Set-up and build output go to stderr, so stdout is kvtierd's alone (the
# generated text, in one-shot mode).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh >&2
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DKVTIER_BUILD_TESTS=OFF >/dev/null
cmake --build build --target kvtierd kvtierctl >&2
if [[ "${1:-}" == chat ]]; then
  # kvtierd on a socket of its own, in the background, for as long as the
  # conversation lasts; arguments after `chat` go to kvtierctl chat.
  shift
  run=$(mktemp -d)
  trap 'kill "$daemon" 2>/dev/null; wait "$daemon" 2>/dev/null; rm -rf "$run"' EXIT
  build/daemon/kvtierd --model models/fortunes-chat --socket "$run/kvtier.sock" \
    --log-level warning 2>"$run/kvtierd.log" &
  daemon=$!
  for _ in $(seq 100); do
    build/ctl/kvtierctl --socket "$run/kvtier.sock" health >/dev/null 2>&1 && break
    kill -0 "$daemon" 2>/dev/null || { cat "$run/kvtierd.log" >&2; exit 1; }
    sleep 0.1
  done
  echo "fortunes-chat: a tiny nanochat model that tells the fortunes' jokes. Ask it one;" \
    "'clear' starts over, 'quit' ends." >&2
  build/ctl/kvtierctl --socket "$run/kvtier.sock" chat "$@"
  exit
fi
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
