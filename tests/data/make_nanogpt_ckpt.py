#!/usr/bin/python3
"""Write a nanoGPT checkpoint (ckpt.pt + meta.pkl) from a kvtier model folder,
byte for byte in the format torch.save uses, with nothing but the standard
library; tests/convert_nanogpt_test.cpp feeds it to scripts/convert_nanogpt.py.

    tests/data/make_nanogpt_ckpt.py MODEL_DIR OUT_DIR [options]

MODEL_DIR is a nanoGPT-format folder with F32 weights and, unless --no-meta,
a char vocab.json (models/fortunes-char). OUT_DIR/ckpt.pt is what nanoGPT's
train.py saves with compile=True: {'model': state_dict with "_orig_mod." keys, 'optimizer',
'model_args', 'iter_num', 'best_val_loss', 'config'}; OUT_DIR/meta.pkl is
prepare.py's {'vocab_size', 'itos', 'stoi'}.

The archive is torch.save's (compared with what Debian's python3-torch 1.13
writes, and read back by its torch.load): a stored (uncompressed) zip whose
folder is named after the file ("ckpt/"), holding data.pkl (a protocol-2
pickle in which each tensor is torch._utils._rebuild_tensor_v2(storage,
offset, size, stride, requires_grad, backward_hooks) and each storage the
persistent id ('storage', torch.<Type>Storage, key, 'cpu', numel)),
byteorder ("little"; torch 2.x writes it, 1.13 does not), one data/<key>
record per storage (keys "0", "1", ... in the order the pickle first meets
them, records in sorted key order), and version ("3\\n"); every record's
data starts 64-byte aligned, padded through an "FB" extra field.
torch's names are pickled by reference from stand-in modules registered under
sys.modules["torch"], so this never imports (or needs) the real one.

The state dict exercises what a reader must handle: lm_head.weight shares
wte's storage (tied), each layer's ln_1 weight and bias are views at offsets
0 and n_embd of one storage, layer 0's mlp.c_proj.weight is a transposed
(strided) view, the attn.bias causal masks are there, and the optimizer holds
tensors of its own. Options break it in the ways the test checks are refused.
"""
import argparse
import collections
import io
import json
import os
import pickle
import struct
import sys
import types
import zipfile

# ----------------------------------------------------------------------------
# stand-ins for the torch names data.pkl refers to

torch = types.ModuleType("torch")
torch._utils = types.ModuleType("torch._utils")


def _rebuild_tensor_v2(*args):
    raise RuntimeError("a stand-in for torch's, only ever pickled by name")


_rebuild_tensor_v2.__module__ = "torch._utils"
torch._utils._rebuild_tensor_v2 = _rebuild_tensor_v2
STORAGE = {  # dtype -> (torch storage class name, struct format)
    "f32": ("FloatStorage", "f"), "f16": ("HalfStorage", "e"),
    "bf16": ("BFloat16Storage", None), "f64": ("DoubleStorage", "d"),
}
for _class_name, _ in STORAGE.values():
    setattr(torch, _class_name, type(_class_name, (), {"__module__": "torch"}))
sys.modules["torch"] = torch
sys.modules["torch._utils"] = torch._utils


class Storage:
    def __init__(self, dtype, data):
        self.dtype, self.data = dtype, data
        self.itemsize = 2 if dtype in ("f16", "bf16") else 8 if dtype == "f64" else 4

    def numel(self):
        return len(self.data) // self.itemsize


class Tensor:
    """Pickles as torch.Tensor does (Tensor._reduce_ex_internal)."""

    def __init__(self, storage, offset, shape, stride=None):
        if stride is None:  # contiguous
            stride, step = [], 1
            for n in reversed(shape):
                stride.insert(0, step)
                step *= n
        self.storage, self.offset = storage, offset
        self.shape, self.stride = tuple(shape), tuple(stride)

    def __reduce_ex__(self, protocol):
        return (_rebuild_tensor_v2, (self.storage, self.offset, self.shape, self.stride,
                                     False, collections.OrderedDict()))


class Evil:
    """What a tampered checkpoint holds: unpickling it runs a shell command."""

    def __init__(self, command):
        self.command = command

    def __reduce__(self):
        return (os.system, (self.command,))


class TorchPickler(pickle.Pickler):
    """torch.save's persistent_id: storages go to data/<key>, not the pickle."""

    def __init__(self, file):
        super().__init__(file, protocol=2)
        self.keys = {}  # id(storage) -> key
        self.storages = {}  # key -> storage

    def persistent_id(self, obj):
        if not isinstance(obj, Storage):
            return None
        key = self.keys.setdefault(id(obj), str(len(self.keys)))
        self.storages[key] = obj
        return ("storage", getattr(torch, STORAGE[obj.dtype][0]), key, "cpu", obj.numel())


def write_torch_zip(path, obj):
    buf = io.BytesIO()
    pickler = TorchPickler(buf)
    pickler.dump(obj)
    archive = os.path.splitext(os.path.basename(path))[0]
    records = [("data.pkl", buf.getvalue()), ("byteorder", b"little")]
    records += [(f"data/{k}", pickler.storages[k].data) for k in sorted(pickler.storages)]
    records.append(("version", b"3\n"))
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        for name, data in records:
            info = zipfile.ZipInfo(f"{archive}/{name}", date_time=(1980, 1, 1, 0, 0, 0))
            # Local header (30 bytes + name + extra) padded so the data is 64-aligned.
            start = z.fp.tell() + 30 + len(info.filename.encode()) + 4
            pad = (-start) % 64
            info.extra = b"FB" + struct.pack("<H", pad) + b"Z" * pad
            z.writestr(info, data)


# ----------------------------------------------------------------------------
# the model, from a kvtier folder

def read_safetensors(path):
    with open(path, "rb") as f:
        buf = f.read()
    (n,) = struct.unpack("<Q", buf[:8])
    header = json.loads(buf[8:8 + n])
    header.pop("__metadata__", None)
    out = {}
    for name, info in header.items():
        assert info["dtype"] == "F32", f"{name}: {info['dtype']}: only F32 folders"
        b, e = info["data_offsets"]
        out[name] = (tuple(info["shape"]), buf[8 + n + b:8 + n + e])
    return out


def from_f32(raw, dtype):
    """fp32 bytes in `dtype`, rounded to nearest even as torch's .to() does."""
    if dtype == "f32":
        return raw
    count = len(raw) // 4
    if dtype == "bf16":
        out = bytearray()
        for (u,) in struct.iter_unpack("<I", raw):
            out += struct.pack("<H", ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF)
        return bytes(out)
    values = struct.unpack(f"<{count}f", raw)
    return struct.pack(f"<{count}{STORAGE[dtype][1]}", *values)


def transposed(raw, itemsize, rows, cols):
    """Row-major bytes of the transpose of a rows x cols matrix."""
    elems = memoryview(raw).cast({2: "H", 4: "I", 8: "Q"}[itemsize])
    return b"".join(elems[c::cols].tobytes() for c in range(cols))


def write_safetensors(path, tensors, dtype):
    st = {"f32": "F32", "f16": "F16", "bf16": "BF16"}[dtype]
    header, data = {}, b""
    for name, (shape, raw) in tensors.items():
        header[name] = {"dtype": st, "shape": list(shape),
                        "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    text = json.dumps(header).encode()
    text += b" " * ((-(8 + len(text))) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("model_dir")
    p.add_argument("out_dir")
    p.add_argument("--dtype", choices=("f32", "f16", "bf16"), default="f32",
                   help="the weights' dtype in the checkpoint")
    p.add_argument("--expected", help="also write the model's tensors as the checkpoint "
                   "holds them (F16/BF16 too) to this safetensors file")
    p.add_argument("--drop", action="append", default=[], help="leave out this tensor")
    p.add_argument("--drop-key", action="append", default=[],
                   help="leave out this key of the checkpoint dict")
    p.add_argument("--model-arg", action="append", default=[], metavar="KEY=JSON",
                   help="override a model_args entry")
    p.add_argument("--f64", action="append", default=[], metavar="NAME",
                   help="store this tensor as float64 (a DoubleStorage)")
    p.add_argument("--untie", action="store_true", help="give lm_head other values than wte")
    p.add_argument("--meta-chars", type=int, help="write only this many chars to meta.pkl")
    p.add_argument("--no-meta", action="store_true", help="write no meta.pkl (a GPT-2 BPE model)")
    p.add_argument("--vocab-size", type=int, help="pad wte with zero rows to this many tokens")
    p.add_argument("--evil-data", metavar="CMD", help="data.pkl runs CMD when unpickled")
    p.add_argument("--evil-meta", metavar="CMD", help="meta.pkl runs CMD when unpickled")
    a = p.parse_args()

    with open(os.path.join(a.model_dir, "config.json")) as f:
        config = json.load(f)
    weights = read_safetensors(os.path.join(a.model_dir, "model.safetensors"))
    C, T, L = config["n_embd"], config["block_size"], config["n_layer"]
    V = config["vocab_size"]
    if a.vocab_size is not None:
        # nanoGPT pads GPT-2's 50257 to 50304: rows no token ever selects.
        shape, raw = weights["transformer.wte.weight"]
        weights["transformer.wte.weight"] = ((a.vocab_size, C),
                                             raw + bytes(4 * C * (a.vocab_size - V)))
        V = a.vocab_size
    weights = {n: (shape, from_f32(raw, a.dtype)) for n, (shape, raw) in weights.items()}
    os.makedirs(a.out_dir, exist_ok=True)
    if a.expected:
        write_safetensors(a.expected, weights, a.dtype)

    if a.f64 and a.dtype != "f32":
        p.error("--f64 needs --dtype f32")

    def storage_of(name, raw):
        if name in a.f64:
            values = struct.unpack(f"<{len(raw) // 4}f", raw)
            return Storage("f64", struct.pack(f"<{len(values)}d", *values))
        return Storage(a.dtype, raw)

    itemsize = 4 if a.dtype == "f32" else 2
    sd = collections.OrderedDict()
    for name, (shape, raw) in weights.items():
        bias = name[:-len("weight")] + "bias"
        if name.endswith("ln_1.bias"):
            continue  # stored with ln_1.weight below
        if name.endswith("ln_1.weight") and bias in weights:
            # One storage, two views: the weight at offset 0, the bias after it.
            both = storage_of(name, raw + weights[bias][1])
            sd[name] = Tensor(both, 0, shape)
            sd[bias] = Tensor(both, C, weights[bias][0])
        elif name == "transformer.h.0.mlp.c_proj.weight":
            # The storage holds the transpose; the tensor is its (1, C)-strided view.
            rows, cols = shape
            sd[name] = Tensor(storage_of(name, transposed(raw, itemsize, rows, cols)), 0, shape,
                              stride=(1, rows))
        else:
            sd[name] = Tensor(storage_of(name, raw), 0, shape)
    # The causal-mask buffers nanoGPT registers without flash attention.
    one = from_f32(struct.pack("<f", 1.0), a.dtype)
    mask = b"".join(one * (r + 1) + bytes(len(one)) * (T - r - 1) for r in range(T))
    for i in range(L):
        sd[f"transformer.h.{i}.attn.bias"] = Tensor(Storage(a.dtype, mask), 0, (1, 1, T, T))
    wte = sd["transformer.wte.weight"]
    sd["lm_head.weight"] = Tensor(wte.storage, 0, wte.shape)  # tied: the same storage
    if a.untie:
        raw = bytearray(wte.storage.data)
        raw[0:itemsize] = from_f32(struct.pack("<f", 0.125), a.dtype)
        sd["lm_head.weight"] = Tensor(Storage(a.dtype, bytes(raw)), 0, wte.shape)
    for name in a.drop:
        del sd[name]
    state = collections.OrderedDict(("_orig_mod." + k, v) for k, v in sd.items())
    # A real state_dict carries module versions, pickled as an attribute.
    state._metadata = collections.OrderedDict(
        [("", {"version": 1}), ("transformer", {"version": 1})] +
        [(f"transformer.h.{i}", {"version": 1}) for i in range(L)])

    # AdamW's state for two parameters, as optimizer.state_dict() holds it.
    def zeros(shape):
        n = 1
        for d in shape:
            n *= d
        return Tensor(Storage("f32", bytes(4 * n)), 0, shape)

    optimizer = {
        "state": {i: {"step": zeros(()), "exp_avg": zeros((C,)), "exp_avg_sq": zeros((C,))}
                  for i in range(2)},
        "param_groups": [{"lr": 1e-3, "betas": (0.9, 0.99), "eps": 1e-08, "weight_decay": 0.1,
                          "amsgrad": False, "foreach": None, "maximize": False,
                          "capturable": False, "differentiable": False, "fused": None,
                          "params": [0, 1]}],
    }
    model_args = {"n_layer": L, "n_head": config["n_head"], "n_embd": C, "block_size": T,
                  "bias": config["bias"], "vocab_size": V, "dropout": 0.2}
    for item in a.model_arg:
        key, value = item.split("=", 1)
        model_args[key] = json.loads(value)
    ckpt = {
        "model": state, "optimizer": optimizer, "model_args": model_args, "iter_num": 5000,
        "best_val_loss": zeros(()),
        "config": {"dataset": "fortunes_char", "compile": True, "batch_size": 64,
                   "learning_rate": 1e-3, "dtype": "bfloat16", "out_dir": "out-fortunes-char"},
    }
    if a.evil_data:
        ckpt["config"]["wandb_run_name"] = Evil(a.evil_data)
    for key in a.drop_key:
        del ckpt[key]
    write_torch_zip(os.path.join(a.out_dir, "ckpt.pt"), ckpt)

    if not a.no_meta:
        with open(os.path.join(a.model_dir, "vocab.json")) as f:
            chars = json.load(f)["chars"]
        kept = chars[:a.meta_chars] if a.meta_chars is not None else chars
        meta = {"vocab_size": len(kept), "itos": dict(enumerate(kept)),
                "stoi": {c: i for i, c in enumerate(kept)}}
        if a.evil_meta:
            meta["note"] = Evil(a.evil_meta)
        with open(os.path.join(a.out_dir, "meta.pkl"), "wb") as f:
            pickle.dump(meta, f)


if __name__ == "__main__":
    main()
