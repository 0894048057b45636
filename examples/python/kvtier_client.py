#!/usr/bin/env python3
"""A kvtierd client using only Python's standard library (3.11).

kvtierd speaks newline-delimited JSON-RPC 2.0 on a Unix socket
(docs/protocol.md). From your own code, with threads:

    with KvtierClient(timeout=60) as k:
        a = k.generate("Q: Why?\\nA:", max_tokens=40)   # sent at once
        b = k.generate("Q: Who?\\nA:", seed=7)          # beside it, same connection
        for piece in a:                                 # a's tokens as they come
            print(piece["text"], end="", flush=True)
        print(b.result()["text"])                       # or wait for the answer
        b.cancel()                                      # too late here: a no-op

or with asyncio, the same calls awaited:

    async with await AsyncKvtierClient.connect() as k:
        g = await k.generate("Q: Why?\\nA:")
        async for piece in g:
            print(piece["text"], end="")
        print((await g.result())["finish_reason"])

generate() sends only the params given, so kvtierd's defaults apply to the
rest (temperature 1, a seed of its own drawing: the result's `seed` replays
a run). It returns a Request at once; any number may be in flight on one
connection. An answer carries its request's JSON-RPC id, and each
generate.token notification its generate's (`rpc_id`), so each reaches its
own Request. rpc_id is required: a kvtierd too old to send it ends the
connection at its first token, with an error that says so.

Or run this file:

    kvtier_client.py [--socket PATH] [--connect-timeout S] [--timeout S] [--asyncio] COMMAND
      generate (--prompt TEXT [--prompt TEXT...] | --tokens 1,2,3) [--max-tokens N]
               [--temperature T] [--top-k K] [--top-p P] [--seed S] [--stop TEXT]...
               [--priority P] [-n N] [--cache-salt S] [--stream] [--json]
      cancel ID          (a running generate, by kvtierd's request id)
      stats | health     (the result, as JSON)

Several --prompt go out at once on one connection; their answers are
printed in the order given.

The socket: --socket, else $KVTIER_SOCKET, else
$XDG_RUNTIME_DIR/kvtier/kvtierd.sock (a daemon of your own) when it exists,
else /run/kvtier/kvtierd.sock (the service); a line on stderr says so when
the service's was used. Exit codes: 0 ok, 2 usage, 3 kvtierd unreachable
(or it broke the connection), 4 kvtierd answered with an error, 5 no answer
within --timeout.
"""

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import queue
import socket
import stat
import sys
import threading
import time
from typing import NamedTuple

SERVICE_SOCKET = "/run/kvtier/kvtierd.sock"  # kvtierd.service's
DEFAULT_CONNECT_TIMEOUT = 5.0


class KvtierError(Exception):
    """Anything that kept a call from getting its answer."""


class RpcError(KvtierError):
    """kvtierd answered with a JSON-RPC error (docs/protocol.md, Errors)."""

    def __init__(self, error):
        self.code, self.message = error.get("code"), error.get("message")
        super().__init__(f"error {self.code}: {self.message}")


class ConnectError(KvtierError, ConnectionError):
    """No connection to kvtierd: no socket, no permission, or it did not accept."""


class ConnectionLost(KvtierError, ConnectionError):
    """The connection ended (or kvtierd sent what this client cannot read) before the answer."""


class RequestTimeout(KvtierError, TimeoutError):
    """No answer within the request's timeout; a generate is then cancelled."""


# ---------------------------------------------------------------- the socket


class SocketChoice(NamedTuple):
    path: str
    note: str  # for stderr when the path is not the first candidate, else ""
    tried: list  # the candidates in order, for "cannot connect" errors


def _is_socket(path):
    try:
        return stat.S_ISSOCK(os.stat(path).st_mode)
    except OSError:
        return False


def socket_choose(env=None, service_socket=SERVICE_SOCKET):
    """Where kvtierd is when no --socket is given, as kvtierctl finds it:
    $KVTIER_SOCKET; else the first of $XDG_RUNTIME_DIR/kvtier/kvtierd.sock
    (kvtierd's default in a user session) and the service's socket that is
    a socket, with a `note` when it is the service's; else the first, so
    that the error names every path tried."""
    env = os.environ if env is None else env
    if env.get("KVTIER_SOCKET"):
        return SocketChoice(env["KVTIER_SOCKET"], "", [env["KVTIER_SOCKET"]])
    tried = [service_socket]
    if env.get("XDG_RUNTIME_DIR"):
        tried.insert(0, os.path.join(env["XDG_RUNTIME_DIR"], "kvtier/kvtierd.sock"))
    for i, path in enumerate(tried):
        if _is_socket(path):
            return SocketChoice(path, f"using {path} (no socket at {tried[0]})" if i else "", tried)
    return SocketChoice(tried[0], "", tried)


def _choice_for(path):
    if isinstance(path, SocketChoice):
        return path
    return socket_choose() if path is None else SocketChoice(path, "", [path])


def _connect(choice, connect_timeout):
    """A connected, blocking AF_UNIX socket. A listener whose backlog is
    full refuses a non-blocking connect (EAGAIN) instead of waiting, so the
    connect timeout is a retry loop (a kvtierd that accepts nothing)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.setblocking(connect_timeout is None)
    deadline = time.monotonic() + (connect_timeout or 0)
    try:
        while True:
            try:
                sock.connect(choice.path)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise TimeoutError(
                        f"it accepted no connection within {connect_timeout:g} s") from None
                time.sleep(0.01)
    except OSError as e:
        sock.close()
        either = f" (no socket at {', '.join(choice.tried[1:])} either)" if choice.tried[1:] else ""
        raise ConnectError(f"cannot connect to kvtierd at {choice.path}: "
                           f"{e.strerror or e}{either}") from None
    sock.setblocking(True)
    return sock


# ---------------------------------------------------------------- routing, for both clients


class _Router:
    """Matches kvtierd's lines to the requests sent; no I/O. A request is a
    Request or an AsyncRequest: the router numbers it (`id`), learns its
    `request_id` from its first token, and hands it each event with
    `_deliver((kind, payload))`, kind "token", "result" or "error". Not
    thread-safe: KvtierClient locks around each call."""

    def __init__(self):
        self._ids = itertools.count(1)
        self._pending = {}  # JSON-RPC id -> request not yet answered
        self.closed = None  # the ConnectionLost, once the connection has ended
        self._last_error = None  # an error with id null: maybe why kvtierd closed

    def open(self, r, method, params):
        """Registers r; returns the line to send."""
        if self.closed:
            raise self.closed
        r.id = next(self._ids)
        self._pending[r.id] = r
        line = {"jsonrpc": "2.0", "id": r.id, "method": method}
        if params:
            line["params"] = params
        return json.dumps(line).encode() + b"\n"

    def feed(self, line):
        """Handles one line; returns the requests whose cancel can go out
        now. Raises ValueError for a line it cannot read."""
        msg = json.loads(line)
        if "id" not in msg:  # a notification
            if msg.get("method") != "generate.token":
                return []
            params = msg["params"]
            if "rpc_id" not in params:
                raise ValueError("a generate.token without rpc_id: kvtierd is older than "
                                 "this client")
            r = self._pending.get(params["rpc_id"])
            if r is None:
                return []
            first = r.request_id is None
            r.request_id = params["id"]
            r._deliver(("token", params))
            return [r] if first and r._cancel_wanted else []
        r = self._pending.pop(msg["id"], None)
        if r is not None:
            r._deliver(("error", RpcError(msg["error"])) if "error" in msg else
                       ("result", msg["result"]))
        elif msg["id"] is None and "error" in msg:
            # A line kvtierd could not read, or its refusal of this
            # connection (max_connections) just before it closes it.
            self._last_error = RpcError(msg["error"])
        return []

    def want_cancel(self, r):
        """True when r's cancel can go out now. Before r's first token its
        request id is unknown: feed returns r once it is. An answered r is
        left alone."""
        if r.id not in self._pending:
            return False
        r._cancel_wanted = True
        return r.request_id is not None

    def close(self, reason):
        """Fails every request not yet answered: the connection has ended."""
        if reason is not None and not isinstance(reason, OSError):
            self.closed = ConnectionLost(
                f"kvtierd sent what this client cannot read ({reason}); the connection is closed")
        else:
            why = self._last_error or reason
            self.closed = ConnectionLost("kvtierd closed the connection"
                                         + (f": {why}" if why else ""))
        for r in self._pending.values():
            r._deliver(("error", self.closed))
        self._pending.clear()


class _Request:
    """What Request and AsyncRequest share."""

    def __init__(self, client, method, timeout):
        self._client, self._method, self._timeout = client, method, timeout
        self._deadline = None if timeout is None else time.monotonic() + timeout
        self.id = None  # the JSON-RPC id
        self.request_id = None  # kvtierd's id of a generate, from its first token
        self._cancel_wanted = False
        self._final = None  # ("result", value) or ("error", exception), once read

    def _left(self):
        return None if self._deadline is None else max(0.0, self._deadline - time.monotonic())

    def _read(self, event):
        """Records an event read; None: the timeout has passed."""
        if event is None:
            cancelling = "; cancelling it" if self._method == "generate" else ""
            event = ("error", RequestTimeout(f"{self._method} (id {self.id}) got no answer from "
                                             f"kvtierd within {self._timeout:g} s{cancelling}"))
        if event[0] != "token":
            self._final = event
        return event


class _Calls:
    """The calls of both clients, made with their submit() and call() (the
    asyncio client's return awaitables)."""

    def generate(self, prompt, *, timeout=..., **params):
        """Starts generating a continuation of `prompt` (text, or a list of
        token ids); returns its request. Keyword arguments are generate's
        params (max_tokens, temperature, top_k, top_p, seed, stop, priority,
        n, cache_salt, logprobs, ignore_eos, eviction); those left out or
        None are not sent, so kvtierd's defaults apply. Always streamed:
        the first token names the request, which cancel needs."""
        key = "tokens" if isinstance(prompt, list) else "prompt"
        given = {k: v for k, v in params.items() if v is not None}
        return self.submit("generate", {key: prompt, **given, "stream": True}, timeout=timeout)

    def stats(self):
        return self.call("stats")

    def health(self):
        return self.call("health")

    def cancel(self, request_id):
        """Cancels any generate by kvtierd's request id (see Access in
        docs/protocol.md for whose)."""
        return self.call("cancel", {"id": request_id})


def _lost(e):
    return ConnectionLost(f"kvtierd closed the connection: {e.strerror or e}")


# ---------------------------------------------------------------- threads


class Request(_Request):
    """One request in flight. Iterating gives a generate's token
    notifications' params (id, rpc_id, sample, tokens, text) as they come;
    result() waits for the answer. Either raises RpcError, ConnectionLost or
    RequestTimeout. Use it from one thread at a time."""

    def __init__(self, *args):
        super().__init__(*args)
        self._events = queue.SimpleQueue()
        self._deliver = self._events.put

    def _next(self):
        if self._final:
            return self._final
        try:
            return self._read(self._events.get(timeout=self._left()))
        except queue.Empty:
            self.cancel()
            return self._read(None)

    def __iter__(self):
        while (event := self._next())[0] == "token":
            yield event[1]
        if event[0] == "error":
            raise event[1]

    def result(self):
        """The answer's result (tokens not read yet are skipped)."""
        for _ in self:
            pass
        return self._final[1]

    def cancel(self):
        """Asks kvtierd to stop this generate; it then answers with
        finish_reason "cancelled" and the tokens made so far. Before the
        first token it goes out as soon as that names the request."""
        self._client._cancel(self)


class KvtierClient(_Calls):
    """One connection to kvtierd; thread-safe. `path`: the socket (None:
    socket_choose()'s). `connect_timeout`: seconds to wait for kvtierd to
    accept. `timeout`: each request's default seconds from being sent to
    its answer (None: no limit)."""

    def __init__(self, path=None, *, connect_timeout=DEFAULT_CONNECT_TIMEOUT, timeout=None):
        self.socket_choice = _choice_for(path)
        self.timeout = timeout
        self._sock = _connect(self.socket_choice, connect_timeout)
        self._router = _Router()
        self._lock = threading.Lock()  # the router's
        self._send_lock = threading.Lock()  # whole lines on the socket
        self._reader = threading.Thread(target=self._read_loop, daemon=True)
        self._reader.start()

    def close(self):
        """Closes the connection: kvtierd cancels the requests still running."""
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._reader.join()
        self._sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _read_loop(self):
        reason = None
        try:
            with self._sock.makefile("rb") as lines:
                for line in lines:
                    with self._lock:
                        to_cancel = self._router.feed(line)
                    for r in to_cancel:
                        self._send_cancel(r)
        except Exception as e:  # whatever ends the reader ends the connection
            reason = e
            with contextlib.suppress(OSError):
                self._sock.shutdown(socket.SHUT_RDWR)  # kvtierd cancels what is running
        with self._lock:
            self._router.close(reason)

    def submit(self, method, params=None, *, timeout=...):
        """Sends a request; returns its Request at once."""
        r = Request(self, method, self.timeout if timeout is ... else timeout)
        with self._lock:
            line = self._router.open(r, method, params)
        with self._send_lock:
            try:
                self._sock.sendall(line)
            except OSError as e:
                raise _lost(e) from None
        return r

    def call(self, method, params=None, *, timeout=...):
        """Sends a request and returns its result."""
        return self.submit(method, params, timeout=timeout).result()

    def _cancel(self, r):
        with self._lock:
            now = self._router.want_cancel(r)
        if now:
            self._send_cancel(r)

    def _send_cancel(self, r):
        # Its answer is not read: -32602 means the generate ended first, and
        # the generate's own answer says how it ended.
        with contextlib.suppress(KvtierError):
            self.submit("cancel", {"id": r.request_id}, timeout=None)


# ---------------------------------------------------------------- asyncio


class AsyncRequest(_Request):
    """As Request, awaited: `async for` gives the token notifications,
    `await result()` the answer, `await cancel()` stops a generate."""

    def __init__(self, *args):
        super().__init__(*args)
        self._events = asyncio.Queue()
        self._deliver = self._events.put_nowait

    async def _next(self):
        if self._final:
            return self._final
        try:
            return self._read(await asyncio.wait_for(self._events.get(), self._left()))
        except TimeoutError:
            await self.cancel()
            return self._read(None)

    async def __aiter__(self):
        while (event := await self._next())[0] == "token":
            yield event[1]
        if event[0] == "error":
            raise event[1]

    async def result(self):
        async for _ in self:
            pass
        return self._final[1]

    async def cancel(self):
        if self._client._router.want_cancel(self):
            await self._client._send_cancel(self)


class AsyncKvtierClient(_Calls):
    """KvtierClient for asyncio (one event loop): open it with
    `await AsyncKvtierClient.connect(path, connect_timeout=..., timeout=...)`."""

    def __init__(self, choice, reader, writer, timeout):
        self.socket_choice, self.timeout = choice, timeout
        self._reader, self._writer = reader, writer
        self._router = _Router()
        self._task = asyncio.get_running_loop().create_task(self._read_loop())

    @classmethod
    async def connect(cls, path=None, *, connect_timeout=DEFAULT_CONNECT_TIMEOUT, timeout=None):
        choice = _choice_for(path)
        # Connected as the threaded client does (asyncio's connect would not
        # wait out a full backlog), then handed to asyncio.
        sock = await asyncio.to_thread(_connect, choice, connect_timeout)
        # A result with logprobs can be a long line: no 64 KiB cap.
        reader, writer = await asyncio.open_unix_connection(sock=sock, limit=1 << 30)
        return cls(choice, reader, writer, timeout)

    async def close(self):
        self._writer.close()
        with contextlib.suppress(OSError):
            await self._writer.wait_closed()
        await self._task

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self.close()

    async def _read_loop(self):
        reason = None
        try:
            while line := await self._reader.readline():
                for r in self._router.feed(line):
                    await self._send_cancel(r)
        except Exception as e:  # whatever ends the reader ends the connection
            reason = e
            self._writer.close()  # kvtierd cancels what is running
        self._router.close(reason)

    async def submit(self, method, params=None, *, timeout=...):
        r = AsyncRequest(self, method, self.timeout if timeout is ... else timeout)
        self._writer.write(self._router.open(r, method, params))
        try:
            await self._writer.drain()
        except OSError as e:
            raise _lost(e) from None
        return r

    async def call(self, method, params=None, *, timeout=...):
        return await (await self.submit(method, params, timeout=timeout)).result()

    async def _send_cancel(self, r):
        with contextlib.suppress(KvtierError):
            await self.submit("cancel", {"id": r.request_id}, timeout=None)


# ---------------------------------------------------------------- command line

EXIT_OK, EXIT_USAGE, EXIT_UNREACHABLE, EXIT_RPC_ERROR, EXIT_TIMEOUT = 0, 2, 3, 4, 5


def _parse_args(argv):
    parser = argparse.ArgumentParser(
        prog="kvtier_client.py", description="kvtierd client (standard library only)",
        epilog="The socket: --socket, else $KVTIER_SOCKET, else $XDG_RUNTIME_DIR/kvtier/"
        "kvtierd.sock (a daemon of your own) when it exists, else /run/kvtier/kvtierd.sock "
        "(the service). Exit codes: 0 ok, 2 usage, 3 kvtierd unreachable (or it broke the "
        "connection), 4 kvtierd answered with an error, 5 no answer within --timeout.")
    parser.add_argument("--socket", help="kvtierd's socket (env KVTIER_SOCKET)")
    parser.add_argument("--connect-timeout", type=float, default=DEFAULT_CONNECT_TIMEOUT,
                        metavar="S",
                        help="seconds to wait for kvtierd to accept (default %(default)g)")
    parser.add_argument("--timeout", type=float, metavar="S",
                        help="seconds a request may take to be answered (default: no limit); "
                        "a generate past it is cancelled")
    parser.add_argument("--asyncio", action="store_true",
                        help="use the asyncio client (the same behaviour)")
    sub = parser.add_subparsers(dest="command", required=True)
    gen = sub.add_parser("generate", help="generate a continuation of a prompt")
    prompt = gen.add_mutually_exclusive_group(required=True)
    prompt.add_argument("--prompt", action="append",
                        help="text to continue; several go out at once on one connection")
    prompt.add_argument("--tokens", help="token ids to continue, comma-separated")
    # Left out (None) unless given: kvtierd's defaults then apply.
    gen.add_argument("--max-tokens", type=int)
    gen.add_argument("--temperature", type=float)
    gen.add_argument("--top-k", type=int)
    gen.add_argument("--top-p", type=float)
    gen.add_argument("--seed", type=int)
    gen.add_argument("--stop", action="append", help="a stop string (repeatable)")
    gen.add_argument("--priority", type=int)
    gen.add_argument("-n", "--samples", type=int, dest="n")
    gen.add_argument("--cache-salt")
    gen.add_argument("--stream", action="store_true", help="print text as it is generated")
    gen.add_argument("--json", action="store_true",
                     help="print the result as JSON (with --stream, each notification first)")
    cancel = sub.add_parser("cancel", help="cancel a running generate by kvtierd's request id")
    cancel.add_argument("request_id", type=int, metavar="ID")
    sub.add_parser("stats", help="scheduler and request counters, as JSON")
    sub.add_parser("health", help="status, device, model and budgets, as JSON")
    args = parser.parse_args(argv)
    args.params = {"id": args.request_id} if args.command == "cancel" else None
    if args.command == "generate":
        args.prompts = args.prompt
        if args.tokens is not None:
            try:
                args.prompts = [[int(t) for t in args.tokens.split(",")]]
            except ValueError:
                parser.error(f"--tokens: not comma-separated integers: {args.tokens}")
        if args.stream and len(args.prompts) > 1:
            parser.error("--stream takes one --prompt")
        args.params = {k: getattr(args, k) for k in (
            "max_tokens", "temperature", "top_k", "top_p", "seed", "stop", "priority", "n",
            "cache_salt")}
    return args


def _print_start(args, prompt):
    if args.stream and not args.json and isinstance(prompt, str):
        print(prompt, end="", flush=True)


def _print_token(args, params):
    if args.json:
        print(json.dumps({"jsonrpc": "2.0", "method": "generate.token", "params": params}),
              flush=True)
    elif params["sample"] == 0:
        print(params["text"], end="", flush=True)


def _print_result(args, prompt, result):
    if args.json:
        print(json.dumps(result), flush=True)
    elif args.stream:
        print(flush=True)
    else:
        print((prompt if isinstance(prompt, str) else "") + result["text"], flush=True)


def _run(args, k):
    if args.command != "generate":
        return print(json.dumps(k.call(args.command, args.params)))
    requests = [k.generate(p, **args.params) for p in args.prompts]
    for prompt, r in zip(args.prompts, requests):
        _print_start(args, prompt)
        if args.stream:
            for params in r:
                _print_token(args, params)
        _print_result(args, prompt, r.result())


async def _run_async(args):  # _run, awaited
    async with await AsyncKvtierClient.connect(
            args.socket_choice, connect_timeout=args.connect_timeout,
            timeout=args.timeout) as k:
        if args.command != "generate":
            return print(json.dumps(await k.call(args.command, args.params)))
        requests = [await k.generate(p, **args.params) for p in args.prompts]
        for prompt, r in zip(args.prompts, requests):
            _print_start(args, prompt)
            if args.stream:
                async for params in r:
                    _print_token(args, params)
            _print_result(args, prompt, await r.result())


def main(argv=None):
    args = _parse_args(argv)
    args.socket_choice = _choice_for(args.socket)
    if args.socket_choice.note:
        print(f"kvtier_client: {args.socket_choice.note}", file=sys.stderr)
    try:
        if args.asyncio:
            asyncio.run(_run_async(args))
        else:
            with KvtierClient(args.socket_choice, connect_timeout=args.connect_timeout,
                              timeout=args.timeout) as k:
                _run(args, k)
        return EXIT_OK
    except RpcError as e:
        print(f"kvtier_client: kvtierd: {e}", file=sys.stderr)
        return EXIT_RPC_ERROR
    except RequestTimeout as e:
        print(f"kvtier_client: {e}", file=sys.stderr)
        return EXIT_TIMEOUT
    except (KvtierError, OSError) as e:
        print(f"kvtier_client: {e}", file=sys.stderr)
        return EXIT_UNREACHABLE
    except KeyboardInterrupt:
        return 130  # closing the connection has cancelled what was running


if __name__ == "__main__":
    sys.exit(main())
