#!/usr/bin/python3
"""Convert a nanoGPT checkpoint (karpathy/nanoGPT train.py's ckpt.pt) into a
model folder kvtierd serves, without PyTorch.

    scripts/convert_nanogpt.py CKPT_OR_DIR OUT_DIR [--meta META_PKL]
        [--gpt2-bpe DIR] [--force]
    build/daemon/kvtierd --model OUT_DIR --prompt "ROMEO:"

CKPT_OR_DIR is ckpt.pt or nanoGPT's out_dir holding it. OUT_DIR (created;
it must be empty unless --force) receives:
  config.json        {"format": "nanogpt", ..., "gelu": "erf",
                      "weight_layout": "out_in"}: nanoGPT's MLP is nn.GELU()
                      (the exact erf form, also for models fine-tuned from
                      GPT-2) and its Linear weights are (out, in), which is
                      what engine/model/model_weights.h reads as "out_in", so no
                      matrix is transposed.
  model.safetensors  every parameter in fp32 under nanoGPT's own names
                     (transformer.h.0.attn.c_attn.weight, ...), without the
                     "_orig_mod." prefix torch.compile adds, the attn.bias
                     causal-mask buffers, or lm_head.weight (tied to wte;
                     checked equal). fp16 and bf16 weights widen exactly.
  the tokenizer      a character model's meta.pkl becomes vocab.json
                     ({"chars": [itos[0], itos[1], ...]}); a model without
                     one uses GPT-2's BPE, as nanoGPT's sample.py does, and
                     gets encoder.json + vocab.bpe copied from --gpt2-bpe
                     (default: this repository's models/gpt2-bpe).
meta.pkl is taken from --meta, else the first that exists of: beside the
checkpoint; ../data/<dataset>/meta.pkl from the checkpoint's folder (nanoGPT's
own layout, out-*/ beside data/); data/<dataset>/meta.pkl from the current
directory (where sample.py looks); <dataset> is the checkpoint's
config["dataset"].

Reading ckpt.pt: scripts/torch_checkpoint.py reads torch.save's zip with a
restricted unpickler (dicts, OrderedDicts and tensor descriptions; unknown
torch/numpy/collections objects inert, fine in the optimizer state and
refused inside the model; any other global refused). Nothing in the file is
ever executed, which torch.load(weights_only=False) cannot promise (and
Debian's torch 1.13 with weights_only=True refuses the floats in every
nanoGPT checkpoint's config). meta.pkl gets an unpickler that allows no
globals at all. So PyTorch is not needed, nor used when installed.

Exit status: 0 converted; 2 bad input or usage (one line on stderr, never a
traceback); 1 the output could not be written.
"""
import json
import math
import os
import pickle
import shutil
import sys

from torch_checkpoint import (InputError, Parser, Tensor, load_checkpoint, one_line, run,
                              write_files, write_safetensors, write_text)

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_GPT2_BPE = os.path.join(os.path.dirname(HERE), "models", "gpt2-bpe")
GPT2_VOCAB = 50257


class MetaUnpickler(pickle.Unpickler):
    """meta.pkl is a plain dict of ints and strings: no global is needed."""

    def find_class(self, module, name):
        raise InputError(f"refers to {module}.{name}; a nanoGPT meta.pkl is a "
                         "plain dict (vocab_size, itos, stoi); refused (nothing was run)")


# ----------------------------------------------------------------------------
# the model

PREFIX = "_orig_mod."  # what torch.compile's wrapper adds to every key


def model_args(ckpt, path):
    if not isinstance(ckpt, dict):
        raise InputError(f"{path}: holds a {type(ckpt).__name__}, not a nanoGPT checkpoint "
                         "dict ('model', 'model_args', ...)")
    for key in ("model", "model_args"):
        if key not in ckpt:
            raise InputError(f"{path}: missing key '{key}' (nanoGPT's train.py saves "
                             "'model' and 'model_args')")
    args = ckpt["model_args"]
    if not isinstance(args, dict):
        raise InputError(f"{path}: 'model_args' is not a dict")
    out = {}
    for key in ("n_layer", "n_head", "n_embd", "block_size", "vocab_size"):
        value = args.get(key)
        if type(value) is not int or value <= 0:
            raise InputError(f"{path}: model_args['{key}'] must be a positive integer, "
                             f"got {value!r:.40}")
        out[key] = value
    bias = args.get("bias", True)  # GPTConfig's default
    if type(bias) is not bool:
        raise InputError(f"{path}: model_args['bias'] must be True or False, got {bias!r:.40}")
    out["bias"] = bias
    if out["n_embd"] % out["n_head"]:
        raise InputError(f"{path}: n_embd {out['n_embd']} is not divisible by "
                         f"n_head {out['n_head']}")
    return out


def expected_shapes(a):
    """nanoGPT's parameters in state-dict order, (out, in) for Linear."""
    C, V, T = a["n_embd"], a["vocab_size"], a["block_size"]
    shapes = {"transformer.wte.weight": (V, C), "transformer.wpe.weight": (T, C)}

    def add(name, out_features, in_features=None):
        shapes[name + ".weight"] = (out_features,) if in_features is None \
            else (out_features, in_features)
        if a["bias"]:
            shapes[name + ".bias"] = (out_features,)

    for i in range(a["n_layer"]):
        h = f"transformer.h.{i}."
        add(h + "ln_1", C)
        add(h + "attn.c_attn", 3 * C, C)
        add(h + "attn.c_proj", C, C)
        add(h + "ln_2", C)
        add(h + "mlp.c_fc", 4 * C, C)
        add(h + "mlp.c_proj", C, 4 * C)
    add("transformer.ln_f", C)
    return shapes


def listing(names):
    shown = ", ".join(f"'{n}'" for n in names[:6])
    return shown + (f" (and {len(names) - 6} more)" if len(names) > 6 else "")


def model_tensors(ckpt, args, path):
    """name -> tensor for model.safetensors, after every check."""
    state = ckpt["model"]
    if not isinstance(state, dict):
        raise InputError(f"{path}: 'model' is not a state dict")
    sd = {}
    for key, value in state.items():
        name = key
        while isinstance(name, str) and name.startswith(PREFIX):
            name = name[len(PREFIX):]
        if not isinstance(name, str) or name in sd:
            raise InputError(f"{path}: state dict key {key!r:.80} is not a name or repeats one")
        sd[name] = value
    shapes = expected_shapes(args)
    mask = {f"transformer.h.{i}.attn.bias" for i in range(args["n_layer"])}
    missing = [n for n in shapes if n not in sd]
    unexpected = [n for n in sd if n not in shapes and n not in mask and n != "lm_head.weight"]
    if missing:
        raise InputError(f"{path}: missing tensors {listing(missing)}")
    if unexpected:
        raise InputError(f"{path}: unexpected tensors {listing(unexpected)}")
    for name, shape in shapes.items():
        t = sd[name]
        if not isinstance(t, Tensor):
            what = getattr(t, "global_name", type(t).__name__)
            raise InputError(f"{path}: '{name}' is not a plain tensor (a {what})")
        if t.dtype not in ("F32", "F16", "BF16"):
            raise InputError(f"{path}: tensor '{name}' has dtype {t.dtype}; only float32, "
                             "float16 and bfloat16 are converted")
        if t.shape != shape:
            raise InputError(f"{path}: tensor '{name}' has shape {list(t.shape)}, expected "
                             f"{list(shape)} for the model_args")
        t.check_view(name)
    head = sd.get("lm_head.weight")
    if head is not None:
        # nanoGPT ties it to wte, so torch.save stores one storage for both;
        # a copy with equal values is as good.
        wte = sd["transformer.wte.weight"]
        tied = wte.same_view(head)
        if not tied and isinstance(head, Tensor) and head.shape == wte.shape \
                and head.dtype in ("F32", "F16", "BF16"):
            head.check_view("lm_head.weight")
            tied = head.f32_bytes() == wte.f32_bytes()
        if not tied:
            raise InputError(f"{path}: lm_head.weight differs from transformer.wte.weight; "
                             "kvtierd serves only nanoGPT's tied LM head")
    return {name: sd[name] for name in shapes}


# ----------------------------------------------------------------------------
# the tokenizer

def load_meta(path):
    try:
        with open(path, "rb") as f:
            meta = MetaUnpickler(f).load()
    except InputError as e:
        raise InputError(f"{path}: {e}") from None
    except OSError as e:
        raise InputError(f"{path}: {e.strerror or one_line(e)}") from None
    except Exception as e:
        raise InputError(f"{path}: cannot unpickle: {one_line(e)}") from None
    return meta


def char_vocab(meta, path, vocab_size):
    """[itos[0], itos[1], ...] after checking meta.pkl describes a char model
    of exactly `vocab_size` tokens."""
    if not isinstance(meta, dict) or not isinstance(meta.get("itos"), dict):
        raise InputError(f"{path}: no 'itos' dict, so not a character model's meta.pkl")
    itos = meta["itos"]
    n = len(itos)
    if sorted(itos) != list(range(n)) or any(type(k) is not int for k in itos):
        raise InputError(f"{path}: 'itos' keys are not the ids 0..{n - 1}")
    chars = [itos[i] for i in range(n)]
    for i, c in enumerate(chars):
        # One code point that UTF-8 can carry: what engine/model/char_tokenizer.h reads.
        if not isinstance(c, str) or len(c) != 1 or 0xD800 <= ord(c) <= 0xDFFF:
            raise InputError(f"{path}: itos[{i}] is {c!r:.20}, not one character")
    if len(set(chars)) != n:
        raise InputError(f"{path}: 'itos' maps two ids to the same character")
    if "vocab_size" in meta and meta["vocab_size"] != n:
        raise InputError(f"{path}: vocab_size {meta['vocab_size']!r:.20} but 'itos' has {n} "
                         "entries")
    stoi = meta.get("stoi")
    if stoi is not None and stoi != {c: i for i, c in enumerate(chars)}:
        raise InputError(f"{path}: 'stoi' is not the inverse of 'itos'")
    if n != vocab_size:
        raise InputError(f"{path}: {n} characters, but the checkpoint's vocab_size is "
                         f"{vocab_size}: not this model's meta.pkl")
    return chars


def find_meta(ckpt_path, ckpt):
    """The meta.pkl nanoGPT would use for this checkpoint, or None."""
    folder = os.path.dirname(os.path.abspath(ckpt_path))
    candidates = [os.path.join(folder, "meta.pkl")]
    config = ckpt.get("config") if isinstance(ckpt, dict) else None
    dataset = config.get("dataset") if isinstance(config, dict) else None
    if isinstance(dataset, str) and dataset and "/" not in dataset and dataset not in (".", ".."):
        candidates.append(os.path.join(os.path.dirname(folder), "data", dataset, "meta.pkl"))
        candidates.append(os.path.join("data", dataset, "meta.pkl"))
    return next((p for p in candidates if os.path.isfile(p)), None)


# ----------------------------------------------------------------------------
# writing the folder

def write_folder(out, args, tensors, tokenizer, ckpt_path, ckpt, force):
    """Writes every file under a temporary name, then renames them all, so a
    failure leaves no half-written folder that looks complete."""
    config = {
        "format": "nanogpt",
        "n_layer": args["n_layer"], "n_head": args["n_head"], "n_embd": args["n_embd"],
        "vocab_size": args["vocab_size"], "block_size": args["block_size"],
        "bias": args["bias"], "gelu": "erf", "weight_layout": "out_in",
        "layer_norm_eps": 1e-05,
    }
    files = {}  # final name -> writer(path)
    kind, payload = tokenizer
    if kind == "char":
        config["tokenizer"] = {"type": "char", "vocab": "vocab.json"}
        files["vocab.json"] = lambda p: write_text(
            p, json.dumps({"chars": payload}, ensure_ascii=False) + "\n")
    else:
        config["tokenizer"] = {"type": "bpe", "encoder": "encoder.json", "merges": "vocab.bpe"}
        for name in ("encoder.json", "vocab.bpe"):
            files[name] = lambda p, src=os.path.join(payload, name): shutil.copyfile(src, p)
    # Ignored by kvtierd; says where the folder came from.
    source = {"checkpoint": os.path.basename(ckpt_path)}
    if type(ckpt.get("iter_num")) is int:
        source["iter_num"] = ckpt["iter_num"]
    config["converted_from"] = source
    files["config.json"] = lambda p: write_text(p, json.dumps(config, indent=2) + "\n")
    files["model.safetensors"] = lambda p: write_safetensors(p, tensors, "scripts/convert_nanogpt.py")

    write_files(out, files, force)


# ----------------------------------------------------------------------------

def convert(a):
    ckpt_path = a.checkpoint
    if os.path.isdir(ckpt_path):
        ckpt_path = os.path.join(ckpt_path, "ckpt.pt")  # nanoGPT's out_dir
    if not os.path.isfile(ckpt_path):
        raise InputError(f"{ckpt_path}: no such file")
    ckpt, placeholders = load_checkpoint(ckpt_path)
    args = model_args(ckpt, ckpt_path)
    tensors = model_tensors(ckpt, args, ckpt_path)

    meta_path = a.meta or find_meta(ckpt_path, ckpt)
    if meta_path:
        tokenizer = ("char", char_vocab(load_meta(meta_path), meta_path, args["vocab_size"]))
        said = f"characters from {meta_path}"
    elif args["vocab_size"] >= GPT2_VOCAB:
        for name in ("encoder.json", "vocab.bpe"):
            if not os.path.isfile(os.path.join(a.gpt2_bpe, name)):
                raise InputError(f"{a.gpt2_bpe}: no {name} (--gpt2-bpe names the folder with "
                                 "GPT-2's encoder.json and vocab.bpe)")
        tokenizer = ("bpe", a.gpt2_bpe)
        said = f"GPT-2 BPE from {a.gpt2_bpe}"
    else:
        raise InputError(f"{ckpt_path}: no meta.pkl found (beside it or under data/<dataset>/) "
                         f"and vocab_size {args['vocab_size']} is below GPT-2's {GPT2_VOCAB}: "
                         "pass --meta")

    write_folder(a.out, args, tensors, tokenizer, ckpt_path, ckpt, a.force)
    params = sum(math.prod(t.shape) for t in tensors.values())
    dtypes = "/".join(sorted({t.dtype for t in tensors.values()}))
    print(f"convert_nanogpt: {ckpt_path} ({dtypes}, {params / 1e6:.2f} M parameters, "
          f"{args['n_layer']} layers x {args['n_embd']}, vocab {args['vocab_size']}, "
          f"{said}) -> {a.out}", file=sys.stderr)
    if placeholders:
        print("convert_nanogpt: note: skipped objects of types this reader does not know, "
              f"outside the model: {', '.join(placeholders[:4])}", file=sys.stderr)


def main(argv=None):
    p = Parser(description="Convert a nanoGPT ckpt.pt into a kvtierd model folder.")
    p.add_argument("checkpoint", help="ckpt.pt, or nanoGPT's out_dir holding it")
    p.add_argument("out", help="the model folder to write (created; must be empty)")
    p.add_argument("--meta", help="a character model's meta.pkl (default: found as "
                   "nanoGPT's sample.py finds it, or beside the checkpoint)")
    p.add_argument("--gpt2-bpe", default=DEFAULT_GPT2_BPE,
                   help="folder with GPT-2's encoder.json and vocab.bpe, copied for models "
                   "without meta.pkl (default: %(default)s)")
    p.add_argument("--force", action="store_true", help="write into a non-empty OUT")
    return run("convert_nanogpt", p, convert, argv)


if __name__ == "__main__":
    sys.exit(main())
