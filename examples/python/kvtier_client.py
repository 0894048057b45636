#!/usr/bin/env python3
"""A kvtierd client using only Python's standard library (socket + json).

kvtierd speaks newline-delimited JSON-RPC 2.0 on a Unix socket
(docs/protocol.md). Use the class from your own code:

    with KvtierClient("/run/kvtier/kvtierd.sock") as k:
        result = k.generate("The ", max_tokens=40, seed=1,
                            on_text=lambda text: print(text, end=""))
        print(k.stats()["requests_completed"])

or run this file:

    kvtier_client.py [--socket PATH] generate --prompt TEXT [--max-tokens N]
                     [--temperature T] [--seed S] [--stream] [--json]
    kvtier_client.py [--socket PATH] stats

The socket: --socket, else $KVTIER_SOCKET, else kvtierd's default
($XDG_RUNTIME_DIR/kvtier/kvtierd.sock, or /run/kvtier/kvtierd.sock).
Exit codes as kvtierctl's: 0 ok, 2 usage, 3 unreachable, 4 request error.
"""

import argparse
import itertools
import json
import os
import socket
import sys


class RpcError(Exception):
    """The daemon answered with a JSON-RPC error."""

    def __init__(self, code, message):
        super().__init__(f"error {code}: {message}")
        self.code = code
        self.message = message


def default_socket_path():
    if os.environ.get("KVTIER_SOCKET"):
        return os.environ["KVTIER_SOCKET"]
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    return os.path.join(runtime, "kvtier/kvtierd.sock") if runtime else "/run/kvtier/kvtierd.sock"


class KvtierClient:
    """One connection; one call at a time (responses are matched by id)."""

    def __init__(self, path=None):
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.connect(path or default_socket_path())
        self._file = self._sock.makefile("rwb")
        self._ids = itertools.count(1)

    def close(self):
        self._file.close()
        self._sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def call(self, method, params=None, on_notification=None):
        """Sends one request and returns its result; notifications that arrive
        meanwhile (a streamed generate's tokens) go to on_notification."""
        rpc_id = next(self._ids)
        request = {"jsonrpc": "2.0", "id": rpc_id, "method": method, "params": params or {}}
        self._file.write(json.dumps(request).encode() + b"\n")
        self._file.flush()
        while True:
            line = self._file.readline()
            if not line:
                raise ConnectionError("kvtierd closed the connection")
            msg = json.loads(line)
            if "id" not in msg:
                if on_notification:
                    on_notification(msg)
                continue
            if msg["id"] != rpc_id:
                continue
            if "error" in msg:
                raise RpcError(msg["error"]["code"], msg["error"]["message"])
            return msg["result"]

    def generate(self, prompt, on_text=None, on_tokens=None, **params):
        """Generates a continuation of `prompt` (text, or a list of token ids).
        With on_text / on_tokens the request is streamed and they receive each
        piece of sample 0 as it comes. Other keyword arguments are generate's
        params (max_tokens, temperature, top_k, top_p, seed, stop, priority, n)."""
        params = dict(params)
        params["tokens" if isinstance(prompt, list) else "prompt"] = prompt
        stream = on_text is not None or on_tokens is not None
        params["stream"] = stream

        def notification(msg):
            if msg.get("method") != "generate.token" or msg["params"].get("sample", 0) != 0:
                return
            if on_text:
                on_text(msg["params"]["text"])
            if on_tokens:
                on_tokens(msg["params"]["tokens"])

        return self.call("generate", params, notification if stream else None)

    def stats(self):
        return self.call("stats")


def main(argv=None):
    parser = argparse.ArgumentParser(description="kvtierd client (standard library only)")
    parser.add_argument("--socket", default=None, help="kvtierd's socket (env KVTIER_SOCKET)")
    sub = parser.add_subparsers(dest="command", required=True)
    gen = sub.add_parser("generate", help="generate a continuation of a prompt")
    gen.add_argument("--prompt", required=True)
    gen.add_argument("--max-tokens", type=int, default=64)
    gen.add_argument("--temperature", type=float, default=0.8)
    gen.add_argument("--seed", type=int, default=0)
    gen.add_argument("--stream", action="store_true", help="print text as it is generated")
    gen.add_argument("--json", action="store_true",
                     help="print each streamed piece and then the result as JSON lines")
    sub.add_parser("stats", help="scheduler and request counters, as JSON")
    args = parser.parse_args(argv)

    try:
        client = KvtierClient(args.socket)
    except OSError as e:
        print(f"kvtier_client: cannot connect to kvtierd: {e}", file=sys.stderr)
        return 3
    try:
        with client:
            if args.command == "stats":
                print(json.dumps(client.stats()))
                return 0
            params = {"max_tokens": args.max_tokens, "temperature": args.temperature,
                      "seed": args.seed}
            if args.json:
                on_tokens = (lambda tokens: print(json.dumps({"tokens": tokens}), flush=True))
                result = client.generate(args.prompt, on_tokens=on_tokens if args.stream else None,
                                         **params)
                print(json.dumps(result))
            elif args.stream:
                print(args.prompt, end="", flush=True)
                client.generate(args.prompt, on_text=lambda t: print(t, end="", flush=True),
                                **params)
                print()
            else:
                print(args.prompt + client.generate(args.prompt, **params)["text"])
            return 0
    except RpcError as e:
        print(f"kvtier_client: kvtierd: {e}", file=sys.stderr)
        return 4
    except (OSError, ValueError) as e:
        print(f"kvtier_client: {e}", file=sys.stderr)
        return 3


if __name__ == "__main__":
    sys.exit(main())
