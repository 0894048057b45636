#!/usr/bin/python3
"""Train the bundled character-level GPT-2 (nanoGPT architecture) on Debian's
`fortunes` text and export it as models/fortunes-char/.

Everything (model, data pipeline, safetensors export) is written here in plain
PyTorch; see scripts/safetensors_io.py for the file writer.

Example (the command used for each committed model is recorded in its
TRAINING.md):
    /usr/bin/python3 scripts/train_char_model.py --minutes 20 --max-iters 1500
    python3 scripts/train_char_model.py --device cuda --corpus-dir DIR ...  # on a GPU

On a GPU the loss is summed in another order than on the CPU, so a run there
reproduces its figures closely but not its bits.
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
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from safetensors_io import save_file  # noqa: E402

FORTUNE_DIR = "/usr/share/games/fortunes"


# ----------------------------------------------------------------------------
# data

def fortune_files(root=FORTUNE_DIR):
    """Plain-text fortune files: no extension, not under off/, regular files."""
    out = []
    for name in sorted(os.listdir(root)):
        p = os.path.join(root, name)
        if not os.path.isfile(p) or os.path.islink(p):
            continue
        if "." in name:  # *.dat, *.u8 and anything else with an extension
            continue
        out.append(name)
    return out


def clean_bytes(raw):
    """Keep printable ASCII 32..126 and '\\n'; tab -> space; drop the rest."""
    keep = bytearray()
    for b in raw:
        if b == 9:
            keep.append(32)
        elif b == 10 or 32 <= b <= 126:
            keep.append(b)
    return keep.decode("ascii")


def load_corpus(root):
    files = fortune_files(root)
    parts = []
    for name in files:
        with open(os.path.join(root, name), "rb") as f:
            t = clean_bytes(f.read())
        if t and not t.endswith("\n"):
            t += "\n"
        parts.append(t)
    return files, "".join(parts)


# ----------------------------------------------------------------------------
# model (GPT-2 as nanoGPT defines it)

def dropout_layer(p):
    """No layer at all for p = 0, so that such a run draws no random numbers
    for it (the committed fortunes-char run had none)."""
    return nn.Dropout(p) if p > 0 else nn.Identity()


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd, n_head, block_size, dropout):
        super().__init__()
        assert n_embd % n_head == 0
        self.n_head = n_head
        self.attn_dropout = dropout_layer(dropout)
        self.resid_dropout = dropout_layer(dropout)
        self.c_attn = nn.Linear(n_embd, 3 * n_embd, bias=True)
        self.c_proj = nn.Linear(n_embd, n_embd, bias=True)
        mask = torch.tril(torch.ones(block_size, block_size, dtype=torch.bool))
        self.register_buffer("mask", mask.view(1, 1, block_size, block_size),
                             persistent=False)

    def forward(self, x):
        B, T, C = x.shape
        hs = C // self.n_head
        q, k, v = self.c_attn(x).split(C, dim=2)
        q = q.view(B, T, self.n_head, hs).transpose(1, 2)
        k = k.view(B, T, self.n_head, hs).transpose(1, 2)
        v = v.view(B, T, self.n_head, hs).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        att = att.masked_fill(~self.mask[:, :, :T, :T], float("-inf"))
        att = self.attn_dropout(F.softmax(att, dim=-1))
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):
    def __init__(self, n_embd, dropout):
        super().__init__()
        self.c_fc = nn.Linear(n_embd, 4 * n_embd, bias=True)
        self.c_proj = nn.Linear(4 * n_embd, n_embd, bias=True)
        self.dropout = dropout_layer(dropout)

    def forward(self, x):
        return self.dropout(self.c_proj(F.gelu(self.c_fc(x))))  # exact erf GELU


class Block(nn.Module):
    def __init__(self, n_embd, n_head, block_size, dropout):
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd, eps=1e-5)
        self.attn = CausalSelfAttention(n_embd, n_head, block_size, dropout)
        self.ln_2 = nn.LayerNorm(n_embd, eps=1e-5)
        self.mlp = MLP(n_embd, dropout)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        x = x + self.mlp(self.ln_2(x))
        return x


class GPT(nn.Module):
    """Dropout (training only; 0 keeps the old models' runs) has no weights:
    the exported model is the same GPT-2 either way."""

    def __init__(self, vocab_size, block_size, n_layer, n_head, n_embd, dropout=0.0):
        super().__init__()
        self.block_size = block_size
        self.n_layer = n_layer
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(vocab_size, n_embd),
            wpe=nn.Embedding(block_size, n_embd),
            drop=dropout_layer(dropout),
            h=nn.ModuleList([Block(n_embd, n_head, block_size, dropout)
                             for _ in range(n_layer)]),
            ln_f=nn.LayerNorm(n_embd, eps=1e-5),
        ))
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
        self.lm_head.weight = self.transformer.wte.weight  # tied
        self.apply(self._init)
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * n_layer))

    @staticmethod
    def _init(m):
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, 0.0, 0.02)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, 0.0, 0.02)

    def forward(self, idx, targets=None):
        B, T = idx.shape
        assert T <= self.block_size
        pos = torch.arange(T, device=idx.device)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))
        for blk in self.transformer.h:
            x = blk(x)
        x = self.transformer.ln_f(x)
        logits = self.lm_head(x)
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)),
                                   targets.view(-1))
        return logits, loss

    def export_tensors(self):
        """nanoGPT state-dict names, [out, in] orientation, fixed order."""
        sd = self.state_dict()
        names = ["transformer.wte.weight", "transformer.wpe.weight"]
        for i in range(self.n_layer):
            p = f"transformer.h.{i}."
            for s in ["ln_1.weight", "ln_1.bias",
                      "attn.c_attn.weight", "attn.c_attn.bias",
                      "attn.c_proj.weight", "attn.c_proj.bias",
                      "ln_2.weight", "ln_2.bias",
                      "mlp.c_fc.weight", "mlp.c_fc.bias",
                      "mlp.c_proj.weight", "mlp.c_proj.bias"]:
                names.append(p + s)
        names += ["transformer.ln_f.weight", "transformer.ln_f.bias"]
        return {n: sd[n].detach().to(torch.float32).contiguous() for n in names}

    @torch.no_grad()
    def generate(self, idx, n, temperature=0.0, generator=None):
        for _ in range(n):
            ctx = idx[:, -self.block_size:]
            logits, _ = self(ctx)
            logits = logits[:, -1, :]
            if temperature <= 0:
                nxt = torch.argmax(logits, dim=-1, keepdim=True)
            else:
                probs = F.softmax(logits / temperature, dim=-1)
                # Sampled on the CPU: the generator is a CPU one on any device.
                nxt = torch.multinomial(probs.cpu(), 1, generator=generator).to(idx.device)
            idx = torch.cat([idx, nxt], dim=1)
        return idx


# ----------------------------------------------------------------------------
# training

def get_batch(data, block_size, batch_size, gen):
    """Offsets drawn on the CPU (the same batches on every device), rows
    gathered where `data` lives."""
    ix = torch.randint(len(data) - block_size - 1, (batch_size,), generator=gen)
    rows = ix.to(data.device)[:, None] + torch.arange(block_size, device=data.device)
    return data[rows], data[rows + 1]


@torch.no_grad()
def estimate_loss(model, data, args, n_batches, seed):
    """Mean loss over n_batches random batches drawn with a fixed seed."""
    model.eval()
    gen = torch.Generator().manual_seed(seed)
    losses = []
    for _ in range(n_batches):
        x, y = get_batch(data, args.block_size, args.batch_size, gen)
        _, loss = model(x, y)
        losses.append(loss.item())
    model.train()
    return sum(losses) / len(losses)


def lr_at(it, args):
    if it < args.warmup_iters:
        return args.lr * (it + 1) / args.warmup_iters
    horizon = args.lr_decay_iters or args.max_iters
    frac = (it - args.warmup_iters) / max(1, horizon - args.warmup_iters)
    frac = min(1.0, frac)
    return args.min_lr + 0.5 * (1.0 + math.cos(math.pi * frac)) * (args.lr - args.min_lr)


def keep_freed_memory():
    """Stop glibc from returning large freed blocks to the OS after every
    step: otherwise each iteration re-faults its activation buffers (about
    20% of a training step here was page faults).  Numerics are unaffected."""
    try:
        import ctypes
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-3, 1 << 30)  # M_MMAP_THRESHOLD
        libc.mallopt(-1, 1 << 30)  # M_TRIM_THRESHOLD
    except (OSError, AttributeError):
        pass


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(
        os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
        "models", "fortunes-char"))
    ap.add_argument("--minutes", type=float, default=20.0,
                    help="wall-clock training budget (stops early if reached)")
    ap.add_argument("--max-iters", type=int, default=1500,
                    help="iterations; also the horizon of the cosine schedule")
    ap.add_argument("--lr-decay-iters", type=int, default=0,
                    help="end of the cosine schedule (default: --max-iters); "
                         "lets a run cut short by --minutes be replayed exactly "
                         "with --max-iters <iters run> --lr-decay-iters <old max>")
    ap.add_argument("--eval-interval", type=int, default=100)
    ap.add_argument("--eval-batches", type=int, default=50)
    ap.add_argument("--n-layer", type=int, default=4)
    ap.add_argument("--n-head", type=int, default=4)
    ap.add_argument("--n-embd", type=int, default=128)
    ap.add_argument("--block-size", type=int, default=256)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--min-lr", type=float, default=1e-4)
    ap.add_argument("--warmup-iters", type=int, default=100)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--beta1", type=float, default=0.9)
    ap.add_argument("--beta2", type=float, default=0.99)
    ap.add_argument("--grad-clip", type=float, default=1.0)
    ap.add_argument("--dropout", type=float, default=0.0,
                    help="training only; the exported weights have no dropout")
    ap.add_argument("--seed", type=int, default=1337)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="cpu", help="cpu or cuda")
    ap.add_argument("--corpus-dir", default=FORTUNE_DIR,
                    help="the fortune files (a copy, where `fortunes` is not installed)")
    args = ap.parse_args()
    device = torch.device(args.device)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True  # training only: exported in fp32
        torch.backends.cudnn.allow_tf32 = True

    torch.set_num_threads(args.threads)
    keep_freed_memory()
    torch.manual_seed(args.seed)
    cmdline = "/usr/bin/python3 scripts/train_char_model.py " + " ".join(sys.argv[1:])

    files, text = load_corpus(args.corpus_dir)
    chars = sorted(set(text))
    stoi = {c: i for i, c in enumerate(chars)}
    V = len(chars)
    data = torch.tensor([stoi[c] for c in text], dtype=torch.long, device=device)
    n_train = int(0.9 * len(data))
    train_data, val_data = data[:n_train], data[n_train:]
    print(f"corpus: {len(files)} files, {len(text)} chars, vocab {V}, "
          f"train {len(train_data)}, val {len(val_data)}", flush=True)

    model = GPT(V, args.block_size, args.n_layer, args.n_head, args.n_embd,
                args.dropout).to(device)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"parameters: {n_params}", flush=True)

    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([
        {"params": decay, "weight_decay": args.weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ], lr=args.lr, betas=(args.beta1, args.beta2))

    gen = torch.Generator().manual_seed(args.seed + 1)
    history = []
    t0 = time.time()
    budget = args.minutes * 60.0
    it = 0
    last_loss = float("nan")
    while it < args.max_iters:
        if it % args.eval_interval == 0 and it > 0:
            vl = estimate_loss(model, val_data, args, args.eval_batches, 1234)
            history.append((it, time.time() - t0, vl))
            print(f"iter {it}: val loss {vl:.4f} ({time.time() - t0:.0f}s)", flush=True)
        if time.time() - t0 > budget:
            print(f"wall-clock budget reached at iter {it}", flush=True)
            break
        lr = lr_at(it, args)
        for g in opt.param_groups:
            g["lr"] = lr
        x, y = get_batch(train_data, args.block_size, args.batch_size, gen)
        _, loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if args.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip)
        opt.step()
        last_loss = loss.item()
        if it % 10 == 0:
            print(f"iter {it}: loss {last_loss:.4f} lr {lr:.2e} "
                  f"({time.time() - t0:.0f}s)", flush=True)
        it += 1
    train_time = time.time() - t0
    iters_run = it

    final_train = estimate_loss(model, train_data, args, args.eval_batches, 4321)
    final_val = estimate_loss(model, val_data, args, args.eval_batches, 1234)
    if not history or history[-1][0] != iters_run:
        history.append((iters_run, train_time, final_val))
    print(f"final: iters {iters_run}, {train_time:.0f}s, train loss {final_train:.4f}, "
          f"val loss {final_val:.4f}", flush=True)

    # ---- export
    os.makedirs(args.out, exist_ok=True)
    model.eval()
    tensors = model.export_tensors()
    save_file(tensors, os.path.join(args.out, "model.safetensors"),
              metadata={"format": "pt", "source": "scripts/train_char_model.py"})
    config = {
        "format": "nanogpt", "n_layer": args.n_layer, "n_head": args.n_head,
        "n_embd": args.n_embd, "vocab_size": V, "block_size": args.block_size,
        "bias": True, "gelu": "erf", "weight_layout": "out_in",
        "layer_norm_eps": 1e-5,
        "tokenizer": {"type": "char", "vocab": "vocab.json"},
    }
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")
    with open(os.path.join(args.out, "vocab.json"), "w") as f:
        json.dump({"chars": chars}, f)
        f.write("\n")

    # ---- samples
    def encode(s):
        return torch.tensor([[stoi[c] for c in s]], dtype=torch.long, device=device)

    def decode(ids):
        return "".join(chars[i] for i in ids)

    samples = []
    sgen = torch.Generator().manual_seed(args.seed + 2)
    for prompt in ["The ", "Q: What is the meaning of life?\nA:", "%\n"]:
        for temp in [0.0, 0.8]:
            out = model.generate(encode(prompt), 200, temperature=temp, generator=sgen)
            samples.append((prompt, temp, decode(out[0].tolist())))

    # ---- TRAINING.md
    md = []
    md.append(f"# {os.path.basename(os.path.normpath(args.out))}: character-level GPT-2 "
              "(nanoGPT layout)\n")
    md.append("Produced by `scripts/train_char_model.py` (model, data pipeline and "
              "safetensors writer written in plain PyTorch/numpy for kvtier).\n")
    md.append("## Command\n")
    md.append(f"```\n{cmdline}\n```\n")
    if iters_run < args.max_iters:
        md.append(f"The wall-clock budget stopped this run after {iters_run} of "
                  f"{args.max_iters} iterations (the machine was shared), so the "
                  "cosine schedule did not reach its end. The same weights are "
                  "reproduced, independent of machine speed, by:\n")
        md.append("```\n/usr/bin/python3 scripts/train_char_model.py "
                  f"--max-iters {iters_run} "
                  f"--lr-decay-iters {args.lr_decay_iters or args.max_iters} "
                  "--minutes 100000\n```\n")
    if device.type == "cuda":
        md.append(f"PyTorch {torch.__version__} on {torch.cuda.get_device_name(device)}, "
                  "TF32 matmuls in training (the weights are kept and exported in "
                  "fp32). A GPU sums in its own order: a rerun gives close figures, "
                  "not the same bits.\n")
    else:
        md.append(f"PyTorch {torch.__version__} (Debian python3-torch), "
                  f"torch.set_num_threads({args.threads}), CPU only.\n")
    md.append("## Settings\n")
    md.append("| setting | value |\n|---|---|")
    rows = [
        ("architecture", "GPT-2 / nanoGPT: token + learned position embeddings, "
                         "pre-LN blocks, causal MHA (fused c_attn split q,k,v), "
                         "MLP 4x with exact erf GELU, final ln_f, LM head tied to wte"),
        ("n_layer", args.n_layer), ("n_head", args.n_head), ("n_embd", args.n_embd),
        ("block_size", args.block_size), ("vocab_size", V), ("bias", "true"),
        ("dropout", f"{args.dropout} (training only)" if args.dropout else 0),
        ("layer_norm_eps", "1e-5"), ("parameters", n_params),
        ("optimizer", f"AdamW, betas ({args.beta1}, {args.beta2}), weight decay "
                      f"{args.weight_decay} on 2-D tensors (0 on biases/LayerNorm)"),
        ("learning rate", f"{args.lr} peak, linear warmup {args.warmup_iters} iters, "
                          f"cosine decay to {args.min_lr} at iter "
                          f"{args.lr_decay_iters or args.max_iters}"),
        ("batch size", args.batch_size), ("grad clip", args.grad_clip),
        ("max iters", args.max_iters), ("wall-clock budget", f"{args.minutes} min"),
        ("init", "normal std 0.02 (c_proj: 0.02/sqrt(2*n_layer)), biases 0"),
        ("seed", f"torch.manual_seed({args.seed}); batch sampler Generator seed "
                 f"{args.seed + 1}"),
        ("eval", f"every {args.eval_interval} iters, mean of {args.eval_batches} "
                 f"random val batches (fixed seed 1234)"),
    ]
    for k, v in rows:
        md.append(f"| {k} | {v} |")
    md.append("")
    md.append("## Data\n")
    md.append("Debian package `fortunes` (plain-text fortune files in "
              f"`{FORTUNE_DIR}/`, Debian 12's version). All {len(files)} files "
              "without an extension (skipping `*.dat`, `*.u8`; there is no `off/` "
              "directory), in sorted name order, concatenated (a `\\n` appended to "
              "a file not ending in one). Entries keep their `%` separator lines.\n")
    md.append("Files: " + ", ".join(f"`{n}`" for n in files) + "\n")
    md.append("Cleaning: bytes kept only if printable ASCII 32..126 or `\\n`; "
              "`\\t` mapped to a space; every other byte dropped.\n")
    md.append(f"Total {len(text)} characters, vocabulary {V} characters (sorted "
              f"by code point, `vocab.json`). Split by position: first 90% "
              f"({len(train_data)} chars) train, last 10% ({len(val_data)} chars) "
              "validation.\n")
    md.append("## Result\n")
    md.append(f"- iterations run: {iters_run}")
    md.append(f"- training wall time: {train_time:.0f} s ({train_time / 60:.1f} min)")
    md.append(f"- final train loss: {final_train:.4f} (mean of {args.eval_batches} "
              "random train batches)")
    md.append(f"- final val loss: {final_val:.4f} (mean of {args.eval_batches} "
              "random val batches)\n")
    md.append("Val loss history (iter, seconds, loss):\n")
    md.append("```")
    for h in history:
        md.append(f"{h[0]:6d} {h[1]:7.0f}s {h[2]:.4f}")
    md.append("```\n")
    md.append("## Samples\n")
    md.append("200 new characters per prompt; greedy = argmax, otherwise "
              f"temperature 0.8 multinomial sampling (Generator seed {args.seed + 2}).\n")
    for prompt, temp, s in samples:
        kind = "greedy" if temp == 0 else f"temperature {temp}"
        md.append(f"### {kind}, prompt {json.dumps(prompt)}\n")
        md.append("```\n" + s + "\n```\n")
    md.append("## Files\n")
    md.append("- `model.safetensors`: fp32, nanoGPT state-dict names, `[out, in]` "
              "Linear layout, no `lm_head.weight` (tied to `transformer.wte.weight`).")
    md.append("- `config.json`, `vocab.json` (token id = index in `chars`).")
    md.append("- `golden.json`: reference logits / greedy continuations from "
              "`scripts/make_golden.py`.\n")
    with open(os.path.join(args.out, "TRAINING.md"), "w") as f:
        f.write("\n".join(md))
    print("wrote", args.out, flush=True)


if __name__ == "__main__":
    main()
