#!/usr/bin/python3
"""A GPT-2 124M-shaped GGUF with random weights, for llama.cpp's twins of engine_bench.

bench/engine_bench times kvtier's forward on GPT-2 124M shapes (12 layers, 12
heads, 768 wide, 1024 positions, 50257 tokens) with random fp32 weights;
llama-bench and llama-batched-bench need the same model as a GGUF file. This
writes one with llama.cpp's own gguf-py: architecture "gpt2", every tensor
F32 (matrices, embeddings and linear biases N(0, 0.02) from the seed,
LayerNorm weights 1 and biases 0), no output.weight (llama.cpp then ties the
LM head to token_embd, as GPT-2 does), and the GPT-2 BPE tokenizer
(tokenizer.ggml.model "gpt2", pre "gpt-2") from models/gpt2-bpe, so llama.cpp
loads it as it would a converted GPT-2. The file is about 500 MB: write it
outside the repository. docs/bench.md ("Twins in llama.cpp") shows its use.

Usage:
  /usr/bin/python3 scripts/make_gpt2_gguf.py LLAMA_CPP/gguf-py OUT.gguf [SEED]
Needs numpy and yaml (Debian: python3-numpy python3-yaml); SEED defaults to 1.
"""
import json
import os
import sys

import numpy as np

N_LAYER = 12
N_HEAD = 12
N_EMBD = 768
N_CTX = 1024
LAYER_NORM_EPS = 1e-5
BPE_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                       "models", "gpt2-bpe")
END_OF_TEXT = "<|endoftext|>"


def read_tokenizer():
    """GPT-2's tokens in id order, and its merges in rank order."""
    with open(os.path.join(BPE_DIR, "encoder.json"), encoding="utf-8") as f:
        encoder = json.load(f)
    tokens = sorted(encoder, key=encoder.get)
    assert [encoder[t] for t in tokens] == list(range(len(tokens)))
    with open(os.path.join(BPE_DIR, "vocab.bpe"), encoding="utf-8") as f:
        lines = f.read().split("\n")
    merges = [line for line in lines[1:] if line]  # line 0 is "#version: 0.2"
    return tokens, merges


def add_tokenizer(writer, gguf, tokens, merges):
    end_of_text = tokens.index(END_OF_TEXT)
    types = [gguf.TokenType.NORMAL] * len(tokens)
    types[end_of_text] = gguf.TokenType.CONTROL
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("gpt-2")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    writer.add_bos_token_id(end_of_text)
    writer.add_eos_token_id(end_of_text)
    writer.add_add_bos_token(False)


def add_hparams(writer, gguf):
    writer.add_name("GPT-2 124M shapes, random weights")
    writer.add_context_length(N_CTX)
    writer.add_embedding_length(N_EMBD)
    writer.add_feed_forward_length(4 * N_EMBD)
    writer.add_block_count(N_LAYER)
    writer.add_head_count(N_HEAD)
    writer.add_layer_norm_eps(LAYER_NORM_EPS)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)


def gpt2_tensors(n_vocab, rng):
    """(GGUF name, array) for every tensor; arrays are [out, in] like ggml's."""
    C = N_EMBD

    def normal(*shape):
        return rng.standard_normal(shape, dtype=np.float32) * np.float32(0.02)

    def norm(name):
        return [(name + ".weight", np.ones(C, np.float32)),
                (name + ".bias", np.zeros(C, np.float32))]

    def linear(name, n_in, n_out):
        return [(name + ".weight", normal(n_out, n_in)), (name + ".bias", normal(n_out))]

    tensors = [("token_embd.weight", normal(n_vocab, C)),
               ("position_embd.weight", normal(N_CTX, C))]
    for i in range(N_LAYER):
        blk = f"blk.{i}."
        tensors += norm(blk + "attn_norm")
        tensors += linear(blk + "attn_qkv", C, 3 * C)
        tensors += linear(blk + "attn_output", C, C)
        tensors += norm(blk + "ffn_norm")
        tensors += linear(blk + "ffn_up", C, 4 * C)
        tensors += linear(blk + "ffn_down", 4 * C, C)
    tensors += norm("output_norm")
    return tensors


def main(argv):
    if len(argv) not in (3, 4):
        sys.exit(__doc__)
    gguf_py, out = argv[1], argv[2]
    seed = int(argv[3]) if len(argv) == 4 else 1
    sys.path.insert(0, gguf_py)
    import gguf

    tokens, merges = read_tokenizer()
    writer = gguf.GGUFWriter(out, gguf.MODEL_ARCH_NAMES[gguf.MODEL_ARCH.GPT2])
    add_hparams(writer, gguf)
    add_tokenizer(writer, gguf, tokens, merges)
    for name, array in gpt2_tensors(len(tokens), np.random.default_rng(seed)):
        writer.add_tensor(name, array)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    print(f"wrote {out}: {len(tokens)} tokens, {len(merges)} merges, seed {seed}")


if __name__ == "__main__":
    main(sys.argv)
