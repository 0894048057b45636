#!/usr/bin/python3
"""Re-verify the golden files written by scripts/make_golden.py.

For each of models/fortunes-char, models/fortunes-char-5m, tests/data/tiny-nanogpt,
tests/data/tiny-hf:
  1. safetensors structure: header padding, 64-byte aligned, non-overlapping
     tensor offsets, file size;
  2. the tiny fixtures are regenerated in memory and compared bit-for-bit with
     the files on disk (config.json and every tensor);
  3. golden.json is recomputed with make_golden's float64 functional forward
     and compared (logits to 1e-9, greedy tokens exactly, file bytes);
  4. cross-implementation check: the weights are loaded into the *training*
     model class (scripts/train_char_model.py, nn.Module based, written
     separately) and its float64 logits are compared with golden.json; Conv1D
     weights are transposed and the GELU swapped to the tanh form for the HF
     fixture;
  5. for the character model, the greedy continuations are decoded and printed.

Exit status 0 when everything matches.
Usage: /usr/bin/python3 scripts/check_golden.py [--root REPO_ROOT]
"""
import os

# One BLAS/OpenMP thread: the machine is shared, and Debian's torch links the
# pthread OpenBLAS, which ignores torch.set_num_threads and busy-waits when
# oversubscribed.  Must be set before torch is imported.
for _v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import argparse
import json
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_golden as mg  # noqa: E402
import train_char_model as tcm  # noqa: E402
from safetensors_io import load_file, read_header  # noqa: E402

failures = []


def check(ok, msg):
    print(("  ok   " if ok else "  FAIL ") + msg)
    if not ok:
        failures.append(msg)


def check_structure(path):
    buf, n, header = read_header(path)
    header.pop("__metadata__", None)
    spans = sorted(tuple(v["data_offsets"]) for v in header.values())
    aligned = all(b % 64 == 0 for b, _ in spans)
    overlap = any(spans[i][1] > spans[i + 1][0] for i in range(len(spans) - 1))
    sizes_ok = all((v["data_offsets"][1] - v["data_offsets"][0])
                   == 4 * int(np.prod(v["shape"])) for v in header.values()
                   if v["dtype"] == "F32")
    check((8 + n) % 64 == 0 and aligned and not overlap and sizes_ok
          and len(buf) == 8 + n + spans[-1][1],
          f"safetensors layout ({len(header)} tensors, header {n} bytes, 8+N % 64 == 0, "
          f"64-byte aligned offsets, file {len(buf)} bytes)")


def check_tiny_fixture(folder, builder):
    cfg, tensors = builder()
    with open(os.path.join(folder, "config.json")) as f:
        check(json.load(f) == cfg, "config.json matches regenerated fixture")
    disk, _ = load_file(os.path.join(folder, "model.safetensors"))
    same = list(disk) == list(tensors) and all(
        np.array_equal(disk[k], tensors[k].numpy()) for k in tensors)
    check(same, "model.safetensors tensors match regenerated fixture bit-for-bit")


def training_class_logits(folder, tokens_list):
    """float64 logits from train_char_model.GPT loaded with the folder's weights."""
    raw, cfg = mg.read_config(folder)
    disk, _ = load_file(os.path.join(folder, "model.safetensors"))
    disk = {(k[len("transformer."):] if k.startswith("transformer.") else k): v
            for k, v in disk.items()}
    model = tcm.GPT(cfg["vocab_size"], cfg["block_size"], cfg["n_layer"],
                    cfg["n_head"], cfg["n_embd"]).double()
    model.eval()
    sd = model.state_dict()
    new_sd = {}
    for name, t in sd.items():
        if name == "lm_head.weight":
            continue
        key = name[len("transformer."):] if name.startswith("transformer.") else name
        if key in disk:
            w = torch.from_numpy(disk[key].astype(np.float64))
            if (cfg["weight_layout"] == "in_out" and w.dim() == 2
                    and not key.startswith(("wte", "wpe"))):
                w = w.t().contiguous()
            assert w.shape == t.shape, (key, w.shape, t.shape)
            new_sd[name] = w
        else:
            assert name.endswith(".bias") and not cfg["bias"], name
            new_sd[name] = torch.zeros_like(t)  # bias=False == zero bias
    missing, unexpected = model.load_state_dict(new_sd, strict=False)
    assert list(missing) == ["lm_head.weight"] and not unexpected, (missing, unexpected)
    if cfg["gelu"] == "tanh":
        for blk in model.transformer.h:
            mlp = blk.mlp
            mlp.forward = (lambda m: lambda x: m.c_proj(
                F.gelu(m.c_fc(x), approximate="tanh")))(mlp)
    with torch.no_grad():
        return [model(torch.tensor([toks]))[0][0] for toks in tokens_list]


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", default=mg.ROOT)
    args = ap.parse_args()
    torch.set_num_threads(1)

    nano_dir, hf_dir = mg.tiny_model_dirs(args.root)
    builders = {nano_dir: mg.build_tiny_nanogpt, hf_dir: mg.build_tiny_hf}
    for folder in mg.model_dirs(args.root):
        print(os.path.relpath(folder, args.root))
        check_structure(os.path.join(folder, "model.safetensors"))
        if folder in builders:
            check_tiny_fixture(folder, builders[folder])

        gpath = os.path.join(folder, "golden.json")
        with open(gpath) as f:
            text = f.read()
        stored = json.loads(text)
        fresh, margin = mg.build_golden(folder)
        check(stored["version"] == 1 and stored["generator"] == mg.GENERATOR
              and stored["dtype"] == "float64 reference", "golden header")
        check(len(stored["cases"]) == len(fresh["cases"]), "case count")
        worst = 0.0
        for s, r in zip(stored["cases"], fresh["cases"]):
            check(s["name"] == r["name"] and s["tokens"] == r["tokens"]
                  and s["logit_positions"] == r["logit_positions"],
                  f"case {s['name']}: prompt and positions")
            d = np.abs(np.array(s["logits"]) - np.array(r["logits"])).max()
            worst = max(worst, float(d))
            check(s["greedy_tokens"] == r["greedy_tokens"],
                  f"case {s['name']}: {len(s['greedy_tokens'])} greedy tokens")
        check(worst <= 1e-9, f"recomputed float64 logits, max diff {worst:.2e}")
        check(mg.dump_golden(fresh) == text, "golden.json byte-identical on rerun")
        print(f"  info smallest greedy top-2 margin {margin:.3e}")

        # cross-implementation: training model class vs functional forward
        seqs = [c["tokens"] + c["greedy_tokens"][:-1] for c in stored["cases"]]
        outs = training_class_logits(folder, seqs)
        worst = 0.0
        greedy_ok = True
        for c, lg in zip(stored["cases"], outs):
            for i, pos in enumerate(c["logit_positions"]):
                worst = max(worst, float((lg[pos] - torch.tensor(c["logits"][i],
                                         dtype=torch.float64)).abs().max()))
            n = len(c["tokens"])
            pred = [mg.argmax_lowest(lg[n - 1 + j])
                    for j in range(len(c["greedy_tokens"]))]
            greedy_ok &= pred == c["greedy_tokens"]
        check(worst <= 1e-9,
              f"train_char_model.GPT (nn.Module) logits vs golden, max diff {worst:.2e}")
        check(greedy_ok, "train_char_model.GPT reproduces greedy tokens (teacher forced)")

        raw, _ = mg.read_config(folder)
        if "tokenizer" in raw:
            with open(os.path.join(folder, raw["tokenizer"]["vocab"])) as f:
                chars = json.load(f)["chars"]
            for c in stored["cases"]:
                prompt = "".join(chars[t] for t in c["tokens"])
                cont = "".join(chars[t] for t in c["greedy_tokens"])
                print(f"  [{c['name']}] {json.dumps(prompt[-60:])} -> {json.dumps(cont)}")

    print("ALL OK" if not failures else f"{len(failures)} FAILURES")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
