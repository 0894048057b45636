#!/usr/bin/python3
"""The nanochat forward pass in numpy, written from ../shared/notes/nanochat.md
section 2 (not from kvtier's C++), for tests/nanochat_model_test.cpp.

    nanochat_reference.py MODEL_DIR TOKENS_JSON OUT_FILE [GREEDY_STEPS]

Reads MODEL_DIR/config.json and MODEL_DIR/model.safetensors (F32 or BF16),
runs the full-sequence forward over the token ids in TOKENS_JSON (a JSON
list) in float64, and writes every position's logits (positions x
vocab_size) to OUT_FILE as little-endian float32. With GREEDY_STEPS, it
then appends that many greedy tokens, each from a fresh full forward, and
prints them as a JSON list.

Arithmetic is float64 throughout but for the rotary table, which is made
as nanochat's is (inverse frequencies and angles in float32, cos and sin of
the float32 angle rounded to float32, then to bfloat16 where the config's
rope_table says so): a table entry that rounds differently moves logits by
far more than the test's tolerance.
"""
import json
import struct
import sys

import numpy as np


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    base = 8 + n
    tensors = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        raw = data[base + begin : base + end]
        shape = entry["shape"]
        if entry["dtype"] == "F32":
            array = np.frombuffer(raw, dtype="<f4")
        elif entry["dtype"] == "BF16":
            array = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            raise SystemExit(f"{name}: dtype {entry['dtype']} not handled here")
        tensors[name] = array.reshape(shape).astype(np.float64)
    return tensors


def norm(x):
    eps = float(np.finfo(np.float32).eps)  # F.rms_norm's default for fp32
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)


def to_bf16(x):
    bits = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return rounded.astype(np.uint32).view(np.float32)


def rotary_table(head_dim, base, positions, bf16):
    channels = np.arange(0, head_dim, 2, dtype=np.float32)
    inv_freq = (1.0 / np.power(np.float64(base), (channels / np.float32(head_dim)).astype(np.float64))).astype(np.float32)
    angle = np.outer(np.arange(positions, dtype=np.float32), inv_freq).astype(np.float32)
    cos = np.cos(angle.astype(np.float64)).astype(np.float32)
    sin = np.sin(angle.astype(np.float64)).astype(np.float32)
    if bf16:
        cos, sin = to_bf16(cos), to_bf16(sin)
    return cos.astype(np.float64), sin.astype(np.float64)


def rope(x, cos, sin):
    # x (T, heads, D); pairs (j, j + D/2); rotation by -theta, as nanochat.
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    c, s = cos[:, None, :], sin[:, None, :]
    return np.concatenate([x1 * c + x2 * s, -x1 * s + x2 * c], axis=-1)


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


class Nanochat:
    def __init__(self, model_dir):
        with open(f"{model_dir}/config.json") as f:
            self.c = json.load(f)
        self.w = read_safetensors(f"{model_dir}/model.safetensors")
        c = self.c
        self.g = c["generation"]
        self.L, self.H, self.Hkv, self.C = c["n_layer"], c["n_head"], c["n_kv_head"], c["n_embd"]
        self.D = self.C // self.H
        self.V, self.S = c["vocab_size"], c["sequence_len"]
        base = 100000.0 if self.g >= 4 else 10000.0
        context = c.get("context", self.S)
        self.cos, self.sin = rotary_table(self.D, base, context, c["rope_table"] == "bf16")

    def window(self, i):
        if self.g < 2:
            return None
        S = self.S
        pattern = self.c["window_pattern"].upper()
        if i == self.L - 1 or pattern[i % len(pattern)] == "L":
            return S
        if self.g == 4:
            return -(-S // 384) * 128
        if self.g == 5:
            return -(-S // 512) * 128
        return S // 2

    def forward(self, ids):
        w, L, H, Hkv, C, D = self.w, self.L, self.H, self.Hkv, self.C, self.D
        T = len(ids)
        ids = np.array(ids)
        x = norm(w["transformer.wte.weight"][ids])
        if self.g >= 5:
            pre = x.copy()
            gate = sigmoid(x[1:, :24] @ w["smear_gate.weight"].T)  # (T-1, 1)
            x[1:] = x[1:] + w["smear_lambda"][0] * gate * pre[:-1]
        x0 = x
        backout = None
        cos, sin = self.cos[:T], self.sin[:T]
        pos = np.arange(T)
        for i in range(L):
            p = f"transformer.h.{i}."
            if self.g >= 2:
                x = w["resid_lambdas"][i] * x + w["x0_lambdas"][i] * x0
            h = norm(x)
            q = (h @ w[p + "attn.c_q.weight"].T).reshape(T, H, D)
            k = (h @ w[p + "attn.c_k.weight"].T).reshape(T, Hkv, D)
            v = (h @ w[p + "attn.c_v.weight"].T).reshape(T, Hkv, D)
            if f"value_embeds.{i}.weight" in w:
                ve = w[f"value_embeds.{i}.weight"][ids].reshape(T, Hkv, D)
                channels = 12 if self.g >= 4 else 32
                scale = 3.0 if self.g >= 4 else 2.0
                gate = scale * sigmoid(h[:, :channels] @ w[p + "attn.ve_gate.weight"].T)
                v = v + gate[:, :, None] * ve
            q, k = norm(rope(q, cos, sin)), norm(rope(k, cos, sin))
            if self.g >= 4:
                s = 1.2 if self.g == 5 else 1.15
                q, k = q * s, k * s
            # Causal, windowed: query t sees keys t - w .. t.
            visible = pos[None, :] <= pos[:, None]
            win = self.window(i)
            if win is not None:
                visible &= pos[None, :] >= pos[:, None] - win
            out = np.empty((T, H, D))
            for hh in range(H):
                kh = hh // (H // Hkv)
                scores = q[:, hh, :] @ k[:, kh, :].T / np.sqrt(D)
                scores = np.where(visible, scores, -np.inf)
                scores = np.exp(scores - scores.max(axis=1, keepdims=True))
                out[:, hh, :] = (scores / scores.sum(axis=1, keepdims=True)) @ v[:, kh, :]
            x = x + out.reshape(T, C) @ w[p + "attn.c_proj.weight"].T
            f = norm(x) @ w[p + "mlp.c_fc.weight"].T
            x = x + (np.maximum(f, 0) ** 2) @ w[p + "mlp.c_proj.weight"].T
            if self.g >= 5 and i == L // 2:
                backout = x
        if backout is not None:
            x = x - w["backout_lambda"][0] * backout
        logits = (norm(x) @ w["lm_head.weight"].T)[:, : self.V]
        cap = self.c.get("softcap", 15.0)
        return cap * np.tanh(logits / cap)


def main():
    model_dir, tokens_json, out_file = sys.argv[1:4]
    steps = int(sys.argv[4]) if len(sys.argv) > 4 else 0
    with open(tokens_json) as f:
        ids = json.load(f)
    model = Nanochat(model_dir)
    model.forward(ids).astype("<f4").tofile(out_file)
    if steps:
        seq = list(ids)
        for _ in range(steps):
            seq.append(int(np.argmax(model.forward(seq)[-1])))
        print(json.dumps(seq[len(ids) :]))


if __name__ == "__main__":
    main()
