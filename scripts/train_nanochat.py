#!/usr/bin/python3
"""Train the bundled nanochat-architecture chat model (models/fortunes-chat/)
on Debian's `fortunes` text, on the CPU, and save it the way nanochat saves
its checkpoints, for scripts/convert_nanochat.py.

Written for kvtier in plain PyTorch (not nanochat's code) from
../shared/notes/nanochat.md: the generation-5 model (value embeddings with
3*sigmoid gates on 12 channels, per-layer sliding windows, smear, backout,
resid/x0 lambdas, GQA, rotary base 100000 with q/k x1.2 after QK norm,
ReLU^2 MLP, untied head, softcap 15), a byte-level BPE tokenizer in
nanochat's format, base training on the fortunes, then a chat fine-tune
(SFT) on their "Q:"/"A:" jokes rendered as nanochat's render_conversation
renders a conversation.

Modes:
    train (default)  /usr/bin/python3 scripts/train_nanochat.py --out BASE ...
        BASE receives nanochat's base directory:
          tokenizer/tokenizer.pkl          pickled tiktoken.core.Encoding
          base_checkpoints/d4/model_NNNNNN.pt + meta_NNNNNN.json
          chatsft_checkpoints/d4/model_NNNNNN.pt + meta_NNNNNN.json
          TRAINING-draft.md                settings, losses, samples
    --selftest        random weights (every tensor non-zero) saved as a
                      checkpoint, converted with scripts/convert_nanochat.py,
                      and the converted folder's logits from
                      tests/nanochat_reference.py (float64) compared with
                      this file's torch forward (float32)
    --golden DIR      DIR is the converted model folder: writes
                      DIR/golden.json (see golden() for its shape) from this
                      file's torch forward over DIR/model.safetensors and
                      cross-checks it with tests/nanochat_reference.py

The tokenizer's split pattern is nanochat's (notes section 4):
  '(?i:[sdmt]|ll|ve|re)|[^\\r\\n\\p{L}\\p{N}]?+\\p{L}+|\\p{N}{1,2}| ?[^\\s\\p{L}\\p{N}]++[\\r\\n]*|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+
Python's `re` has neither possessive quantifiers nor \\p classes and
Debian's python3-regex is not installed here, so split() below is a
hand-written matcher of that pattern (\\p{L}: Unicode category L*, \\p{N}:
N*, \\s: str.isspace; the case-insensitive contraction matches ASCII case
only). The training text is printable ASCII plus newlines, where it is
exact.
"""
import os

# One BLAS/OpenMP thread: the machine is shared (see train_char_model.py).
for _v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import argparse
import collections
import json
import math
import pickle
import re
import shutil
import subprocess
import sys
import tempfile
import time
import types
import unicodedata

import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from train_char_model import FORTUNE_DIR, keep_freed_memory, load_corpus  # noqa: E402

PATTERN = (r"'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,2}| ?[^\s\p{L}\p{N}]++"
           r"[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+")
SPECIALS = ["<|bos|>", "<|user_start|>", "<|user_end|>", "<|assistant_start|>",
            "<|assistant_end|>", "<|python_start|>", "<|python_end|>", "<|output_start|>",
            "<|output_end|>"]
PAD_VOCAB_TO = 64  # nanochat's pad_vocab_size_to: Vp = ceil(V/64)*64
TAG = "d4"


# ----------------------------------------------------------------------------
# tokenizer: nanochat's split pattern, byte-level BPE, tiktoken's encoder

def _letter(c):
    return unicodedata.category(c)[0] == "L"


def _number(c):
    return unicodedata.category(c)[0] == "N"


def _space(c):
    return c.isspace()


def _match_at(s, i):
    """End of the match of PATTERN at position i (the alternatives tried in
    order, as a backtracking regex engine does)."""
    n = len(s)
    c = s[i]
    # 1. '(?i:[sdmt]|ll|ve|re)
    if c == "'" and i + 1 < n:
        if s[i + 1] in "sdmtSDMT":
            return i + 2
        if s[i + 1:i + 3].lower() in ("ll", "ve", "re"):
            return i + 3
    # 2. [^\r\n\p{L}\p{N}]?+\p{L}+  (the optional char is possessive)
    j = i
    if c not in "\r\n" and not _letter(c) and not _number(c):
        j = i + 1
    if j < n and _letter(s[j]):
        while j < n and _letter(s[j]):
            j += 1
        return j
    # 3. \p{N}{1,2}
    if _number(c):
        return i + 2 if i + 1 < n and _number(s[i + 1]) else i + 1

    # 4.  ?[^\s\p{L}\p{N}]++[\r\n]*
    def punct(ch):
        return not _space(ch) and not _letter(ch) and not _number(ch)
    j = i + 1 if c == " " and i + 1 < n and punct(s[i + 1]) else i
    if j < n and punct(s[j]):
        while j < n and punct(s[j]):
            j += 1
        while j < n and s[j] in "\r\n":
            j += 1
        return j
    # the rest start with whitespace
    assert _space(c), repr(c)
    end = i
    while end < n and _space(s[end]):
        end += 1
    # 5. \s*[\r\n]: the longest whitespace prefix ending in \r or \n
    for k in range(end - 1, i - 1, -1):
        if s[k] in "\r\n":
            return k + 1
    # 6. \s+(?!\S): the whole run at the end of the text, else all but its last char
    if end == n:
        return end
    if end - i >= 2:
        return end - 1
    # 7. \s+
    return end


def split(text):
    out, i = [], 0
    while i < len(text):
        j = _match_at(text, i)
        out.append(text[i:j])
        i = j
    return out


def bpe_merge(piece, ranks):
    """tiktoken's byte_pair_merge: repeatedly join the adjacent pair whose
    concatenation has the lowest rank."""
    parts = [piece[i:i + 1] for i in range(len(piece))]
    while len(parts) > 1:
        best, at = None, -1
        for k in range(len(parts) - 1):
            r = ranks.get(parts[k] + parts[k + 1])
            if r is not None and (best is None or r < best):
                best, at = r, k
        if best is None:
            break
        parts[at:at + 2] = [parts[at] + parts[at + 1]]
    return [ranks[p] for p in parts]


class Tokenizer:
    def __init__(self, ranks):
        self.ranks = ranks
        self.inverse = {r: b for b, r in ranks.items()}
        self.specials = {name: len(ranks) + i for i, name in enumerate(SPECIALS)}
        self.vocab_size = len(ranks) + len(SPECIALS)
        self.cache = {}

    def encode(self, text):
        """tiktoken encode_ordinary: special-token text is plain text."""
        ids = []
        for piece in split(text):
            got = self.cache.get(piece)
            if got is None:
                got = bpe_merge(piece.encode("utf-8"), self.ranks)
                self.cache[piece] = got
            ids.extend(got)
        return ids

    def decode(self, ids):
        names = {v: k for k, v in self.specials.items()}
        out, buf = [], b""
        for t in ids:
            if t in names:
                out.append(buf.decode("utf-8", "replace") + names[t])
                buf = b""
            else:
                buf += self.inverse[t]
        out.append(buf.decode("utf-8", "replace"))
        return "".join(out)

    def state(self):
        """What tiktoken's Encoding.__getstate__ returns for nanochat's."""
        return {"name": "rustbpe", "pat_str": PATTERN, "mergeable_ranks": dict(self.ranks),
                "special_tokens": dict(self.specials)}


def train_bpe(text, n_ranks):
    """Byte-level BPE: ranks 0..255 the bytes in byte order, then one rank per
    merge, in merge order. Each step merges the most frequent adjacent pair
    of the split pieces (ties: the pair of smallest ids)."""
    counts = collections.Counter(split(text))
    words = [[b for b in w.encode("utf-8")] for w in counts]
    freq = list(counts.values())
    vocab = {i: bytes([i]) for i in range(256)}
    pairs = collections.Counter()
    where = collections.defaultdict(set)
    for wi, w in enumerate(words):
        for a, b in zip(w, w[1:]):
            pairs[(a, b)] += freq[wi]
            where[(a, b)].add(wi)
    for new in range(256, n_ranks):
        if not pairs:
            break
        top = max(pairs.values())
        pair = min(p for p, c in pairs.items() if c == top)
        vocab[new] = vocab[pair[0]] + vocab[pair[1]]
        for wi in sorted(where.pop(pair, ())):
            w, f = words[wi], freq[wi]
            for a, b in zip(w, w[1:]):
                pairs[(a, b)] -= f
                if pairs[(a, b)] <= 0:
                    del pairs[(a, b)]
            merged, k = [], 0
            while k < len(w):
                if k + 1 < len(w) and (w[k], w[k + 1]) == pair:
                    merged.append(new)
                    k += 2
                else:
                    merged.append(w[k])
                    k += 1
            words[wi] = merged
            for a, b in zip(merged, merged[1:]):
                pairs[(a, b)] += f
                where[(a, b)].add(wi)
        pairs.pop(pair, None)
    ranks = {}
    for i in sorted(vocab):
        assert vocab[i] not in ranks, vocab[i]
        ranks[vocab[i]] = i
    return ranks


# tiktoken's class, pickled by reference as tiktoken.core.Encoding (the
# tiktoken package is not installed; tests/data/make_nanochat_base.py does
# the same).
_tiktoken = types.ModuleType("tiktoken")
_tiktoken.core = types.ModuleType("tiktoken.core")


class Encoding:
    def __init__(self, state):
        self._state = state

    def __getstate__(self):
        return self._state


Encoding.__module__ = "tiktoken.core"
_tiktoken.core.Encoding = Encoding
sys.modules.setdefault("tiktoken", _tiktoken)
sys.modules.setdefault("tiktoken.core", _tiktoken.core)


def save_tokenizer(tok, base):
    os.makedirs(os.path.join(base, "tokenizer"), exist_ok=True)
    with open(os.path.join(base, "tokenizer", "tokenizer.pkl"), "wb") as f:
        pickle.dump(Encoding(tok.state()), f, protocol=4)


def ranks_from_tiktoken_file(path):
    import base64
    ranks = {}
    with open(path) as f:
        for line in f:
            if line.strip():
                b, r = line.split()
                ranks[base64.b64decode(b)] = int(r)
    return ranks


# ----------------------------------------------------------------------------
# the model (nanochat generation 5)

EPS = torch.finfo(torch.float32).eps  # F.rms_norm's default eps for fp32


def norm(x):
    return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + EPS)


def rotary_table(head_dim, positions, base=100000.0):
    """float32 table (a CPU-trained G5's): inverse frequencies and angles in
    float32, cos/sin of the float32 angle rounded to float32, as
    tests/nanochat_reference.py makes it."""
    ch = torch.arange(0, head_dim, 2, dtype=torch.float32)
    inv = (1.0 / torch.pow(torch.tensor(base, dtype=torch.float64),
                           (ch / head_dim).double())).float()
    ang = torch.outer(torch.arange(positions, dtype=torch.float32), inv)
    return ang.double().cos().float(), ang.double().sin().float()


def rope(x, cos, sin):
    # x (B, T, heads, D); pairs (j, j + D/2); rotation by -theta, as nanochat.
    d = x.shape[-1] // 2
    x1, x2 = x[..., :d], x[..., d:]
    c, s = cos[None, :, None, :], sin[None, :, None, :]
    return torch.cat([x1 * c + x2 * s, -x1 * s + x2 * c], dim=-1)


def has_ve(i, n_layer):
    return i % 2 == (n_layer - 1) % 2


class Attention(nn.Module):
    def __init__(self, cfg, i):
        super().__init__()
        C, H, Hkv = cfg["n_embd"], cfg["n_head"], cfg["n_kv_head"]
        self.H, self.Hkv, self.D = H, Hkv, C // H
        self.c_q = nn.Linear(C, H * self.D, bias=False)
        self.c_k = nn.Linear(C, Hkv * self.D, bias=False)
        self.c_v = nn.Linear(C, Hkv * self.D, bias=False)
        self.c_proj = nn.Linear(C, C, bias=False)
        self.ve_gate = nn.Linear(12, Hkv, bias=False) if has_ve(i, cfg["n_layer"]) else None

    def forward(self, h, ve, cos, sin, mask):
        B, T, _ = h.shape
        q = self.c_q(h).view(B, T, self.H, self.D)
        k = self.c_k(h).view(B, T, self.Hkv, self.D)
        v = self.c_v(h).view(B, T, self.Hkv, self.D)
        if ve is not None:
            gate = 3.0 * torch.sigmoid(self.ve_gate(h[..., :12]))  # (B, T, Hkv)
            v = v + gate.unsqueeze(-1) * ve.view(B, T, self.Hkv, self.D)
        q, k = norm(rope(q, cos, sin)) * 1.2, norm(rope(k, cos, sin)) * 1.2
        rep = self.H // self.Hkv
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(self.D)
        att = att.masked_fill(~mask, float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, -1)
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self, C):
        super().__init__()
        self.c_fc = nn.Linear(C, 4 * C, bias=False)
        self.c_proj = nn.Linear(4 * C, C, bias=False)

    def forward(self, x):
        return self.c_proj(F.relu(self.c_fc(x)).square())


class Block(nn.Module):
    def __init__(self, cfg, i):
        super().__init__()
        self.attn = Attention(cfg, i)
        self.mlp = MLP(cfg["n_embd"])

    def forward(self, x, ve, cos, sin, mask):
        x = x + self.attn(norm(x), ve, cos, sin, mask)
        return x + self.mlp(norm(x))


class GPT(nn.Module):
    """Parameters directly on the module come first in state_dict(), then the
    children in registration order: nanochat's key order (notes section 1)."""

    def __init__(self, cfg, softcap=15.0):
        super().__init__()
        self.cfg, self.softcap = dict(cfg), softcap
        L, C, V = cfg["n_layer"], cfg["n_embd"], cfg["vocab_size"]
        Vp = -(-V // PAD_VOCAB_TO) * PAD_VOCAB_TO
        KV = cfg["n_kv_head"] * (C // cfg["n_head"])
        self.resid_lambdas = nn.Parameter(torch.ones(L))
        self.x0_lambdas = nn.Parameter(torch.zeros(L))
        self.smear_lambda = nn.Parameter(torch.zeros(1))
        self.backout_lambda = nn.Parameter(torch.zeros(1))
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(Vp, C),
            h=nn.ModuleList([Block(cfg, i) for i in range(L)])))
        self.lm_head = nn.Linear(C, Vp, bias=False)
        self.value_embeds = nn.ModuleDict({str(i): nn.Embedding(Vp, KV)
                                           for i in range(L) if has_ve(i, L)})
        self.smear_gate = nn.Linear(24, 1, bias=False)
        S = cfg["sequence_len"]
        cos, sin = rotary_table(C // cfg["n_head"], 10 * S)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

    def windows(self):
        S, L = self.cfg["sequence_len"], self.cfg["n_layer"]
        pattern = self.cfg["window_pattern"].upper()
        short = -(-S // 512) * 128
        return [S if i == L - 1 or pattern[i % len(pattern)] == "L" else short
                for i in range(L)]

    def init_weights(self, gen):
        """kvtier's own choice (not nanochat's init): embeddings N(0,1),
        q/k/v/c_fc uniform +-sqrt(3/C), both output projections zero,
        lm_head N(0, 0.001); gates zero (VE gate 1.5, smear gate 0.5),
        resid 1, x0 0.1, smear 0, backout 0.2."""
        C = self.cfg["n_embd"]
        bound = math.sqrt(3.0 / C)
        with torch.no_grad():
            self.transformer.wte.weight.normal_(0, 1, generator=gen)
            for ve in self.value_embeds.values():
                ve.weight.normal_(0, 1, generator=gen)
            for blk in self.transformer.h:
                for lin in (blk.attn.c_q, blk.attn.c_k, blk.attn.c_v, blk.mlp.c_fc):
                    lin.weight.uniform_(-bound, bound, generator=gen)
                blk.attn.c_proj.weight.zero_()
                blk.mlp.c_proj.weight.zero_()
                if blk.attn.ve_gate is not None:
                    blk.attn.ve_gate.weight.zero_()
            self.lm_head.weight.normal_(0, 0.001, generator=gen)
            self.smear_gate.weight.zero_()
            self.resid_lambdas.fill_(1.0)
            self.x0_lambdas.fill_(0.1)
            self.smear_lambda.fill_(0.0)
            self.backout_lambda.fill_(0.2)

    def forward(self, ids, targets=None):
        B, T = ids.shape
        L = self.cfg["n_layer"]
        x = norm(self.transformer.wte(ids))
        if T > 1:  # smear: mix in the previous token's pre-smear embedding
            gate = torch.sigmoid(self.smear_gate(x[:, 1:, :24]))
            x = torch.cat([x[:, :1], x[:, 1:] + self.smear_lambda * gate * x[:, :-1]], 1)
        x0 = x
        cos, sin = self.cos[:T], self.sin[:T]
        pos = torch.arange(T)
        causal = pos[None, :] <= pos[:, None]
        backout = None
        for i, blk in enumerate(self.transformer.h):
            w = self.windows()[i]
            mask = causal & (pos[None, :] >= pos[:, None] - w)
            x = self.resid_lambdas[i] * x + self.x0_lambdas[i] * x0
            ve = self.value_embeds[str(i)](ids) if str(i) in self.value_embeds else None
            x = blk(x, ve, cos, sin, mask)
            if i == L // 2:
                backout = x
        x = norm(x - self.backout_lambda * backout)
        logits = self.lm_head(x)[..., :self.cfg["vocab_size"]].float()
        logits = self.softcap * torch.tanh(logits / self.softcap)
        if targets is None:
            return logits
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1),
                               ignore_index=-1)


# ----------------------------------------------------------------------------
# checkpoints, as nanochat's checkpoint_manager writes them

def model_config_of(cfg):
    return {k: cfg[k] for k in ("sequence_len", "vocab_size", "n_layer", "n_head",
                                "n_kv_head", "n_embd", "window_pattern")}


def save_checkpoint(base, source_dir, model, step, meta):
    folder = os.path.join(base, source_dir, TAG)
    os.makedirs(folder, exist_ok=True)
    torch.save(model.state_dict(), os.path.join(folder, f"model_{step:06d}.pt"))
    with open(os.path.join(folder, f"meta_{step:06d}.json"), "w") as f:
        json.dump(meta, f, indent=2)
    return folder


def load_converted(model_dir):
    """A torch GPT from a converted folder (config.json + model.safetensors)."""
    from safetensors_io import load_file
    with open(os.path.join(model_dir, "config.json")) as f:
        conf = json.load(f)
    model = GPT(conf, softcap=conf["softcap"])
    tensors, _ = load_file(os.path.join(model_dir, "model.safetensors"))
    sd = {k: torch.from_numpy(v.copy()) for k, v in tensors.items()}
    model.load_state_dict(sd, strict=True)
    model.eval()
    return model, conf


# ----------------------------------------------------------------------------
# data

def fortune_entries(text):
    """The fortunes, one string each, without their "%" separator lines."""
    entries, cur = [], []
    for line in text.split("\n"):
        if line.strip() == "%":
            if "".join(cur).strip():
                entries.append("\n".join(cur).strip("\n") + "\n")
            cur = []
        else:
            cur.append(line)
    if "".join(cur).strip():
        entries.append("\n".join(cur).strip("\n") + "\n")
    return entries


def qa_conversations(entries):
    """Fortunes made of "Q:"/"A:" lines: the markers at the start of a line
    (after spaces), strictly alternating Q, A, Q, A, ..., ending on an A; any
    text before the first Q (a title such as "Real-Life Courtroom Quote
    #19:") dropped; each turn's whitespace collapsed and at most 300
    characters. One conversation per fortune: a list of turn strings,
    user first."""
    out = []
    for e in entries:
        marks = list(re.finditer(r"(?m)^[ ]*([QA]):", e))
        if not marks or len(marks) % 2:
            continue
        if [m.group(1) for m in marks] != ["Q", "A"] * (len(marks) // 2):
            continue
        turns = []
        for k, m in enumerate(marks):
            end = marks[k + 1].start() if k + 1 < len(marks) else len(e)
            turns.append(" ".join(e[m.end():end].split()))
        if all(turns) and all(len(t) <= 300 for t in turns):
            out.append(turns)
    return out


def render_conversation(tok, messages):
    """nanochat's render_conversation for plain-text turns: ids and mask
    (1 on assistant content and <|assistant_end|>)."""
    sp = tok.specials
    ids, mask = [sp["<|bos|>"]], [0]
    for i, m in enumerate(messages):
        assert m["role"] == ("user" if i % 2 == 0 else "assistant")
        body = tok.encode(m["content"])
        if m["role"] == "user":
            part = [sp["<|user_start|>"]] + body + [sp["<|user_end|>"]]
            ids += part
            mask += [0] * len(part)
        else:
            ids += [sp["<|assistant_start|>"]] + body + [sp["<|assistant_end|>"]]
            mask += [0] + [1] * (len(body) + 1)
    return ids, mask


def render_for_completion(tok, user_turns_and_replies):
    """[bos] + user/assistant turns + <|assistant_start|>, as chat_cli does."""
    sp = tok.specials
    ids = [sp["<|bos|>"]]
    for i, text in enumerate(user_turns_and_replies):
        if i % 2 == 0:
            ids += [sp["<|user_start|>"]] + tok.encode(text) + [sp["<|user_end|>"]]
        else:
            ids += [sp["<|assistant_start|>"]] + tok.encode(text) + [sp["<|assistant_end|>"]]
    return ids + [sp["<|assistant_start|>"]]


# ----------------------------------------------------------------------------
# training

def lr_at(it, total, peak, warmup, final_frac):
    if it < warmup:
        return peak * (it + 1) / warmup
    frac = min(1.0, (it - warmup) / max(1, total - warmup))
    return peak * (final_frac + (1 - final_frac) * 0.5 * (1 + math.cos(math.pi * frac)))


def make_optimizer(model, lr, wd, embed_mult=1.0):
    """AdamW; the embedding tables (wte, value_embeds) at embed_mult x lr,
    the other 2-D tensors with weight decay wd, scalars and gates without."""
    groups = {"embed": [], "decay": [], "rest": []}
    for n, p in model.named_parameters():
        if n.startswith(("transformer.wte.", "value_embeds.")):
            groups["embed"].append(p)
        elif p.dim() >= 2:
            groups["decay"].append(p)
        else:
            groups["rest"].append(p)
    opt = torch.optim.AdamW([
        {"params": groups["embed"], "weight_decay": 0.0, "mult": embed_mult},
        {"params": groups["decay"], "weight_decay": wd, "mult": 1.0},
        {"params": groups["rest"], "weight_decay": 0.0, "mult": 1.0}],
        lr=lr, betas=(0.9, 0.95), eps=1e-8)
    return opt


def set_lr(opt, lr):
    for grp in opt.param_groups:
        grp["lr"] = lr * grp["mult"]


def base_batch(stream, T, B, gen):
    ix = torch.randint(len(stream) - T - 1, (B,), generator=gen)
    rows = ix[:, None] + torch.arange(T + 1)
    chunk = stream[rows]
    return chunk[:, :-1], chunk[:, 1:]


@torch.no_grad()
def base_eval(model, stream, T, B, n, seed):
    model.eval()
    gen = torch.Generator().manual_seed(seed)
    losses = [model(*base_batch(stream, T, B, gen)).item() for _ in range(n)]
    model.train()
    return sum(losses) / len(losses)


def sft_batch(convs, idx, T):
    """Rows padded to the longest conversation (cut to T+1); targets -1
    where the mask is 0 and on the padding."""
    rows = [convs[i] for i in idx]
    n = min(T + 1, max(len(r[0]) for r in rows))
    x = torch.zeros(len(rows), n - 1, dtype=torch.long)
    y = torch.full((len(rows), n - 1), -1, dtype=torch.long)
    for r, (ids, mask) in enumerate(rows):
        ids, mask = ids[:n], mask[:n]
        x[r, :len(ids) - 1] = torch.tensor(ids[:-1])
        tgt = torch.tensor([t if m else -1 for t, m in zip(ids[1:], mask[1:])])
        y[r, :len(ids) - 1] = tgt
    return x, y


@torch.no_grad()
def sft_eval(model, convs, T, B):
    model.eval()
    tot, cnt = 0.0, 0
    for s in range(0, len(convs), B):
        x, y = sft_batch(convs, range(s, min(len(convs), s + B)), T)
        logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1),
                               ignore_index=-1, reduction="sum")
        tot += loss.item()
        cnt += int((y >= 0).sum())
    model.train()
    return tot / max(1, cnt)


@torch.no_grad()
def greedy(model, ids, n, stop=()):
    """Greedy continuation by full recompute; returns (tokens, margins,
    last-prompt-position logits)."""
    seq, out, margins, first = list(ids), [], [], None
    for _ in range(n):
        logits = model(torch.tensor([seq]))[0, -1]
        if first is None:
            first = logits.clone()
        top = torch.topk(logits, 2)
        margins.append(float(top.values[0] - top.values[1]))
        t = int(top.indices[0])
        out.append(t)
        seq.append(t)
        if t in stop or len(seq) >= model.cfg["sequence_len"]:
            break
    return out, margins, first


CHAT_PROMPTS = [
    ["Why did the chicken cross the road?"],
    ["What do you call a dog with no legs?"],
    ["How many programmers does it take to change a light bulb?"],
    ["What is the meaning of life?"],
    ["Tell me a fortune."],
]
TEXT_PROMPTS = ["The trouble with ", "Q: What is", "A journey of a thousand miles "]


def samples(model, tok, n_new):
    sp = tok.specials
    stop = (sp["<|assistant_end|>"], sp["<|bos|>"])
    out = []
    for t in TEXT_PROMPTS:
        ids = [sp["<|bos|>"]] + tok.encode(t)
        got, _, _ = greedy(model, ids, n_new, stop=(sp["<|bos|>"],))
        out.append(("text", t, tok.decode(got)))
    for turns in CHAT_PROMPTS:
        ids = render_for_completion(tok, turns)
        got, _, _ = greedy(model, ids, n_new, stop=stop)
        out.append(("chat", turns[-1], tok.decode(got)))
    return out


def train(a):
    torch.set_num_threads(1)
    keep_freed_memory()
    t_start = time.time()
    deadline = t_start + a.minutes * 60
    cmdline = "/usr/bin/python3 scripts/train_nanochat.py " + " ".join(sys.argv[1:])
    files, text = load_corpus(a.corpus_dir)
    entries = fortune_entries(text)
    print(f"corpus: {len(files)} files, {len(text)} chars, {len(entries)} fortunes", flush=True)

    t0 = time.time()
    ranks = train_bpe(text, a.ranks)
    tok = Tokenizer(ranks)
    t_tok = time.time() - t0
    print(f"tokenizer: {len(ranks)} ranks + {len(SPECIALS)} specials = {tok.vocab_size} "
          f"({t_tok:.0f}s)", flush=True)
    save_tokenizer(tok, a.out)

    bos = tok.specials["<|bos|>"]
    n_val = max(1, len(entries) // 20)
    train_e, val_e = entries[:-n_val], entries[-n_val:]

    def stream_of(es):
        ids = []
        for e in es:
            ids.append(bos)
            ids.extend(tok.encode(e))
        return torch.tensor(ids, dtype=torch.long)
    train_s, val_s = stream_of(train_e), stream_of(val_e)
    n_bytes = sum(len(e.encode()) for e in train_e)
    print(f"base data: {len(train_e)} train fortunes ({len(train_s)} tokens, "
          f"{n_bytes / (len(train_s) - len(train_e)):.2f} bytes/token), "
          f"{len(val_e)} val ({len(val_s)} tokens)", flush=True)

    pairs = qa_conversations(entries)
    g = torch.Generator().manual_seed(a.seed + 10)
    perm = torch.randperm(len(pairs), generator=g).tolist()
    pairs = [pairs[i] for i in perm]
    n_sval = max(1, len(pairs) // 10)
    convs = [render_conversation(tok, [{"role": ("user", "assistant")[k % 2], "content": t}
                                       for k, t in enumerate(turns)])
             for turns in pairs]
    n_turns = sum(len(t) for t in pairs) // 2
    sft_train, sft_val = convs[n_sval:], convs[:n_sval]
    print(f"sft data: {len(pairs)} Q/A conversations ({n_turns} exchanges), "
          f"{len(sft_train)} train, "
          f"{len(sft_val)} val", flush=True)

    cfg = {"sequence_len": a.seq_len, "vocab_size": tok.vocab_size, "n_layer": a.n_layer,
           "n_head": a.n_head, "n_kv_head": a.n_kv_head, "n_embd": a.n_embd,
           "window_pattern": a.window_pattern}
    torch.manual_seed(a.seed)
    model = GPT(cfg, softcap=a.softcap)
    model.init_weights(torch.Generator().manual_seed(a.seed))
    n_params = sum(p.numel() for p in model.parameters())
    print(f"model: {cfg}, windows {model.windows()}, {n_params} parameters", flush=True)

    # ---- base training
    opt = make_optimizer(model, a.lr, a.weight_decay, a.embed_lr_mult)
    gen = torch.Generator().manual_seed(a.seed + 1)
    base_hist, t0, it = [], time.time(), 0
    base_deadline = t0 + a.base_minutes * 60
    last = float("nan")
    while it < a.base_iters:
        if it > 0 and it % a.eval_interval == 0:
            vl = base_eval(model, val_s, a.seq_len, a.batch_size, a.eval_batches, 1234)
            base_hist.append((it, time.time() - t0, vl))
            print(f"base iter {it}: val loss {vl:.4f} ({time.time() - t0:.0f}s)", flush=True)
        if time.time() > min(base_deadline, deadline):
            print(f"base: wall-clock budget reached at iter {it}", flush=True)
            break
        lr = lr_at(it, a.base_decay_iters or a.base_iters, a.lr, a.warmup, 0.1)
        set_lr(opt, lr)
        loss = model(*base_batch(train_s, a.seq_len, a.batch_size, gen))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        last = loss.item()
        if it % 10 == 0:
            print(f"base iter {it}: loss {last:.4f} lr {lr:.2e} ({time.time() - t0:.0f}s)",
                  flush=True)
        it += 1
    base_iters, base_time = it, time.time() - t0
    base_train = base_eval(model, train_s, a.seq_len, a.batch_size, a.eval_batches, 4321)
    base_val = base_eval(model, val_s, a.seq_len, a.batch_size, a.eval_batches, 1234)
    if not base_hist or base_hist[-1][0] != base_iters:
        base_hist.append((base_iters, base_time, base_val))
    val_bpb = base_val / math.log(2) * (len(val_s) - len(val_e)) / sum(
        len(e.encode()) for e in val_e)
    print(f"base: {base_iters} iters, {base_time:.0f}s, train {base_train:.4f}, "
          f"val {base_val:.4f} (~{val_bpb:.3f} bits/byte)", flush=True)
    user_config = {k: v for k, v in vars(a).items() if k not in ("selftest", "golden")}
    save_checkpoint(a.out, "base_checkpoints", model, base_iters, {
        "step": base_iters, "val_bpb": val_bpb, "model_config": model_config_of(cfg),
        "user_config": user_config, "device_batch_size": a.batch_size,
        "max_seq_len": a.seq_len,
        "loop_state": {"min_val_bpb": val_bpb, "smooth_train_loss": last,
                       "total_training_time": base_time}})

    # ---- SFT
    opt = make_optimizer(model, a.sft_lr, 0.0, a.embed_lr_mult)
    gen = torch.Generator().manual_seed(a.seed + 2)
    sft_before = sft_eval(model, sft_val, a.seq_len, a.batch_size)
    sft_hist, t0, it = [(0, 0.0, sft_before)], time.time(), 0
    print(f"sft iter 0: val loss {sft_before:.4f}", flush=True)
    while it < a.sft_iters:
        if time.time() > deadline:
            print(f"sft: wall-clock budget reached at iter {it}", flush=True)
            break
        lr = lr_at(it, a.sft_decay_iters or a.sft_iters, a.sft_lr, 0, 0.0)
        set_lr(opt, lr)
        idx = torch.randint(len(sft_train), (a.batch_size,), generator=gen).tolist()
        loss = model(*sft_batch(sft_train, idx, a.seq_len))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if it % 10 == 0:
            print(f"sft iter {it}: loss {loss.item():.4f} lr {lr:.2e} "
                  f"({time.time() - t0:.0f}s)", flush=True)
        it += 1
        if it % a.sft_eval_interval == 0:
            vl = sft_eval(model, sft_val, a.seq_len, a.batch_size)
            sft_hist.append((it, time.time() - t0, vl))
            print(f"sft iter {it}: val loss {vl:.4f}", flush=True)
    sft_iters, sft_time = it, time.time() - t0
    sft_train_loss = sft_eval(model, sft_train, a.seq_len, a.batch_size)
    sft_val_loss = sft_eval(model, sft_val, a.seq_len, a.batch_size)
    if sft_hist[-1][0] != sft_iters:
        sft_hist.append((sft_iters, sft_time, sft_val_loss))
    print(f"sft: {sft_iters} iters, {sft_time:.0f}s, train {sft_train_loss:.4f}, "
          f"val {sft_val_loss:.4f}", flush=True)
    save_checkpoint(a.out, "chatsft_checkpoints", model, sft_iters, {
        "step": sft_iters, "val_loss": sft_val_loss, "model_config": model_config_of(cfg),
        "user_config": user_config})

    model.eval()
    smp = samples(model, tok, 48)
    total = time.time() - t_start

    # ---- TRAINING-draft.md (copied into the model folder by hand)
    md = ["# fortunes-chat: nanochat-architecture (generation 5) chat model\n",
          "Produced by `scripts/train_nanochat.py` (tokenizer, model and training written "
          "for kvtier in plain PyTorch from `../shared/notes/nanochat.md`), saved as "
          "nanochat saves checkpoints, converted with `scripts/convert_nanochat.py`.\n",
          "## Command\n", f"```\n{cmdline}\n```\n"]
    cut = base_iters < a.base_iters or sft_iters < a.sft_iters
    if cut:
        md.append("The wall-clock budget cut this run short; the same weights are "
                  "reproduced, independent of machine speed, by:\n")
        md.append("```\n/usr/bin/python3 scripts/train_nanochat.py --out BASE "
                  f"--base-iters {base_iters} --base-decay-iters "
                  f"{a.base_decay_iters or a.base_iters} --sft-iters {sft_iters} "
                  f"--sft-decay-iters {a.sft_decay_iters or a.sft_iters} "
                  "--minutes 100000 --base-minutes 100000 (other flags as above)\n```\n")
    md.append(f"PyTorch {torch.__version__} (Debian python3-torch), "
              "torch.set_num_threads(1), CPU only, float32 throughout.\n")
    md.append("## Settings\n\n| setting | value |\n|---|---|")
    rows = [
        ("architecture", "nanochat generation 5 (notes §0/§2): untied wte/lm_head, "
         "weightless RMS norm, smear, resid/x0 lambdas, GQA attention with rotary "
         "(base 100000, fp32 table), QK norm and q/k x1.2, value embeddings with "
         "3·σ gates on 12 channels (layers 1 and 3), ReLU² MLP, backout after block "
         f"{a.n_layer // 2}, logits softcap {a.softcap}"),
        ("n_layer / n_head / n_kv_head / n_embd", f"{a.n_layer} / {a.n_head} / "
         f"{a.n_kv_head} / {a.n_embd} (head dim {a.n_embd // a.n_head})"),
        ("sequence_len", a.seq_len),
        ("window_pattern", f"{a.window_pattern} → windows {model.windows()} "
         "(short = ceil(S/512)·128; last layer forced L)"),
        ("vocab_size", f"{tok.vocab_size} ({len(ranks)} BPE ranks + 9 specials), "
         f"embedding rows padded to {model.transformer.wte.weight.shape[0]}"),
        ("parameters", f"{n_params} (incl. padded rows)"),
        ("optimizer", f"AdamW betas (0.9, 0.95), eps 1e-8; embedding tables (wte, "
         f"value_embeds) at {a.embed_lr_mult}× the lr; weight decay {a.weight_decay} on the "
         "other 2-D tensors (base), 0 (SFT); grad clip 1.0; fresh optimizer state for SFT"),
        ("base", f"batch {a.batch_size} × {a.seq_len} tokens, peak lr {a.lr}, warmup "
         f"{a.warmup}, cosine to 10% at iter {a.base_decay_iters or a.base_iters}; "
         f"{base_iters} of {a.base_iters} iters run"),
        ("SFT", f"batch {a.batch_size} conversations, lr {a.sft_lr} cosine to 0 at iter "
         f"{a.sft_decay_iters or a.sft_iters}; {sft_iters} of {a.sft_iters} iters run"),
        ("init", "embeddings N(0,1), q/k/v/c_fc U(±sqrt(3/C)), output projections 0, "
         "lm_head N(0,0.001), gates 0, resid 1, x0 0.1, smear 0, backout 0.2"),
        ("seed", f"{a.seed} (init; base batches {a.seed + 1}, SFT batches {a.seed + 2}, "
         f"Q/A shuffle {a.seed + 10})"),
        ("budget", f"--minutes {a.minutes}, --base-minutes {a.base_minutes}"),
    ]
    md += [f"| {k} | {v} |" for k, v in rows] + [""]
    md.append("## Data\n")
    md.append(f"Debian package `fortunes`: the {len(files)} plain-text files of "
              f"`{a.corpus_dir}` read and cleaned exactly as `scripts/train_char_model.py` "
              f"does (printable ASCII and newlines; tab → space), {len(text)} characters, "
              f"split at the `%` lines into {len(entries)} fortunes.\n")
    md.append(f"- Base: each fortune as `<|bos|>` + its text; the first {len(train_e)} "
              f"fortunes train ({len(train_s)} tokens), the last {len(val_e)} validate "
              f"({len(val_s)} tokens); random {a.seq_len}+1-token windows of the stream.")
    md.append(f"- SFT: the {len(pairs)} fortunes made of `Q:`/`A:` lines ({n_turns} "
              "question/answer exchanges: markers at the start of a line, strictly "
              "alternating Q, A, …, ending on an A; a title line before the first Q "
              "dropped; whitespace collapsed; each turn at most 300 characters), each Q a "
              "user turn and each A an assistant turn, rendered as nanochat's "
              "`render_conversation` does: `<|bos|><|user_start|>Q<|user_end|>"
              "<|assistant_start|>A<|assistant_end|>…`, loss on the answer tokens and "
              f"`<|assistant_end|>` only. Shuffled (seed {a.seed + 10}); {len(sft_val)} held "
              f"out for validation, {len(sft_train)} train.\n")
    md.append("## Tokenizer\n")
    md.append(f"Byte-level BPE trained here on the whole cleaned corpus ({t_tok:.0f} s): "
              "ranks 0–255 are the bytes in byte order, then "
              f"{len(ranks) - 256} merges in merge order (most frequent pair of the split "
              "pieces, ties to the smallest ids); split by nanochat's pattern (notes §4; "
              "a hand-written matcher, see the script's docstring); the nine special tokens "
              f"follow at {len(ranks)}–{len(ranks) + 8} in nanochat's order "
              f"(`<|bos|>` = {tok.specials['<|bos|>']}, `<|assistant_end|>` = "
              f"{tok.specials['<|assistant_end|>']}). Saved as nanochat's "
              "`tokenizer/tokenizer.pkl` (a pickled `tiktoken.core.Encoding`, name "
              "`rustbpe`). Encoding is tiktoken's (lowest-rank pair first). "
              f"{n_bytes / (len(train_s) - len(train_e)):.2f} bytes per token on the "
              "training fortunes.\n")
    md.append("## Result\n")
    md.append(f"- base: {base_iters} iters in {base_time:.0f} s; train loss {base_train:.4f}, "
              f"val loss {base_val:.4f} (≈ {val_bpb:.3f} bits per byte) — means of "
              f"{a.eval_batches} random batches")
    md.append(f"- SFT: {sft_iters} iters in {sft_time:.0f} s; assistant-token loss "
              f"{sft_before:.4f} before, train {sft_train_loss:.4f}, held-out val "
              f"{sft_val_loss:.4f}")
    md.append(f"- total wall time (tokenizer, data, both stages, samples): {total:.0f} s\n")
    md.append("Base val loss (iter, seconds, loss):\n\n```")
    md += [f"{i:6d} {s:7.0f}s {v:.4f}" for i, s, v in base_hist] + ["```\n"]
    md.append("SFT held-out loss (iter, seconds, loss):\n\n```")
    md += [f"{i:6d} {s:7.0f}s {v:.4f}" for i, s, v in sft_hist] + ["```\n"]
    md.append("## Samples (greedy, this script's torch forward, up to 48 tokens)\n")
    for kind, prompt, out in smp:
        if kind == "text":
            md.append(f"text `<|bos|>{prompt}` →\n\n```\n{prompt}{out}\n```\n")
        else:
            md.append(f"chat, user: {prompt!r} →\n\n```\n{out}\n```\n")
    with open(os.path.join(a.out, "TRAINING-draft.md"), "w") as f:
        f.write("\n".join(md) + "\n")
    for kind, prompt, out in smp:
        print(f"[{kind}] {prompt!r} -> {out!r}")
    print(f"done in {total:.0f}s", flush=True)


# ----------------------------------------------------------------------------
# self-test and golden

def convert(base, out, source):
    subprocess.run([sys.executable, os.path.join(HERE, "convert_nanochat.py"), base, out,
                    "--source", source, "--rope-table", "fp32", "--softcap", "15",
                    "--force"], check=True)


def reference_logits(model_dir, ids):
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    import nanochat_reference as ref
    return torch.from_numpy(ref.Nanochat(model_dir).forward(ids))


def selftest(a):
    torch.set_num_threads(1)
    tok = Tokenizer(train_bpe("the cat sat on the mat. It's 42! " * 20, 300))
    assert tok.decode(tok.encode("It's the 1234 cat\n\n  ok  ")) == "It's the 1234 cat\n\n  ok  "
    assert split("It's  a 123 test!!\n\n  x \n") == \
        ["It", "'s", " ", " a", " ", "12", "3", " test", "!!\n\n", " ", " x", " \n"], \
        split("It's  a 123 test!!\n\n  x \n")
    cfg = {"sequence_len": 256, "vocab_size": tok.vocab_size, "n_layer": 4, "n_head": 4,
           "n_kv_head": 2, "n_embd": 128, "window_pattern": "SSSL"}
    model = GPT(cfg)
    gen = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for n, p in model.named_parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * (0.5 if p.dim() < 2 else 0.3))
    model.eval()
    tmp = tempfile.mkdtemp(prefix="nanochat-selftest-")
    try:
        base, out = os.path.join(tmp, "base"), os.path.join(tmp, "out")
        save_tokenizer(tok, base)
        save_checkpoint(base, "chatsft_checkpoints", model, 7,
                        {"step": 7, "model_config": model_config_of(cfg)})
        convert(base, out, "sft")
        ids = torch.randint(tok.vocab_size, (200,), generator=gen).tolist()
        with torch.no_grad():
            mine = model(torch.tensor([ids]))[0].double()
        theirs = reference_logits(out, ids)
        d = float((mine - theirs).abs().max())
        print(f"selftest: T=200 (windows {model.windows()}), random weights: max |torch fp32 "
              f"- reference fp64| = {d:.2e}, logit range {float(theirs.abs().max()):.2f}")
        loaded, _ = load_converted(out)
        with torch.no_grad():
            d2 = float((loaded(torch.tensor([ids]))[0].double() - mine).abs().max())
        print(f"selftest: converted safetensors back into torch: max diff {d2:.2e}")
        assert d < 1e-4 and d2 == 0.0
        print("selftest OK")
    finally:
        shutil.rmtree(tmp)


GOLDEN_NEW = 24


def golden(model_dir):
    """DIR/golden.json:
    {"version": 1, "generator": "scripts/train_nanochat.py --golden",
     "dtype": "float32 torch (cross-checked against tests/nanochat_reference.py, float64)",
     "max_new_tokens": 24, "stop_tokens": [<|assistant_end|>, <|bos|>],
     "cases": [{"name", "kind": "text"|"chat", "prompt": the text (specials spelled out),
                "prompt_tokens": [ids], "greedy_tokens": [ids, up to 24, ending with a
                stop token if one came], "greedy_text": decoded continuation,
                "stopped": bool, "min_top2_margin": smallest top-1/top-2 logit gap over
                the greedy steps, "top5": [[id, logit], ...] at the last prompt position
                (largest first)}]}
    Greedy = argmax by full recompute of the whole sequence each step."""
    torch.set_num_threads(1)
    model, conf = load_converted(model_dir)
    tok = Tokenizer(ranks_from_tiktoken_file(os.path.join(model_dir, "tokenizer.tiktoken")))
    assert tok.specials == conf["tokenizer"]["special_tokens"]
    sp = tok.specials
    stop = [sp["<|assistant_end|>"], sp["<|bos|>"]]
    cases = []
    specs = [("text_trouble", "text", "The trouble with "),
             ("text_qa", "text", "Q: What do you get when you cross"),
             ("chat_chicken", "chat", ["Why did the chicken cross the road?"]),
             ("chat_lightbulb", "chat",
              ["How many programmers does it take to change a light bulb?"]),
             ("chat_two_turns", "chat", ["What is the meaning of life?", "42.",
                                         "Why did the chicken cross the road?"])]
    worst = 0.0
    for name, kind, p in specs:
        if kind == "text":
            ids = [sp["<|bos|>"]] + tok.encode(p)
        else:
            ids = render_for_completion(tok, p)
        out, margins, last = greedy(model, ids, GOLDEN_NEW, stop=tuple(stop))
        top = torch.topk(last, 5)
        # cross-check: the float64 reference over prompt + continuation
        ref = reference_logits(model_dir, ids + out[:-1])
        with torch.no_grad():
            mine = model(torch.tensor([ids + out[:-1]]))[0].double()
        worst = max(worst, float((ref - mine).abs().max()))
        ref_greedy = [int(ref[len(ids) - 1 + j].argmax()) for j in range(len(out))]
        assert ref_greedy == out, (name, ref_greedy, out)
        cases.append({"name": name, "kind": kind, "prompt": tok.decode(ids),
                      "prompt_tokens": ids, "greedy_tokens": out,
                      "greedy_text": tok.decode(out), "stopped": out[-1] in stop,
                      "min_top2_margin": round(min(margins), 6),
                      "top5": [[int(i), float(v)] for v, i in zip(top.values, top.indices)]})
        print(f"[{name}] {tok.decode(ids)!r} -> {tok.decode(out)!r} "
              f"(margin {min(margins):.3f})")
    print(f"golden: torch fp32 vs reference fp64 over all positions: max diff {worst:.2e}")
    assert worst < 1e-4
    doc = {"version": 1, "generator": "scripts/train_nanochat.py --golden",
           "dtype": "float32 torch (cross-checked against tests/nanochat_reference.py, "
                    "float64)",
           "max_new_tokens": GOLDEN_NEW, "stop_tokens": stop, "cases": cases}
    # One key per line, one case per line (json.dumps: floats as repr, exact).
    lines = [f"  {json.dumps(k)}: {json.dumps(v)}" for k, v in doc.items() if k != "cases"]
    lines.append('  "cases": [\n' + ",\n".join(f"    {json.dumps(c)}" for c in cases) + "\n  ]")
    with open(os.path.join(model_dir, "golden.json"), "w") as f:
        f.write("{\n" + ",\n".join(lines) + "\n}\n")
    with open(os.path.join(model_dir, "golden.json")) as f:
        assert json.load(f) == doc


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", help="nanochat base directory to write (train mode)")
    ap.add_argument("--selftest", action="store_true")
    ap.add_argument("--golden", metavar="MODEL_DIR")
    ap.add_argument("--corpus-dir", default=FORTUNE_DIR)
    ap.add_argument("--minutes", type=float, default=28.0, help="whole-run wall-clock budget")
    ap.add_argument("--base-minutes", type=float, default=20.0,
                    help="wall-clock budget of base training")
    ap.add_argument("--ranks", type=int, default=768, help="BPE ranks (256 bytes + merges)")
    ap.add_argument("--n-layer", type=int, default=4)
    ap.add_argument("--n-head", type=int, default=4)
    ap.add_argument("--n-kv-head", type=int, default=2)
    ap.add_argument("--n-embd", type=int, default=128)
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--window-pattern", default="SSSL")
    ap.add_argument("--softcap", type=float, default=15.0)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--base-iters", type=int, default=1500)
    ap.add_argument("--base-decay-iters", type=int, default=0,
                    help="end of the base cosine (default --base-iters)")
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--embed-lr-mult", type=float, default=5.0)
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--weight-decay", type=float, default=0.0)
    ap.add_argument("--sft-iters", type=int, default=200)
    ap.add_argument("--sft-decay-iters", type=int, default=0)
    ap.add_argument("--sft-lr", type=float, default=1e-3)
    ap.add_argument("--eval-interval", type=int, default=100)
    ap.add_argument("--sft-eval-interval", type=int, default=25)
    ap.add_argument("--eval-batches", type=int, default=10)
    ap.add_argument("--seed", type=int, default=1337)
    a = ap.parse_args()
    if a.selftest:
        selftest(a)
    elif a.golden:
        golden(a.golden)
    else:
        if not a.out:
            ap.error("--out BASE is required to train")
        train(a)


if __name__ == "__main__":
    main()
