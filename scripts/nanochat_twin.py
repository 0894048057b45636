#!/usr/bin/python3
"""The eager PyTorch twin of kvtier's nanochat forward, for
bench/nanochat_bench: the same generation-5 architecture (the torch model of
scripts/train_nanochat.py, with a KV cache added here), on the same model
folder, on the same threads, timed the way the bench times kvtier:

  TTFT 512 / 1024   one prefill of random tokens into an empty cache
  decode batch 1    the mean step after a --context prompt (one untimed step)
  8 samples         --samples rows decoding behind that prompt, its cache
                    copied to every row (as nanochat's engine fans a
                    prefill out)
  peak RSS          this process's (getrusage)

Prints one JSON object. The weights are read from the file straight into the
parameters (no second copy, no mapping). Needs Debian's python3-torch.

    /usr/bin/python3 scripts/nanochat_twin.py MODEL_DIR [--threads 2]
        [--context 512] [--steps 16] [--samples 8]
"""
import argparse
import json
import math
import os
import resource
import struct
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_nanochat import GPT, norm, rope  # noqa: E402


def load(model_dir):
    with open(os.path.join(model_dir, "config.json")) as f:
        conf = json.load(f)
    if conf.get("generation") != 5:
        sys.exit("the twin is generation 5 only")
    model = GPT(conf, softcap=conf["softcap"])
    with open(os.path.join(model_dir, "model.safetensors"), "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        base = 8 + n
        for name, t in model.state_dict().items():
            entry = header[name]
            if entry["dtype"] != "F32" or list(entry["shape"]) != list(t.shape):
                sys.exit(f"{name}: {entry['dtype']} {entry['shape']}, expected F32 {list(t.shape)}")
            f.seek(base + entry["data_offsets"][0])
            f.readinto(memoryview(t.numpy()).cast("B"))
    model.eval()
    return model


@torch.no_grad()
def forward(m, ids, cache):
    """Logits of the last position of ids (B, T), which follow cache["len"]
    positions; appends their keys and values to the cache."""
    B, T = ids.shape
    L, V = m.cfg["n_layer"], m.cfg["vocab_size"]
    p0 = cache["len"]
    e = norm(m.transformer.wte(ids))  # before smear
    before = cache["prev"] if p0 > 0 else torch.zeros_like(e[:, 0])
    prev = torch.cat([before[:, None], e[:, :-1]], 1)
    mix = m.smear_lambda * torch.sigmoid(m.smear_gate(e[..., :24])) * prev
    if p0 == 0:
        mix[:, 0] = 0
    x = e + mix
    cache["prev"] = e[:, -1]
    x0 = x
    cos, sin = m.cos[p0:p0 + T], m.sin[p0:p0 + T]
    qpos, kpos = torch.arange(p0, p0 + T), torch.arange(0, p0 + T)
    backout = None
    for i, (blk, w) in enumerate(zip(m.transformer.h, m.windows())):
        a = blk.attn
        x = m.resid_lambdas[i] * x + m.x0_lambdas[i] * x0
        h = norm(x)
        q = a.c_q(h).view(B, T, a.H, a.D)
        k = a.c_k(h).view(B, T, a.Hkv, a.D)
        v = a.c_v(h).view(B, T, a.Hkv, a.D)
        if a.ve_gate is not None:
            gate = 3.0 * torch.sigmoid(a.ve_gate(h[..., :12]))
            v = v + gate.unsqueeze(-1) * m.value_embeds[str(i)](ids).view(B, T, a.Hkv, a.D)
        q, k = norm(rope(q, cos, sin)) * 1.2, norm(rope(k, cos, sin)) * 1.2
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        if p0 > 0:
            k = torch.cat([cache["k"][i], k], 2)
            v = torch.cat([cache["v"][i], v], 2)
        cache["k"][i], cache["v"][i] = k, v
        rep = a.H // a.Hkv
        kk, vv = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        mask = (kpos[None, :] <= qpos[:, None]) & (kpos[None, :] >= qpos[:, None] - w)
        att = (q @ kk.transpose(-2, -1)) / math.sqrt(a.D)
        att = att.masked_fill(~mask, float("-inf")).softmax(-1)
        x = x + a.c_proj((att @ vv).transpose(1, 2).reshape(B, T, -1))
        x = x + blk.mlp(norm(x))
        if i == L // 2:
            backout = x
    x = norm(x[:, -1] - m.backout_lambda * backout[:, -1])
    logits = m.lm_head(x)[..., :V]
    return m.softcap * torch.tanh(logits / m.softcap)


def empty_cache(m):
    L = m.cfg["n_layer"]
    return {"len": 0, "prev": None, "k": [None] * L, "v": [None] * L}


def prefill(m, T, seed):
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, m.cfg["vocab_size"], (1, T), generator=gen)
    cache = empty_cache(m)
    start = time.perf_counter()
    forward(m, ids, cache)
    cache["len"] = T
    return time.perf_counter() - start, cache


def decode_step_seconds(m, cache, rows, steps):
    if rows > 1:
        for key in ("k", "v"):
            cache[key] = [t.expand(rows, -1, -1, -1).contiguous() for t in cache[key]]
        cache["prev"] = cache["prev"].expand(rows, -1).contiguous()
    ids = torch.ones(rows, 1, dtype=torch.long)

    def step():
        forward(m, ids, cache)
        cache["len"] += 1

    step()  # untimed, as the bench's
    start = time.perf_counter()
    for _ in range(steps):
        step()
    return (time.perf_counter() - start) / steps


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model_dir")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--context", type=int, default=512)
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--samples", type=int, default=8)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    m = load(args.model_dir)
    prefill(m, 64, 1)  # warm-up, as the bench's
    ttft512 = min(prefill(m, 512, 512)[0] for _ in range(2))
    ttft1024 = prefill(m, 1024, 1024)[0]
    decode1 = decode_step_seconds(m, prefill(m, args.context, 7)[1], 1, args.steps)
    samples = decode_step_seconds(m, prefill(m, args.context, 7)[1], args.samples, args.steps)
    print(json.dumps({
        "ttft512_s": ttft512, "ttft1024_s": ttft1024, "decode1_s": decode1,
        "samples_tok_s": args.samples / samples,
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "torch": torch.__version__, "threads": args.threads}))


if __name__ == "__main__":
    main()
