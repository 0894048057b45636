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

Reading ckpt.pt: torch.save writes a zip archive of <name>/data.pkl (a
protocol-2 pickle of the checkpoint whose tensors refer, by persistent id, to
raw little-endian storages <name>/data/<key>) plus small records (version,
byteorder). data.pkl is unpickled here by a restricted Unpickler that builds
only a handful of known, harmless objects (dicts, OrderedDicts and tensor
descriptions); a global from torch, numpy or collections it does not know
becomes an inert placeholder (fine in the optimizer state, refused inside the
model), and any other global (os.system, builtins.eval, ...) is refused. Nothing
in the file is ever executed, which torch.load(weights_only=False) cannot
promise (and Debian's torch 1.13 with weights_only=True refuses the floats in
every nanoGPT checkpoint's config). meta.pkl gets an unpickler that allows no
globals at all. So PyTorch is not needed, nor used when installed.

Exit status: 0 converted; 2 bad input or usage (one line on stderr, never a
traceback); 1 the output could not be written.
"""
import argparse
import collections
import itertools
import json
import math
import os
import pickle
import shutil
import struct
import sys
import zipfile
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_GPT2_BPE = os.path.join(os.path.dirname(HERE), "models", "gpt2-bpe")
GPT2_VOCAB = 50257
# Tensors start on 64-byte boundaries in the file (as scripts/safetensors_io.py
# and ModelWeights::save write them): kvtierd maps F32 tensors in place.
ALIGN = 64
# Elements per struct call when widening fp16: bounds the Python float list.
CHUNK = 1 << 20


class InputError(Exception):
    """Bad input: reported as one line, exit status 2."""


class OutputError(Exception):
    """The output folder could not be written: one line, exit status 1."""


# ----------------------------------------------------------------------------
# tensors as the checkpoint describes them

class StorageType:
    """What a torch.<Name>Storage global stands for: element size and the
    safetensors dtype we can convert (None: refused if a weight uses it)."""

    def __init__(self, name, itemsize, dtype):
        self.name, self.itemsize, self.dtype = name, itemsize, dtype


# Every typed storage torch.save names, so a refused dtype gets a clear message
# rather than "unknown global".
STORAGE_TYPES = {
    name: StorageType("torch." + name, size, dtype)
    for name, size, dtype in [
        ("FloatStorage", 4, "F32"), ("HalfStorage", 2, "F16"),
        ("BFloat16Storage", 2, "BF16"), ("DoubleStorage", 8, None),
        ("LongStorage", 8, None), ("IntStorage", 4, None),
        ("ShortStorage", 2, None), ("CharStorage", 1, None),
        ("ByteStorage", 1, None), ("BoolStorage", 1, None),
        ("ComplexFloatStorage", 8, None), ("ComplexDoubleStorage", 16, None),
        ("QInt8Storage", 1, None), ("QUInt8Storage", 1, None),
        ("QInt32Storage", 4, None), ("Float8_e4m3fnStorage", 1, None),
        ("Float8_e5m2Storage", 1, None),
    ]
}


class Storage:
    """A storage record of the zip, read only when a weight needs it (the
    optimizer's moments, twice the model's size, are never read) and not
    kept: one tensor at a time is in memory."""

    def __init__(self, archive, kind, key, numel):
        self.archive, self.kind, self.key, self.numel = archive, kind, key, numel

    def check_size(self):
        """From the zip's directory, so a short record is refused before any
        file is written."""
        have, want = self.archive.record_size(self.key), self.numel * self.kind.itemsize
        if have != want:
            raise InputError(f"{self.archive.path}: storage data/{self.key} holds {have} "
                             f"bytes; its {self.numel} {self.kind.name} elements need {want}")

    def data(self):
        self.check_size()
        return self.archive.storage_bytes(self.key)


class Tensor:
    """A tensor as torch._utils._rebuild_tensor_v2 describes it: a view
    (offset, shape, stride, in elements) of a storage."""

    def __init__(self, storage, offset, shape, stride):
        self.storage, self.offset = storage, offset
        self.shape, self.stride = tuple(shape), tuple(stride)

    @property
    def dtype(self):
        kind = self.storage.kind
        return kind.dtype or kind.name

    def same_view(self, other):
        return (isinstance(other, Tensor) and self.storage is other.storage
                and (self.offset, self.shape, self.stride)
                == (other.offset, other.shape, other.stride))

    def check_view(self, name):
        """Refuses a view that reaches outside its storage, before any read."""
        self.storage.check_size()
        if len(self.stride) != len(self.shape) or any(
                not isinstance(v, int) or v < 0
                for v in (self.offset, *self.shape, *self.stride)):
            raise InputError(f"tensor '{name}': malformed view (offset {self.offset}, "
                             f"shape {list(self.shape)}, stride {list(self.stride)})")
        if math.prod(self.shape) == 0:
            return
        last = self.offset + sum((n - 1) * s for n, s in zip(self.shape, self.stride))
        if last >= self.storage.numel:
            raise InputError(f"tensor '{name}': its view reaches element {last} of a "
                             f"storage of {self.storage.numel}")

    def raw_bytes(self):
        """The elements in row-major order, in the storage's own dtype."""
        size = self.storage.kind.itemsize
        data = self.storage.data()
        numel = math.prod(self.shape)
        if numel == 0:
            return b""
        if self._contiguous():
            return data[self.offset * size:(self.offset + numel) * size]
        # A strided view (e.g. a transpose): gather each innermost row with
        # a stepped memoryview slice, which copies in C.
        fmt = {1: "B", 2: "H", 4: "I", 8: "Q"}[size]
        elems = memoryview(data).cast(fmt)
        inner, step = self.shape[-1], self.stride[-1]
        out = bytearray()
        for index in itertools.product(*(range(n) for n in self.shape[:-1])):
            base = self.offset + sum(i * s for i, s in zip(index, self.stride))
            if step == 0:  # a broadcast (expanded) dimension
                out += elems[base:base + 1].tobytes() * inner
            else:
                out += elems[base:base + (inner - 1) * step + 1:step].tobytes()
        return bytes(out)

    def _contiguous(self):
        expected = 1
        for n, s in zip(reversed(self.shape), reversed(self.stride)):
            if n != 1 and s != expected:
                return False
            expected *= n
        return True

    def f32_bytes(self):
        return widen_to_f32(self.raw_bytes(), self.storage.kind.dtype)


def widen_to_f32(raw, dtype):
    """Little-endian fp32 bytes of little-endian F32/F16/BF16 `raw`; exact
    (every fp16 and bf16 value is an fp32 value), but for the payload bits of
    an fp16 NaN, which go through a Python float."""
    if dtype == "F32":
        return raw
    if dtype == "BF16":
        # bf16 is the top half of an fp32: put two zero bytes below each.
        out = bytearray(2 * len(raw))
        out[2::4] = raw[0::2]
        out[3::4] = raw[1::2]
        return bytes(out)
    if dtype == "F16":
        out = bytearray()
        count = len(raw) // 2
        for start in range(0, count, CHUNK):
            n = min(CHUNK, count - start)
            values = struct.unpack_from(f"<{n}e", raw, 2 * start)
            out += struct.pack(f"<{n}f", *values)
        return bytes(out)
    raise AssertionError(dtype)


# ----------------------------------------------------------------------------
# the restricted unpicklers

class Placeholder:
    """Stands for an object of a torch/numpy/collections class this reader does
    not know (an optimizer's extras, a numpy scalar in the config): accepts
    whatever the pickle builds it with and runs nothing."""

    global_name = "?"

    def __init__(self, *args, **kwargs):
        pass

    def __setstate__(self, state):
        pass

    def __setitem__(self, key, value):
        pass

    def append(self, value):
        pass

    def extend(self, values):
        pass


def _rebuild_tensor(storage, storage_offset, size, stride, *_ignored):
    # requires_grad, backward hooks and metadata do not change the values.
    if not isinstance(storage, Storage):
        return Placeholder()
    return Tensor(storage, storage_offset, size, stride)


def _rebuild_parameter(data, *_ignored):
    return data  # an nn.Parameter saved as such: its tensor


def _codecs_encode(text, encoding):
    # How a protocol-2 pickle spells a bytes object.
    if encoding != "latin1" or not isinstance(text, str):
        raise InputError(f"data.pkl calls _codecs.encode with {encoding!r}")
    return text.encode("latin1")


KNOWN_GLOBALS = {
    ("collections", "OrderedDict"): collections.OrderedDict,
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor,
    ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
    ("torch._utils", "_rebuild_parameter_with_state"): _rebuild_parameter,
    ("torch", "Size"): tuple,
    ("_codecs", "encode"): _codecs_encode,
}
# Modules whose unknown globals become placeholders rather than a refusal.
DATA_MODULES = ("torch", "numpy", "collections")


class CheckpointUnpickler(pickle.Unpickler):
    def __init__(self, file, archive):
        super().__init__(file)
        self.archive = archive
        self.placeholders = []  # "module.name" of each unknown global seen

    def find_class(self, module, name):
        if (module, name) in KNOWN_GLOBALS:
            return KNOWN_GLOBALS[(module, name)]
        if module == "torch" and name in STORAGE_TYPES:
            return STORAGE_TYPES[name]
        qualified = f"{module}.{name}"
        if module.split(".")[0] in DATA_MODULES:
            self.placeholders.append(qualified)
            return type(name, (Placeholder,), {"global_name": qualified})
        raise InputError(f"data.pkl refers to {qualified}, which no nanoGPT checkpoint "
                         "holds; refused (nothing in the file was run)")

    def persistent_load(self, pid):
        # torch.save's persistent id: ('storage', <Name>Storage, key, location, numel).
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage"
                and isinstance(pid[2], str) and isinstance(pid[4], int) and pid[4] >= 0):
            raise InputError(f"data.pkl has an unknown persistent id {pid!r:.80}")
        kind = pid[1]
        if not isinstance(kind, StorageType):
            name = getattr(kind, "global_name", type(kind).__name__)
            kind = StorageType(name, 1, None)
        return self.archive.storage(kind, pid[2], pid[4])


class MetaUnpickler(pickle.Unpickler):
    """meta.pkl is a plain dict of ints and strings: no global is needed."""

    def find_class(self, module, name):
        raise InputError(f"refers to {module}.{name}; a nanoGPT meta.pkl is a "
                         "plain dict (vocab_size, itos, stoi); refused (nothing was run)")


def one_line(error):
    return " ".join(f"{type(error).__name__}: {error}".split())


# ----------------------------------------------------------------------------
# reading the checkpoint

class TorchZip:
    """The zip archive torch.save (>= 1.6) writes."""

    def __init__(self, path):
        try:
            self.zip = zipfile.ZipFile(path)
        except (zipfile.BadZipFile, ValueError, EOFError):
            raise InputError(f"{path}: not a zip archive, so not a torch.save checkpoint "
                             "(torch >= 1.6 writes zips; re-save an older file with it)"
                             ) from None
        names = self.zip.namelist()
        pkls = [n for n in names if n.count("/") == 1 and n.endswith("/data.pkl")]
        if len(pkls) != 1:
            raise InputError(f"{path}: a zip archive without exactly one <name>/data.pkl, "
                             "so not a torch.save checkpoint")
        # torch names the folder after the file ("ckpt/") or "archive/".
        self.prefix = pkls[0][:-len("data.pkl")]
        self.names = set(names)
        self.path = path
        self.storages = {}
        order = self._record("byteorder")
        if order is not None and order.strip() != b"little":
            raise InputError(f"{path}: byteorder {order.decode(errors='replace')!r}; only "
                             "little-endian checkpoints are supported")

    def _record(self, name):
        full = self.prefix + name
        return self.zip.read(full) if full in self.names else None

    def storage(self, kind, key, numel):
        # One Storage per key: tensors that share it (tied weights) share it here.
        if key not in self.storages:
            self.storages[key] = Storage(self, kind, key, numel)
        return self.storages[key]

    def record_size(self, key):
        name = f"{self.prefix}data/{key}"
        if name not in self.names:
            raise InputError(f"{self.path}: storage record {name} is missing")
        return self.zip.getinfo(name).file_size

    def storage_bytes(self, key):
        try:
            return self._record("data/" + key)
        except (zipfile.BadZipFile, OSError, EOFError, zlib.error) as e:
            raise InputError(f"{self.path}: cannot read {self.prefix}data/{key}: "
                             f"{one_line(e)}") from None

    def load(self):
        try:
            unpickler = CheckpointUnpickler(self.zip.open(self.prefix + "data.pkl"), self)
            obj = unpickler.load()
        except InputError as e:
            raise InputError(f"{self.path}: {e}") from None
        except Exception as e:  # a malformed pickle raises almost anything
            raise InputError(f"{self.path}: cannot unpickle data.pkl: {one_line(e)}") from None
        return obj, sorted(set(unpickler.placeholders))


def load_checkpoint(path):
    try:
        return TorchZip(path).load()
    except OSError as e:
        raise InputError(f"{path}: {e.strerror or one_line(e)}") from None


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

def write_safetensors(path, tensors):
    """F32 safetensors, each tensor 64-byte aligned, one tensor in memory at a time."""
    header, offset = {}, 0
    for name, t in tensors.items():
        offset += (-offset) % ALIGN
        size = 4 * math.prod(t.shape)
        header[name] = {"dtype": "F32", "shape": list(t.shape),
                        "data_offsets": [offset, offset + size]}
        offset += size
    header["__metadata__"] = {"format": "pt", "source": "scripts/convert_nanogpt.py"}
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((-(8 + len(text))) % ALIGN)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        written = 0
        for name, t in tensors.items():
            begin, end = header[name]["data_offsets"]
            f.write(b"\0" * (begin - written))
            data = t.f32_bytes()
            if len(data) != end - begin:  # a reader bug, never the input's
                raise AssertionError(f"{name}: {len(data)} bytes, expected {end - begin}")
            f.write(data)
            written = end


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
        files["vocab.json"] = lambda p: _write_text(
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
    files["config.json"] = lambda p: _write_text(p, json.dumps(config, indent=2) + "\n")
    files["model.safetensors"] = lambda p: write_safetensors(p, tensors)

    created = not os.path.exists(out)
    temps = []
    try:
        os.makedirs(out, exist_ok=True)
        if not force and os.listdir(out):
            raise InputError(f"{out}: not empty (--force writes into it anyway)")
        for name, writer in files.items():
            temp = os.path.join(out, f".{name}.partial")
            temps.append((temp, os.path.join(out, name)))
            writer(temp)
        for temp, final in temps:
            os.replace(temp, final)
        temps = []
    except OSError as e:
        raise OutputError(f"{e.filename or out}: {e.strerror or one_line(e)}") from None
    finally:
        # A failure (a storage that cannot be read, a full disk) leaves
        # nothing behind: no .partial files, no folder that was not there.
        for temp, _ in temps:
            if os.path.exists(temp):
                os.remove(temp)
        if temps and created and not os.listdir(out):
            os.rmdir(out)


def _write_text(path, text):
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


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


class Parser(argparse.ArgumentParser):
    def error(self, message):  # usage errors: one line, status 2 like bad input
        raise InputError(message)


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
    try:
        convert(p.parse_args(argv))
    except InputError as e:
        print(f"convert_nanogpt: error: {e}", file=sys.stderr)
        return 2
    except OutputError as e:
        print(f"convert_nanogpt: error: {e}", file=sys.stderr)
        return 1
    except MemoryError:
        print("convert_nanogpt: error: out of memory", file=sys.stderr)
        return 1
    except Exception as e:  # noqa: BLE001 -- one line, as promised, even for the unforeseen
        if os.environ.get("CONVERT_NANOGPT_TRACEBACK"):
            raise
        print(f"convert_nanogpt: error: unexpected {one_line(e)} (set "
              "CONVERT_NANOGPT_TRACEBACK=1 for the traceback)", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
