#!/usr/bin/python3
"""What kvtier's checkpoint converters share (scripts/convert_nanogpt.py,
scripts/convert_nanochat.py): reading what torch.save writes without
PyTorch, and writing a model folder all at once.

Reading: torch.save writes a zip archive of <name>/data.pkl (a protocol-2
pickle whose tensors refer, by persistent id, to raw little-endian storages
<name>/data/<key>) plus small records (version, byteorder). data.pkl is
unpickled by a restricted Unpickler that builds only a handful of known,
harmless objects (dicts, OrderedDicts and tensor descriptions); a global
from torch, numpy or collections it does not know becomes an inert
placeholder (fine in an optimizer's state, refused inside a model by the
converter), and any other global (os.system, builtins.eval, ...) is refused.
Nothing in the file is ever executed. A tensor is read only when a converter
writes it, one at a time.

Writing: write_safetensors (F32, every tensor 64-byte aligned, as kvtierd
maps them) and write_files, which writes every file under a temporary name
and then renames them all, so a failure leaves no half-written folder that
looks complete.

Errors: InputError (bad input: one line, exit status 2) and OutputError
(the folder could not be written: exit status 1).
"""
import argparse
import collections
import itertools
import json
import math
import os
import pickle
import struct
import sys
import zipfile
import zlib

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
        raise InputError(f"data.pkl refers to {qualified}, which no checkpoint of a "
                         "model holds; refused (nothing in the file was run)")

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
# writing the folder

def write_safetensors(path, tensors, source):
    """F32 safetensors, each tensor 64-byte aligned, one tensor in memory at a time."""
    header, offset = {}, 0
    for name, t in tensors.items():
        offset += (-offset) % ALIGN
        size = 4 * math.prod(t.shape)
        header[name] = {"dtype": "F32", "shape": list(t.shape),
                        "data_offsets": [offset, offset + size]}
        offset += size
    header["__metadata__"] = {"format": "pt", "source": source}
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


def write_files(out, files, force):
    """Writes `files` ({name: writer(path)}) into the folder `out`, created if
    need be and refused when it holds anything unless `force`."""
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



def write_text(path, text):
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


# ----------------------------------------------------------------------------
# the command line both converters share

class Parser(argparse.ArgumentParser):
    def error(self, message):  # usage errors: one line, status 2 like bad input
        raise InputError(message)


def run(program, parser, convert, argv=None):
    """Parses argv and converts, turning every failure into one line on
    stderr and the exit status the converters promise: 2 bad input or usage,
    1 the output could not be written (or memory ran out). <PROGRAM>_TRACEBACK=1
    in the environment shows an unforeseen error's traceback instead."""
    try:
        convert(parser.parse_args(argv))
    except InputError as e:
        print(f"{program}: error: {e}", file=sys.stderr)
        return 2
    except OutputError as e:
        print(f"{program}: error: {e}", file=sys.stderr)
        return 1
    except MemoryError:
        print(f"{program}: error: out of memory", file=sys.stderr)
        return 1
    except Exception as e:  # noqa: BLE001 -- one line, as promised, even for the unforeseen
        variable = program.upper() + "_TRACEBACK"
        if os.environ.get(variable):
            raise
        print(f"{program}: error: unexpected {one_line(e)} (set {variable}=1 for the "
              "traceback)", file=sys.stderr)
        return 2
    return 0

