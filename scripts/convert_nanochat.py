#!/usr/bin/python3
"""Convert a nanochat checkpoint into a model folder kvtier reads, without
PyTorch.

    scripts/convert_nanochat.py BASE OUT [--source base|mid|sft|rl]
        [--tag dN] [--step N] [--softcap X] [--rope-table bf16|fp32] [--force]

BASE is laid out as nanochat's own base directory ($NANOCHAT_BASE_DIR,
~/.cache/nanochat by default): tokenizer/tokenizer.pkl and
<source>_checkpoints/<tag>/model_<step>.pt + meta_<step>.json, the folders
being base_checkpoints, mid_checkpoints, chatsft_checkpoints and
chatrl_checkpoints. The defaults pick as nanochat's loader does: sft, the
largest dN tag, the largest step.

OUT (created; it must be empty unless --force) receives:
  config.json        {"format": "nanochat", "generation": 1..5, the meta's
                     model_config, "window_pattern" ("L" where the meta has
                     none, as nanochat reads it), "softcap", "rope_table",
                     "tokenizer"} (engine/model/nanochat/nanochat_config.h)
  model.safetensors  every tensor in fp32 under nanochat's names, without
                     torch.compile's "_orig_mod." prefix; bf16 embeddings
                     widen exactly; padded vocabulary rows kept
  tokenizer.tiktoken the tokenizer's ranks in tiktoken's own format; the
                     split pattern and special tokens go into config.json

The generation (../shared/notes/nanochat.md §0) is told from the keys:
smear_gate.weight is 5; a value-embedding gate 12 wide is 4, 32 wide is 3;
resid_lambdas is 2; else 1. The hashed-bigram generation (bigram_embed,
nanochat 2026-01-27..28) and the value-embedding experiments (v0_lambdas)
are refused by name. What the files cannot say comes from flags:
  --softcap      15, nanochat's (its G3 checkpoints trained 2026-03-02..09
                 used 20: pass --softcap 20 for those)
  --rope-table   how the rotary table was rounded in training: bf16 for
                 every generation before 4 and every GPU-trained checkpoint
                 (its embeddings are bf16), fp32 for a G4/G5 one trained on
                 the CPU (fp32 embeddings)

Reading: scripts/torch_checkpoint.py's restricted unpickler (nothing in a
checkpoint runs). tokenizer.pkl is a pickled tiktoken.Encoding; its own
unpickler builds only that class's state (name, pat_str, mergeable_ranks,
special_tokens) and refuses any other global.

Exit status: 0 converted; 2 bad input or usage (one line on stderr, never a
traceback); 1 the output could not be written.
"""
import base64
import json
import math
import os
import pickle
import re
import sys

from torch_checkpoint import (InputError, Parser, Tensor, load_checkpoint, one_line, run,
                              write_files, write_safetensors, write_text)

SOURCES = {"base": "base_checkpoints", "mid": "mid_checkpoints",
           "sft": "chatsft_checkpoints", "rl": "chatrl_checkpoints"}
MODEL_KEYS = ("sequence_len", "vocab_size", "n_layer", "n_head", "n_kv_head", "n_embd")
PREFIX = "_orig_mod."  # what torch.compile's wrapper adds to every key
SMEAR_CHANNELS = 24


# ----------------------------------------------------------------------------
# finding the checkpoint

def pick(base, source, tag, step):
    folder = os.path.join(base, SOURCES[source])
    if not os.path.isdir(folder):
        raise InputError(f"{folder}: no such folder (BASE is nanochat's base directory; "
                         f"--source {source} reads {SOURCES[source]}/)")
    if tag is None:
        tags = [t for t in os.listdir(folder) if os.path.isdir(os.path.join(folder, t))]
        depth = {t: int(m.group(1)) for t in tags if (m := re.fullmatch(r"d(\d+)", t))}
        if depth:
            tag = max(depth, key=depth.get)
        elif tags:  # nanochat's loader: the most recently written otherwise
            tag = max(tags, key=lambda t: os.path.getmtime(os.path.join(folder, t)))
        else:
            raise InputError(f"{folder}: no model tags (d20, ...) in it")
    folder = os.path.join(folder, tag)
    if not os.path.isdir(folder):
        raise InputError(f"{folder}: no such tag")
    if step is None:
        steps = [int(m.group(1)) for f in os.listdir(folder)
                 if (m := re.fullmatch(r"model_(\d+)\.pt", f))]
        if not steps:
            raise InputError(f"{folder}: no model_<step>.pt in it")
        step = max(steps)
    model = os.path.join(folder, f"model_{step:06d}.pt")
    meta = os.path.join(folder, f"meta_{step:06d}.json")
    for path in (model, meta):
        if not os.path.isfile(path):
            raise InputError(f"{path}: no such file")
    return model, meta, tag, step


def model_config(meta_path):
    try:
        with open(meta_path, encoding="utf-8") as f:
            meta = json.load(f)
    except (OSError, ValueError) as e:
        raise InputError(f"{meta_path}: {one_line(e)}") from None
    config = meta.get("model_config") if isinstance(meta, dict) else None
    if not isinstance(config, dict):
        raise InputError(f"{meta_path}: no \"model_config\" object")
    unknown = sorted(set(config) - set(MODEL_KEYS) - {"window_pattern"})
    if unknown:  # nanochat's GPTConfig(**model_config) refuses them too
        raise InputError(f"{meta_path}: model_config has keys nanochat's GPTConfig does not: "
                         f"{', '.join(unknown)}")
    for key in MODEL_KEYS:
        value = config.get(key)
        if type(value) is not int or value <= 0:
            raise InputError(f"{meta_path}: model_config.{key} must be a positive integer, "
                             f"got {value!r:.40}")
    pattern = config.get("window_pattern", "L")  # nanochat's loader: "L" when missing
    if not isinstance(pattern, str) or not re.fullmatch(r"[SLsl]+", pattern):
        raise InputError(f"{meta_path}: model_config.window_pattern must be 'S's and 'L's, "
                         f"got {pattern!r:.40}")
    config = {k: config[k] for k in MODEL_KEYS}
    config["window_pattern"] = pattern.upper()
    return config


# ----------------------------------------------------------------------------
# the model

def state_dict(obj, path):
    if not isinstance(obj, dict):
        raise InputError(f"{path}: holds a {type(obj).__name__}, not a state dict")
    tensors = {}
    for key, value in obj.items():
        if not isinstance(key, str) or not isinstance(value, Tensor):
            raise InputError(f"{path}: entry {key!r:.60} is not a named tensor "
                             f"({type(value).__name__})")
        name = key.removeprefix(PREFIX)
        if name in tensors:
            raise InputError(f"{path}: '{name}' twice (with and without {PREFIX!r})")
        tensors[name] = value
    return tensors


def generation(tensors, path):
    if any(n.startswith("bigram_embed.") or n == "bigram_lambdas" for n in tensors):
        raise InputError(f"{path}: hashed bigram embeddings (bigram_embed, nanochat's "
                         "'engram' of 2026-01-27..28, reverted the next day): not supported")
    if any(n == "v0_lambdas" or n.startswith(("value_embed.", "value_embed_A."))
           for n in tensors):
        raise InputError(f"{path}: v0_lambdas / value_embed: the value-embedding experiments "
                         "of nanochat's ve branch, never on its master: not supported")
    if "smear_gate.weight" in tensors:
        return 5
    gates = [t for n, t in tensors.items() if n.endswith(".attn.ve_gate.weight")]
    if gates:
        width = gates[0].shape[-1] if gates[0].shape else None
        if width not in (12, 32):
            raise InputError(f"{path}: value-embedding gates {width} wide; nanochat's are 32 "
                             "(generation 3) or 12 (4 and 5)")
        return 4 if width == 12 else 3
    return 2 if "resid_lambdas" in tensors else 1


def expected_shapes(c, g, vp):
    C, L, H, Hkv = c["n_embd"], c["n_layer"], c["n_head"], c["n_kv_head"]
    KV = Hkv * (C // H)
    shapes = {"transformer.wte.weight": (vp, C), "lm_head.weight": (vp, C)}
    for i in range(L):
        h = f"transformer.h.{i}."
        shapes.update({h + "attn.c_q.weight": (C, C), h + "attn.c_k.weight": (KV, C),
                       h + "attn.c_v.weight": (KV, C), h + "attn.c_proj.weight": (C, C),
                       h + "mlp.c_fc.weight": (4 * C, C), h + "mlp.c_proj.weight": (C, 4 * C)})
        if g >= 3 and i % 2 == (L - 1) % 2:
            shapes[h + "attn.ve_gate.weight"] = (Hkv, 12 if g >= 4 else 32)
            shapes[f"value_embeds.{i}.weight"] = (vp, KV)
    if g >= 2:
        shapes.update({"resid_lambdas": (L,), "x0_lambdas": (L,)})
    if g >= 5:
        shapes.update({"smear_lambda": (1,), "backout_lambda": (1,),
                       "smear_gate.weight": (1, SMEAR_CHANNELS)})
    return shapes


def listing(names):
    names = sorted(names)
    return ", ".join(f"'{n}'" for n in names[:8]) + (
        f" (and {len(names) - 8} more)" if len(names) > 8 else "")


def check_tensors(tensors, c, g, path):
    if c["n_embd"] % c["n_head"] or (c["n_embd"] // c["n_head"]) % 2 or \
            c["n_head"] % c["n_kv_head"]:
        raise InputError(f"{path}: n_embd {c['n_embd']}, n_head {c['n_head']}, n_kv_head "
                         f"{c['n_kv_head']}: heads of an even size, n_kv_head dividing n_head")
    wte = tensors.get("transformer.wte.weight")
    if wte is None or len(wte.shape) != 2 or wte.shape[0] < c["vocab_size"]:
        raise InputError(f"{path}: 'transformer.wte.weight' must be (padded vocabulary >= "
                         f"{c['vocab_size']}, n_embd), got "
                         f"{list(wte.shape) if wte is not None else 'nothing'}")
    shapes = expected_shapes(c, g, wte.shape[0])
    missing, unexpected = set(shapes) - set(tensors), set(tensors) - set(shapes)
    problems = []
    if missing:
        problems.append("missing tensors: " + listing(missing))
    if unexpected:
        problems.append("unexpected tensors: " + listing(unexpected))
    for name in sorted(set(shapes) & set(tensors)):
        t = tensors[name]
        if t.shape != shapes[name]:
            problems.append(f"'{name}' is {list(t.shape)}, the meta's model_config makes it "
                            f"{list(shapes[name])}")
        elif t.dtype not in ("F32", "F16", "BF16"):
            problems.append(f"'{name}' is {t.dtype}, not float32, float16 or bfloat16")
        else:
            t.check_view(name)
    if problems:
        raise InputError(f"{path}: generation {g}: " + "; ".join(problems[:8]))
    return {name: tensors[name] for name in shapes}


# ----------------------------------------------------------------------------
# the tokenizer

class Encoding:
    """tiktoken.core.Encoding as unpickling rebuilds it: the state only."""

    def __setstate__(self, state):
        self.state = state


class TokenizerUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        if (module, name) == ("tiktoken.core", "Encoding"):
            return Encoding
        if (module, name) == ("copyreg", "__newobj__"):  # protocol 0 and 1's NEWOBJ
            return lambda cls, *args: cls.__new__(cls, *args)
        raise InputError(f"refers to {module}.{name}; nanochat's tokenizer.pkl holds a "
                         "tiktoken.core.Encoding only; refused (nothing was run)")


def load_tokenizer(base, vocab_size):
    path = os.path.join(base, "tokenizer", "tokenizer.pkl")
    try:
        with open(path, "rb") as f:
            enc = TokenizerUnpickler(f).load()
    except InputError as e:
        raise InputError(f"{path}: {e}") from None
    except OSError as e:
        raise InputError(f"{path}: {e.strerror or one_line(e)}") from None
    except Exception as e:  # a malformed pickle raises almost anything
        raise InputError(f"{path}: cannot unpickle: {one_line(e)}") from None
    state = getattr(enc, "state", None)
    if not isinstance(state, dict):
        raise InputError(f"{path}: not a pickled tiktoken Encoding with its state (an "
                         "encoding registered by name, such as cl100k_base, is not nanochat's)")
    pattern, ranks, specials = (state.get(k) for k in
                                ("pat_str", "mergeable_ranks", "special_tokens"))
    if not isinstance(pattern, str) or not pattern:
        raise InputError(f"{path}: no pat_str")
    if not isinstance(ranks, dict) or not all(
            isinstance(k, bytes) and k and type(v) is int for k, v in ranks.items()):
        raise InputError(f"{path}: mergeable_ranks is not a dict of bytes to ints")
    if sorted(ranks.values()) != list(range(len(ranks))):
        raise InputError(f"{path}: mergeable_ranks are not 0..{len(ranks) - 1}, each once")
    if not isinstance(specials, dict) or not all(
            isinstance(k, str) and type(v) is int and v >= len(ranks)
            for k, v in specials.items()):
        raise InputError(f"{path}: special_tokens is not a dict of names to ids past the ranks")
    size = len(ranks) + len(specials)
    if size != vocab_size:
        raise InputError(f"{path}: {len(ranks)} ranks + {len(specials)} special tokens = "
                         f"{size}, but the checkpoint's meta says vocab_size {vocab_size}")
    return pattern, ranks, specials


def ranks_text(ranks):
    lines = sorted((rank, base64.b64encode(token).decode()) for token, rank in ranks.items())
    return "".join(f"{token} {rank}\n" for rank, token in lines)


# ----------------------------------------------------------------------------

def convert(a):
    model_path, meta_path, tag, step = pick(a.base, a.source, a.tag, a.step)
    config = model_config(meta_path)
    obj, placeholders = load_checkpoint(model_path)
    if placeholders:
        raise InputError(f"{model_path}: holds objects that are not tensors: "
                         f"{', '.join(placeholders[:4])}")
    tensors = state_dict(obj, model_path)
    g = generation(tensors, model_path)
    tensors = check_tensors(tensors, config, g, model_path)
    pattern, ranks, specials = load_tokenizer(a.base, config["vocab_size"])

    embeddings_bf16 = tensors["transformer.wte.weight"].dtype == "BF16"
    rope = a.rope_table or ("fp32" if g >= 4 and not embeddings_bf16 else "bf16")
    out = {"format": "nanochat", "generation": g, **config}
    if g < 2:
        del out["window_pattern"]  # generation 1 has no windows
    out.update({
        "softcap": a.softcap, "rope_table": rope,
        "tokenizer": {"type": "tiktoken", "ranks": "tokenizer.tiktoken", "pattern": pattern,
                      "special_tokens": dict(sorted(specials.items(), key=lambda kv: kv[1]))},
        # Ignored by kvtier; says where the folder came from.
        "converted_from": {"source": a.source, "tag": tag, "step": step},
    })
    write_files(a.out, {
        "config.json": lambda p: write_text(p, json.dumps(out, indent=2) + "\n"),
        "model.safetensors": lambda p: write_safetensors(p, tensors,
                                                         "scripts/convert_nanochat.py"),
        "tokenizer.tiktoken": lambda p: write_text(p, ranks_text(ranks)),
    }, a.force)
    params = sum(math.prod(t.shape) for t in tensors.values())
    dtypes = "/".join(sorted({t.dtype for t in tensors.values()}))
    print(f"convert_nanochat: {model_path} (generation {g}, {dtypes}, {params / 1e6:.2f} M "
          f"parameters, {config['n_layer']} layers x {config['n_embd']}, vocab "
          f"{config['vocab_size']}, rotary table {rope}) -> {a.out}", file=sys.stderr)
    if g == 3 and a.softcap == 15:
        print("convert_nanochat: note: generation 3 checkpoints trained 2026-03-02..09 used "
              "softcap 20; pass --softcap 20 for one of those", file=sys.stderr)


def positive_float(text):
    value = float(text)
    if not math.isfinite(value) or value <= 0:
        raise ValueError(text)
    return value


def main(argv=None):
    p = Parser(description="Convert a nanochat checkpoint into a kvtier model folder.")
    p.add_argument("base", help="nanochat's base directory (tokenizer/, *_checkpoints/)")
    p.add_argument("out", help="the model folder to write (created; must be empty)")
    p.add_argument("--source", choices=sorted(SOURCES), default="sft",
                   help="which training stage's checkpoints (default: %(default)s)")
    p.add_argument("--tag", help="the model tag (default: the largest dN)")
    p.add_argument("--step", type=int, help="the step (default: the largest)")
    p.add_argument("--softcap", type=positive_float, default=15.0,
                   help="the logit softcap (default: %(default)s)")
    p.add_argument("--rope-table", choices=("bf16", "fp32"),
                   help="how training rounded the rotary table (default: from the "
                   "generation and the embeddings' dtype, see the top of this file)")
    p.add_argument("--force", action="store_true", help="write into a non-empty OUT")
    return run("convert_nanochat", p, convert, argv)


if __name__ == "__main__":
    sys.exit(main())
