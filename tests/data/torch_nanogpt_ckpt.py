#!/usr/bin/python3
"""The real-PyTorch side of tests/convert_nanogpt_test.cpp, where `import
torch` works (Debian's python3-torch 1.13 is enough):

    torch_nanogpt_ckpt.py MODEL_DIR WORK_DIR

For each dtype D of f32, f16 and bf16:
  check  torch.load()s WORK_DIR/made-D/ckpt.pt, which make_nanogpt_ckpt.py
         wrote with --dtype D, and checks it is nanoGPT's: the keys, the tied
         storage, the strided view, and each weight equal to MODEL_DIR's
         converted to D by torch itself;
  save   torch.save()s WORK_DIR/saved-D/ckpt.pt as nanoGPT's train.py does,
         from MODEL_DIR's weights in D: a module with nanoGPT's names and tied
         lm_head, wrapped as torch.compile wraps it (keys "_orig_mod.*"), the
         optimizer's state after one AdamW step, model_args, config; plus
         meta.pkl, and expected.safetensors: each weight as torch widens it
         to fp32 (what the converter must write, bit for bit).
One process for all six, as importing torch takes seconds. Prints "ok" and
exits 0 on success; exits 77 when torch cannot be imported (the test skips);
anything else is a failure.
"""
import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import collections  # noqa: E402
import json  # noqa: E402
import pickle  # noqa: E402
import sys  # noqa: E402

try:
    import torch
    import torch.nn as nn
except ImportError:
    print("torch cannot be imported", file=sys.stderr)
    sys.exit(77)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
from safetensors_io import load_file, save_file  # noqa: E402

DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}


# nanoGPT's module tree (model.py), parameters and buffers only: the names and
# the tying are what torch.save records.
class LayerNorm(nn.Module):
    def __init__(self, n, bias):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.bias = nn.Parameter(torch.zeros(n)) if bias else None


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        C, T = c["n_embd"], c["block_size"]
        self.c_attn = nn.Linear(C, 3 * C, bias=c["bias"])
        self.c_proj = nn.Linear(C, C, bias=c["bias"])
        # The causal mask nanoGPT registers when flash attention is missing (torch < 2).
        self.register_buffer("bias", torch.tril(torch.ones(T, T)).view(1, 1, T, T))


class MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c_fc = nn.Linear(c["n_embd"], 4 * c["n_embd"], bias=c["bias"])
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * c["n_embd"], c["n_embd"], bias=c["bias"])


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.ln_1 = LayerNorm(c["n_embd"], c["bias"])
        self.attn = Attention(c)
        self.ln_2 = LayerNorm(c["n_embd"], c["bias"])
        self.mlp = MLP(c)


class GPT(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(c["vocab_size"], c["n_embd"]),
            wpe=nn.Embedding(c["block_size"], c["n_embd"]),
            drop=nn.Dropout(0.0),
            h=nn.ModuleList([Block(c) for _ in range(c["n_layer"])]),
            ln_f=LayerNorm(c["n_embd"], c["bias"]),
        ))
        self.lm_head = nn.Linear(c["n_embd"], c["vocab_size"], bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # tied, as nanoGPT does


class Compiled(nn.Module):
    """What torch.compile returns (OptimizedModule) holds the model as
    _orig_mod, hence the key prefix; torch 1.13 has no torch.compile."""

    def __init__(self, model):
        super().__init__()
        self._orig_mod = model


def read_folder(model_dir):
    with open(os.path.join(model_dir, "config.json")) as f:
        config = json.load(f)
    tensors, _ = load_file(os.path.join(model_dir, "model.safetensors"))
    with open(os.path.join(model_dir, "vocab.json")) as f:
        chars = json.load(f)["chars"]
    return config, {k: torch.from_numpy(v) for k, v in tensors.items()}, chars


def save(model_dir, out_dir, dtype):
    config, tensors, chars = read_folder(model_dir)
    model = GPT(config)
    missing, unexpected = model.load_state_dict(tensors, strict=False)
    assert not unexpected and all(k == "lm_head.weight" or k.endswith("attn.bias")
                                  for k in missing), (missing, unexpected)
    # One AdamW step with zero gradients and no weight decay: state tensors
    # appear, the weights stay as they are.
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.99), weight_decay=0.0)
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    opt.step()
    model = model.to(DTYPES[dtype])
    wrapped = Compiled(model)
    model_args = {k: config[k] for k in ("n_layer", "n_head", "n_embd", "block_size", "bias",
                                         "vocab_size")}
    model_args["dropout"] = 0.0
    os.makedirs(out_dir, exist_ok=True)
    torch.save({
        "model": wrapped.state_dict(), "optimizer": opt.state_dict(), "model_args": model_args,
        "iter_num": 100, "best_val_loss": torch.tensor(1.25),
        "config": {"dataset": "fortunes_char", "compile": True, "dtype": dtype},
    }, os.path.join(out_dir, "ckpt.pt"))
    with open(os.path.join(out_dir, "meta.pkl"), "wb") as f:
        pickle.dump({"vocab_size": len(chars), "itos": dict(enumerate(chars)),
                     "stoi": {c: i for i, c in enumerate(chars)}}, f)
    sd = model.state_dict()
    save_file(collections.OrderedDict((k, sd[k].float()) for k in tensors),
              os.path.join(out_dir, "expected.safetensors"))


def check(ckpt_path, model_dir, dtype):
    _, tensors, _ = read_folder(model_dir)
    # weights_only=False: torch 1.13's weights-only unpickler refuses the
    # floats in every nanoGPT checkpoint; this file is the test's own.
    ckpt = torch.load(ckpt_path, map_location="cpu")
    sd = ckpt["model"]
    assert isinstance(sd, collections.OrderedDict) and hasattr(sd, "_metadata")
    assert all(k.startswith("_orig_mod.") for k in sd)
    wte, head = sd["_orig_mod.transformer.wte.weight"], sd["_orig_mod.lm_head.weight"]
    assert wte.storage().data_ptr() == head.storage().data_ptr(), "lm_head not tied"
    for name, t in tensors.items():
        got = sd["_orig_mod." + name]
        want = t.to(DTYPES[dtype])
        assert got.dtype == want.dtype and got.shape == want.shape, name
        # Widening to fp32 is exact and one-to-one, so equal bytes: equal bits.
        assert got.float().numpy().tobytes() == want.float().numpy().tobytes(), name
    assert not sd["_orig_mod.transformer.h.0.mlp.c_proj.weight"].is_contiguous()
    assert ckpt["model_args"]["vocab_size"] == wte.shape[0] and ckpt["iter_num"] == 5000


def main():
    model_dir, work_dir = sys.argv[1:3]
    for dtype in DTYPES:
        check(os.path.join(work_dir, f"made-{dtype}", "ckpt.pt"), model_dir, dtype)
        save(model_dir, os.path.join(work_dir, f"saved-{dtype}"), dtype)
    print("ok")


if __name__ == "__main__":
    main()
