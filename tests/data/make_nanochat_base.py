#!/usr/bin/python3
"""Write a nanochat base directory from a kvtier nanochat model folder, as
nanochat's own scripts write one, with nothing but the standard library;
tests/convert_nanochat_test.cpp feeds it to scripts/convert_nanochat.py.

    tests/data/make_nanochat_base.py MODEL_DIR BASE [options]

MODEL_DIR holds config.json ({"format": "nanochat", ...}) and an F32
model.safetensors. BASE receives:
  tokenizer/tokenizer.pkl   pickle.dump (protocol 4, nanochat's default) of a
                            tiktoken.core.Encoding: 256 byte ranks and common
                            pairs, nanochat's split pattern and its nine
                            special tokens, vocab_size ids in all
  <source>/<tag>/model_<step:06d>.pt   torch.save of the state dict
                            (tests/data/make_nanogpt_ckpt.py's writer),
                            optionally with torch.compile's "_orig_mod."
                            keys and bf16 embedding tables (a GPU run's)
  <source>/<tag>/meta_<step:06d>.json  {"step", "model_config": the six keys
                            and window_pattern}
and decoys the converter must not pick: an earlier step and a smaller tag,
both unreadable. --break makes one of the mistakes the converter refuses.
"""
import argparse
import json
import os
import math
import pickle
import sys
import types

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_nanogpt_ckpt import Evil, Storage, Tensor, from_f32, read_safetensors, write_torch_zip  # noqa: E402

PATTERN = (r"'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,2}| ?[^\s\p{L}\p{N}]++"
           r"[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+")
SPECIALS = ["<|bos|>", "<|user_start|>", "<|user_end|>", "<|assistant_start|>",
            "<|assistant_end|>", "<|python_start|>", "<|python_end|>", "<|output_start|>",
            "<|output_end|>"]
PAIRS = [b"th", b"he", b"in", b"er", b"an", b" t", b" a", b"re", b"on", b"at", b"en", b"nd",
         b"ti", b"es", b"or", b"te", b"of", b"ed", b"is", b"it", b"al", b"ar", b"st", b"to",
         b"nt", b"ng", b"se", b"ha", b"as", b"ou", b"io", b"le", b"ve", b"co", b"me", b"de",
         b"hi", b"ri", b"ro", b"ic"]

# tiktoken's class, pickled by reference as tiktoken.core.Encoding.
tiktoken = types.ModuleType("tiktoken")
tiktoken.core = types.ModuleType("tiktoken.core")


class Encoding:
    def __init__(self, state):
        self._state = state

    def __getstate__(self):  # what tiktoken's Encoding.__getstate__ returns
        return self._state


Encoding.__module__ = "tiktoken.core"
tiktoken.core.Encoding = Encoding
sys.modules["tiktoken"] = tiktoken
sys.modules["tiktoken.core"] = tiktoken.core


def tokenizer_state(vocab_size):
    ranks = {bytes([b]): b for b in range(256)}
    for pair in PAIRS[:vocab_size - 256 - len(SPECIALS)]:
        ranks[pair] = len(ranks)
    specials = {name: len(ranks) + i for i, name in enumerate(SPECIALS)}
    return {"name": "rustbpe", "pat_str": PATTERN, "mergeable_ranks": ranks,
            "special_tokens": specials}


def zeros(*shape):
    return Tensor(Storage("f32", bytes(4 * math.prod(shape))), 0, shape)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("model_dir")
    p.add_argument("base")
    p.add_argument("--source", default="chatsft_checkpoints")
    p.add_argument("--tag", default="d4")
    p.add_argument("--step", type=int, default=10)
    p.add_argument("--compile", action="store_true", help="\"_orig_mod.\" keys")
    p.add_argument("--bf16-embeddings", action="store_true",
                   help="wte and value_embeds in bf16, as a GPU run saves them")
    p.add_argument("--no-window-pattern", action="store_true",
                   help="a meta without window_pattern, as mid checkpoints have")
    p.add_argument("--break", dest="mistake",
                   choices=("engram", "v0", "missing", "meta-layers", "vocab",
                            "evil-tokenizer", "meta-key"))
    p.add_argument("--evil-marker", help="the file an evil pickle would create")
    a = p.parse_args()

    with open(os.path.join(a.model_dir, "config.json")) as f:
        config = json.load(f)
    tensors = read_safetensors(os.path.join(a.model_dir, "model.safetensors"))
    state = {}
    for name, (shape, raw) in tensors.items():
        dtype = "bf16" if a.bf16_embeddings and (
            name == "transformer.wte.weight" or name.startswith("value_embeds.")) else "f32"
        state[("_orig_mod." if a.compile else "") + name] = Tensor(
            Storage(dtype, from_f32(raw, dtype)), 0, shape)
    if a.mistake == "engram":
        state["bigram_lambdas"] = zeros(config["n_layer"])
        state["bigram_embed.embed.weight"] = zeros(5 * config["vocab_size"], config["n_embd"])
    if a.mistake == "v0":
        state["v0_lambdas"] = zeros(config["n_layer"])
    if a.mistake == "missing":
        del state[("_orig_mod." if a.compile else "") + "lm_head.weight"]

    model_config = {k: config[k] for k in ("sequence_len", "vocab_size", "n_layer", "n_head",
                                           "n_kv_head", "n_embd")}
    if config["generation"] >= 2 and not a.no_window_pattern:
        model_config["window_pattern"] = config["window_pattern"]
    if a.mistake == "meta-layers":
        model_config["n_layer"] += 1
    if a.mistake == "meta-key":
        model_config["mlp_ratio"] = 4
    tok_vocab = config["vocab_size"] + (1 if a.mistake == "vocab" else 0)

    folder = os.path.join(a.base, a.source, a.tag)
    os.makedirs(folder, exist_ok=True)
    write_torch_zip(os.path.join(folder, f"model_{a.step:06d}.pt"), state)
    with open(os.path.join(folder, f"meta_{a.step:06d}.json"), "w") as f:
        json.dump({"step": a.step, "val_bpb": 1.5, "model_config": model_config}, f, indent=2)
    # Decoys: an earlier step and a smaller tag, neither a checkpoint at all.
    for decoy in (os.path.join(folder, f"model_{a.step - 1:06d}.pt"),
                  os.path.join(a.base, a.source, "d2", f"model_{a.step + 5:06d}.pt")):
        os.makedirs(os.path.dirname(decoy), exist_ok=True)
        with open(decoy, "wb") as f:
            f.write(b"not this one")

    os.makedirs(os.path.join(a.base, "tokenizer"), exist_ok=True)
    with open(os.path.join(a.base, "tokenizer", "tokenizer.pkl"), "wb") as f:
        if a.mistake == "evil-tokenizer":
            pickle.dump(Evil(f"touch '{a.evil_marker}'"), f)
        else:
            pickle.dump(Encoding(tokenizer_state(tok_vocab)), f)
    print(json.dumps({"model": os.path.join(folder, f"model_{a.step:06d}.pt")}))


if __name__ == "__main__":
    main()
