#!/usr/bin/env python3
"""Runs one fixed workload against a kvtierd and writes every request's tokens.

For comparing devices (scripts/device_check.sh): the same workload against
`kvtierd --device cpu` and `--device cuda`, under pressure (a small L1, L2 and
L3), gives two files that `compare` sets side by side.

    device_tokens.py run SOCKET OUT.json     # the workload; its tokens to OUT.json
    device_tokens.py compare A.json B.json   # which requests differ, and where

The workload: 4 shared prefixes x 6 suffixes, all sent at once (so that
requests are preempted and their KV swapped down the tiers), half greedy and
half sampled with a fixed seed; then L1 and L2 are flushed (the prefixes
go down to L3) and the same 24 requests are sent again. With exact tiers,
round 2 on one device gives round 1's tokens (the tiers move bytes, not
values); int8 tiers may change some.
"""

import json
import os
import sys
from concurrent.futures import ThreadPoolExecutor

# The project's own client (examples/python/kvtier_client.py).
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "examples", "python"))
from kvtier_client import KvtierClient  # noqa: E402

PREFIXES = [
    "The quick brown fox jumps over the lazy dog while the old man watches from the porch "
    "and counts the clouds that drift across the afternoon sky, one by one, ",
    "A journey of a thousand miles begins with a single step, but the second step is the "
    "one that tells you whether you meant it or were only passing through, ",
    "You will be hungry again in one hour. Fortune favours the bold, and the bold are "
    "often hungry, so carry a sandwich and a sense of humour wherever you go ",
    "Never trust a computer you cannot throw out of a window, said the engineer, and "
    "then he bought three more and put them all on the top floor of the building ",
]
SUFFIXES = ["and then", "but why", "so we", "until the", "because", "when she"]


def workload():
    reqs = []
    for p, prefix in enumerate(PREFIXES):
        for s, suffix in enumerate(SUFFIXES):
            params = {"prompt": prefix + suffix, "max_tokens": 48, "ignore_eos": True}
            if (p + s) % 2 == 0:
                params["temperature"] = 0
            else:
                params.update(temperature=0.8, top_k=20, seed=1000 + 10 * p + s)
            reqs.append(params)
    return reqs


def run(path, out):
    reqs = workload()
    rounds = []
    with KvtierClient(path) as control:
        for rnd in range(2):
            if rnd == 1:
                control.call("cache.flush", {"tier": "l1"})
                control.call("cache.flush", {"tier": "l2"})
            # All at once, a connection each, so that the daemon runs them
            # side by side and preempts.
            with ThreadPoolExecutor(len(reqs)) as pool:
                results = list(pool.map(lambda r: one_request(path, r), reqs))
            rounds.append(
                [{"tokens": r["tokens"], "cached": r["cached_tokens"]} for r in results]
            )
        stats = control.stats()
        health = control.call("health")
    json.dump(
        {"device": health.get("device"), "rounds": rounds, "stats": stats},
        open(out, "w"),
        indent=1,
    )
    same = sum(a["tokens"] == b["tokens"] for a, b in zip(*rounds))
    cached = sum(sum(r["cached"].values()) for r in rounds[1])
    print(
        f"{out}: device {health.get('device')}; round 2 = round 1 for {same}/{len(reqs)} "
        f"requests; round 2 found {cached} prompt tokens cached"
    )
    return 0


def one_request(path, params):
    with KvtierClient(path) as client:
        return client.call("generate", params)


def first_difference(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b)) if len(a) != len(b) else -1


def compare(a_path, b_path):
    a, b = json.load(open(a_path)), json.load(open(b_path))
    reqs = workload()
    differ = 0
    for rnd in range(2):
        for i, (x, y) in enumerate(zip(a["rounds"][rnd], b["rounds"][rnd])):
            at = first_difference(x["tokens"], y["tokens"])
            if at >= 0:
                differ += 1
                kind = "greedy" if reqs[i]["temperature"] == 0 else "sampled"
                print(f"  round {rnd + 1} request {i} ({kind}): first differs at token {at}")
    total = 2 * len(reqs)
    print(f"{a['device']} vs {b['device']}: {total - differ}/{total} requests give the same tokens")
    return 0 if differ == 0 else 1


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "run":
        sys.exit(run(sys.argv[2], sys.argv[3]))
    if len(sys.argv) == 4 and sys.argv[1] == "compare":
        sys.exit(compare(sys.argv[2], sys.argv[3]))
    print(__doc__, file=sys.stderr)
    sys.exit(2)
