#!/usr/bin/python3
"""Golden reference data for kvtier's GPT-2 engine.

1. Writes two tiny random models (fixed seeds):
     tests/data/tiny-nanogpt/  nanoGPT names, [out, in] Linear layout, erf GELU,
                               bias=false (no bias tensors at all)
     tests/data/tiny-hf/       Hugging Face GPT-2 names, Conv1D [in, out] layout,
                               gelu_new (tanh), biases, plus the h.{i}.attn.bias
                               causal-mask buffers that a loader must ignore
2. Writes golden.json into each of models/fortunes-char/, models/fortunes-char-5m/,
   tests/data/tiny-nanogpt/ and tests/data/tiny-hf/: logits at selected positions and a greedy
   continuation, computed by the float64 functional forward in this file.

The forward pass here is written independently of scripts/train_char_model.py
(a functional implementation straight from the safetensors tensors) so the two
check each other; scripts/check_golden.py cross-checks them.

Usage: /usr/bin/python3 scripts/make_golden.py [--root REPO_ROOT]
Running it twice produces byte-identical files.
"""
import os

# One BLAS/OpenMP thread: the machine is shared, and Debian's torch links the
# pthread OpenBLAS, which ignores torch.set_num_threads and busy-waits when
# oversubscribed.  Must be set before torch is imported.
for _v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import argparse
import json
import math
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from safetensors_io import load_file, save_file  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GENERATOR = "scripts/make_golden.py"


# ----------------------------------------------------------------------------
# loading: normalise either naming scheme to one canonical description

def read_config(folder):
    with open(os.path.join(folder, "config.json")) as f:
        raw = json.load(f)
    if raw.get("format") == "nanogpt":
        cfg = {
            "n_layer": raw["n_layer"], "n_head": raw["n_head"],
            "n_embd": raw["n_embd"], "vocab_size": raw["vocab_size"],
            "block_size": raw["block_size"], "bias": bool(raw.get("bias", True)),
            "gelu": raw.get("gelu", "erf"),
            "weight_layout": raw.get("weight_layout", "out_in"),
            "eps": float(raw.get("layer_norm_eps", 1e-5)),
        }
    elif raw.get("model_type") == "gpt2":
        act = raw.get("activation_function", "gelu_new")
        cfg = {
            "n_layer": raw["n_layer"], "n_head": raw["n_head"],
            "n_embd": raw["n_embd"], "vocab_size": raw["vocab_size"],
            "block_size": raw.get("n_positions", raw.get("n_ctx")),
            "bias": True,
            "gelu": "tanh" if act in ("gelu_new", "gelu_pytorch_tanh") else "erf",
            "weight_layout": "in_out",  # Conv1D
            "eps": float(raw.get("layer_norm_epsilon", 1e-5)),
        }
    else:
        raise ValueError(f"{folder}: unknown config format")
    if cfg["gelu"] not in ("erf", "tanh"):
        raise ValueError(f"unknown gelu {cfg['gelu']}")
    return raw, cfg


def load_params(folder, cfg, dtype=torch.float64):
    """Return dict of canonical tensors; Linear weights as [out, in]."""
    tensors, _ = load_file(os.path.join(folder, "model.safetensors"))

    def get(name, required=True):
        for cand in (name, "transformer." + name):
            if cand in tensors:
                return torch.from_numpy(tensors[cand].astype(np.float64)).to(dtype)
        if required:
            raise KeyError(name)
        return None

    def lin(name):
        w = get(name)
        if cfg["weight_layout"] == "in_out":
            w = w.t().contiguous()
        return w

    C, L = cfg["n_embd"], cfg["n_layer"]
    p = {"wte": get("wte.weight"), "wpe": get("wpe.weight"), "h": []}
    assert tuple(p["wte"].shape) == (cfg["vocab_size"], C)
    assert tuple(p["wpe"].shape) == (cfg["block_size"], C)
    for i in range(L):
        pre = f"h.{i}."
        b = cfg["bias"]
        layer = {
            "ln_1.w": get(pre + "ln_1.weight"),
            "ln_1.b": get(pre + "ln_1.bias", b),
            "c_attn.w": lin(pre + "attn.c_attn.weight"),
            "c_attn.b": get(pre + "attn.c_attn.bias", b),
            "attn.c_proj.w": lin(pre + "attn.c_proj.weight"),
            "attn.c_proj.b": get(pre + "attn.c_proj.bias", b),
            "ln_2.w": get(pre + "ln_2.weight"),
            "ln_2.b": get(pre + "ln_2.bias", b),
            "c_fc.w": lin(pre + "mlp.c_fc.weight"),
            "c_fc.b": get(pre + "mlp.c_fc.bias", b),
            "mlp.c_proj.w": lin(pre + "mlp.c_proj.weight"),
            "mlp.c_proj.b": get(pre + "mlp.c_proj.bias", b),
        }
        assert tuple(layer["c_attn.w"].shape) == (3 * C, C)
        assert tuple(layer["attn.c_proj.w"].shape) == (C, C)
        assert tuple(layer["c_fc.w"].shape) == (4 * C, C)
        assert tuple(layer["mlp.c_proj.w"].shape) == (C, 4 * C)
        p["h"].append(layer)
    p["ln_f.w"] = get("ln_f.weight")
    p["ln_f.b"] = get("ln_f.bias", cfg["bias"])
    return p


# ----------------------------------------------------------------------------
# functional forward

def _layernorm(x, w, b, eps):
    mu = x.mean(dim=-1, keepdim=True)
    var = ((x - mu) ** 2).mean(dim=-1, keepdim=True)
    y = (x - mu) / torch.sqrt(var + eps) * w
    return y + b if b is not None else y


def _linear(x, w, b):
    y = x @ w.t()
    return y + b if b is not None else y


def _gelu(x, kind):
    if kind == "erf":
        return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi)
                                       * (x + 0.044715 * x ** 3)))


def forward(p, cfg, tokens):
    """tokens: list of ids (len <= block_size). Returns logits [T, V] tensor."""
    T = len(tokens)
    assert 1 <= T <= cfg["block_size"]
    C, H = cfg["n_embd"], cfg["n_head"]
    hs = C // H
    idx = torch.tensor(tokens, dtype=torch.long)
    x = p["wte"][idx] + p["wpe"][:T]
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    for L in p["h"]:
        h = _layernorm(x, L["ln_1.w"], L["ln_1.b"], cfg["eps"])
        qkv = _linear(h, L["c_attn.w"], L["c_attn.b"])
        q, k, v = qkv[:, :C], qkv[:, C:2 * C], qkv[:, 2 * C:]
        heads = []
        for hd in range(H):
            sl = slice(hd * hs, (hd + 1) * hs)
            s = (q[:, sl] @ k[:, sl].t()) / math.sqrt(hs)
            s = s.masked_fill(~causal, float("-inf"))
            s = s - s.max(dim=-1, keepdim=True).values
            e = torch.exp(s)
            a = e / e.sum(dim=-1, keepdim=True)
            heads.append(a @ v[:, sl])
        y = torch.cat(heads, dim=1)
        x = x + _linear(y, L["attn.c_proj.w"], L["attn.c_proj.b"])
        h = _layernorm(x, L["ln_2.w"], L["ln_2.b"], cfg["eps"])
        h = _gelu(_linear(h, L["c_fc.w"], L["c_fc.b"]), cfg["gelu"])
        x = x + _linear(h, L["mlp.c_proj.w"], L["mlp.c_proj.b"])
    x = _layernorm(x, p["ln_f.w"], p["ln_f.b"], cfg["eps"])
    return x @ p["wte"].t()


def argmax_lowest(row):
    """Index of the maximum; lowest index on ties."""
    a = row.detach().cpu().numpy()
    return int(np.argmax(a))  # numpy returns the first occurrence


def greedy(p, cfg, prompt, n_new, margins=None):
    """Greedy continuation; appends each step's top1-top2 logit gap to margins."""
    seq = list(prompt)
    out = []
    for _ in range(n_new):
        assert len(seq) <= cfg["block_size"]
        logits = forward(p, cfg, seq)  # full forward over the whole sequence
        last = logits[-1]
        t = argmax_lowest(last)
        if margins is not None:
            top2 = torch.topk(last, 2).values
            margins.append(float(top2[0] - top2[1]))
        out.append(t)
        seq.append(t)
    return out


# A greedy step whose top-2 logits are closer than this could flip under a
# float32 engine; random prompts are redrawn until every step clears it.
MIN_MARGIN = 1e-3


# ----------------------------------------------------------------------------
# tiny random models

def _lin_layout(w_out_in, layout):
    return w_out_in if layout == "out_in" else w_out_in.t().contiguous()


def build_tiny_nanogpt():
    cfg = {"format": "nanogpt", "n_layer": 2, "n_head": 4, "n_embd": 32,
           "vocab_size": 67, "block_size": 64, "bias": False, "gelu": "erf",
           "weight_layout": "out_in", "layer_norm_eps": 1e-5}
    g = torch.Generator().manual_seed(20240601)
    C, V, T = cfg["n_embd"], cfg["vocab_size"], cfg["block_size"]

    def mat(*shape):
        return torch.randn(*shape, generator=g, dtype=torch.float32) * 0.2

    def lnw():
        return 1.0 + 0.1 * torch.randn(C, generator=g, dtype=torch.float32)

    t = {"transformer.wte.weight": mat(V, C), "transformer.wpe.weight": mat(T, C)}
    for i in range(cfg["n_layer"]):
        pre = f"transformer.h.{i}."
        t[pre + "ln_1.weight"] = lnw()
        t[pre + "attn.c_attn.weight"] = mat(3 * C, C)
        t[pre + "attn.c_proj.weight"] = mat(C, C)
        t[pre + "ln_2.weight"] = lnw()
        t[pre + "mlp.c_fc.weight"] = mat(4 * C, C)
        t[pre + "mlp.c_proj.weight"] = mat(C, 4 * C)
    t["transformer.ln_f.weight"] = lnw()
    return cfg, t


def build_tiny_hf():
    cfg = {"model_type": "gpt2", "n_layer": 2, "n_head": 2, "n_embd": 24,
           "vocab_size": 53, "n_positions": 48,
           "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5}
    g = torch.Generator().manual_seed(20240602)
    C, V, T = cfg["n_embd"], cfg["vocab_size"], cfg["n_positions"]

    def mat(*shape):
        return torch.randn(*shape, generator=g, dtype=torch.float32) * 0.2

    def vec(n, std=0.1):
        return torch.randn(n, generator=g, dtype=torch.float32) * std

    def lnw():
        return 1.0 + 0.1 * torch.randn(C, generator=g, dtype=torch.float32)

    t = {"wte.weight": mat(V, C), "wpe.weight": mat(T, C)}
    mask = torch.tril(torch.ones(T, T, dtype=torch.float32)).view(1, 1, T, T)
    for i in range(cfg["n_layer"]):
        pre = f"h.{i}."
        t[pre + "ln_1.weight"] = lnw()
        t[pre + "ln_1.bias"] = vec(C)
        t[pre + "attn.bias"] = mask.clone()  # HF causal-mask buffer: ignore
        # Conv1D stores [in, out]: generate as [out, in] then transpose
        t[pre + "attn.c_attn.weight"] = _lin_layout(mat(3 * C, C), "in_out")
        t[pre + "attn.c_attn.bias"] = vec(3 * C)
        t[pre + "attn.c_proj.weight"] = _lin_layout(mat(C, C), "in_out")
        t[pre + "attn.c_proj.bias"] = vec(C)
        t[pre + "ln_2.weight"] = lnw()
        t[pre + "ln_2.bias"] = vec(C)
        t[pre + "mlp.c_fc.weight"] = _lin_layout(mat(4 * C, C), "in_out")
        t[pre + "mlp.c_fc.bias"] = vec(4 * C)
        t[pre + "mlp.c_proj.weight"] = _lin_layout(mat(C, 4 * C), "in_out")
        t[pre + "mlp.c_proj.bias"] = vec(C)
    t["ln_f.weight"] = lnw()
    t["ln_f.bias"] = vec(C)
    # Hugging Face's writer orders tensors by name, not by model order: do the
    # same so a loader that depends on file order fails on this fixture.
    t = {k: t[k] for k in sorted(t)}
    return cfg, t


def write_tiny(folder, cfg, tensors):
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    save_file(tensors, os.path.join(folder, "model.safetensors"),
              metadata={"format": "pt", "source": GENERATOR})


# ----------------------------------------------------------------------------
# golden cases

def tiny_case_specs(p, cfg, seed):
    """Random prompts of lengths 1, 7, ~30, and one whose greedy continuation
    ends exactly at block_size.  A prompt is redrawn (deterministically) if
    any greedy step has a top-2 margin below MIN_MARGIN."""
    T, V = cfg["block_size"], cfg["vocab_size"]
    g = torch.Generator().manual_seed(seed)
    specs = []
    for name, n, n_new in [("len1", 1, 16), ("len7", 7, 16), ("len30", 30, 16),
                           ("to_block_size", T - 10, 10)]:
        for _attempt in range(100):
            toks = torch.randint(V, (n,), generator=g).tolist()
            margins = []
            greedy(p, cfg, toks, n_new, margins)
            if min(margins) >= MIN_MARGIN:
                break
        else:
            raise RuntimeError(f"no well-separated prompt for {name}")
        specs.append((name, toks, n_new))
    return specs


def char_case_specs(folder, cfg):
    with open(os.path.join(folder, "vocab.json")) as f:
        chars = json.load(f)["chars"]
    stoi = {c: i for i, c in enumerate(chars)}
    T = cfg["block_size"]
    long_prompt = ("Q: How many programmers does it take to change a light bulb?\n"
                   "A: None, that's a hardware problem.\n%\n"
                   "It is a truth universally acknowledged that a good fortune ")
    longest = ("%\nThe trouble with the rat race is that even if you win, you're "
               "still a rat.\n\t\t-- Lily Tomlin\n%\nA journey of a thousand miles "
               "begins with a single step.  Unfortunately, most of us take it in "
               "the wrong direction, and then we have to walk all the way back "
               "before we can begin again.  Such is life, my friend, and so ")
    texts = [("the", "The ", 40),
             ("meaning_of_life", "Q: What is the meaning of life?\nA:", 40),
             ("long_prompt", long_prompt, 40),
             ("to_block_size", None, None)]
    specs = []
    for name, text, n_new in texts:
        if text is None:
            text = longest.replace("\t", " ")
            text = text[: T - 16]
            n_new = T - len(text)
        assert all(c in stoi for c in text), text
        toks = [stoi[c] for c in text]
        n_new = min(n_new, T - len(toks))
        specs.append((name, toks, n_new, text))
    return specs


def positions_for(n):
    return sorted(set([0, n // 2, n - 1]))


def compute_case(p, cfg, name, tokens, n_new, margins=None):
    logits = forward(p, cfg, tokens)
    pos = positions_for(len(tokens))
    case = {"name": name}
    case["tokens"] = list(tokens)
    case["logit_positions"] = pos
    case["logits"] = [[float(v) for v in logits[i].tolist()] for i in pos]
    case["greedy_tokens"] = greedy(p, cfg, tokens, n_new, margins)
    return case


def fp32_agreement(folder, cfg, cases):
    """Max |logit64 - logit32| over the golden positions (sanity check)."""
    p32 = load_params(folder, cfg, torch.float32)
    worst = 0.0
    for c in cases:
        l32 = forward(p32, cfg, c["tokens"]).double()
        for i, pos in enumerate(c["logit_positions"]):
            d = (l32[pos] - torch.tensor(c["logits"][i], dtype=torch.float64)).abs().max()
            worst = max(worst, float(d))
    return worst


def build_golden(folder):
    """Compute the golden dict for the model in `folder`."""
    raw, cfg = read_config(folder)
    p = load_params(folder, cfg)
    cases = []
    margins = []
    if "tokenizer" in raw and raw["tokenizer"].get("type") == "char":
        for name, toks, n_new, _text in char_case_specs(folder, cfg):
            cases.append(compute_case(p, cfg, name, toks, n_new, margins))
    else:
        seed = 7000 + cfg["vocab_size"]
        for name, toks, n_new in tiny_case_specs(p, cfg, seed):
            cases.append(compute_case(p, cfg, name, toks, n_new, margins))
    for c in cases:
        assert len(c["tokens"]) + len(c["greedy_tokens"]) <= cfg["block_size"]
    golden = {"version": 1, "generator": GENERATOR, "dtype": "float64 reference",
              "cases": cases}
    return golden, min(margins)


def dump_golden(golden):
    # json.dumps writes floats with repr(): shortest string that round-trips
    # the float64 exactly.
    return json.dumps(golden, separators=(",", ":")) + "\n"


def tiny_model_dirs(root):
    """The two random models this script writes: nanoGPT's, then HF's."""
    return [os.path.join(root, "tests", "data", "tiny-nanogpt"),
            os.path.join(root, "tests", "data", "tiny-hf")]


def model_dirs(root):
    """Every folder that gets a golden.json: the bundled models, then the tiny ones."""
    return [os.path.join(root, "models", "fortunes-char"),
            os.path.join(root, "models", "fortunes-char-5m")] + tiny_model_dirs(root)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", default=ROOT)
    args = ap.parse_args()
    torch.set_num_threads(1)

    nano_dir, hf_dir = tiny_model_dirs(args.root)
    write_tiny(nano_dir, *build_tiny_nanogpt())
    write_tiny(hf_dir, *build_tiny_hf())

    for folder in model_dirs(args.root):
        if not os.path.exists(os.path.join(folder, "model.safetensors")):
            print(f"skip {folder}: no model.safetensors", file=sys.stderr)
            continue
        golden, margin = build_golden(folder)
        _, cfg = read_config(folder)
        d32 = fp32_agreement(folder, cfg, golden["cases"])
        status = "ok" if d32 < 1e-4 else "TOO LARGE"
        print(f"{os.path.relpath(folder, args.root)}: {len(golden['cases'])} cases, "
              f"max |fp64 - fp32| logit diff {d32:.2e} ({status}), "
              f"smallest greedy top-2 margin {margin:.2e}"
              + ("" if margin >= MIN_MARGIN else " (WARNING: below MIN_MARGIN)"))
        if d32 >= 1e-4:
            sys.exit(1)
        with open(os.path.join(folder, "golden.json"), "w") as f:
            f.write(dump_golden(golden))


if __name__ == "__main__":
    main()
