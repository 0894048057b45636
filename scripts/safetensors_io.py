#!/usr/bin/python3
"""Minimal safetensors reader/writer (no dependency on the `safetensors` package).

File layout written by `save_file`:
  * 8 bytes: little-endian u64 N = length of the JSON header in bytes
  * N bytes: UTF-8 JSON header, padded with trailing spaces so that 8 + N is a
    multiple of 64 (hence of 8, as the format requires).  Keys are tensor
    names in file order (the order of the dict passed in), each
    {"dtype": "F32", "shape": [...], "data_offsets": [begin, end]}, plus an
    optional "__metadata__" object of string -> string.  Offsets are relative
    to the start of the data region (byte 8 + N); `end` is exclusive.
  * data region: raw little-endian tensor bytes in row-major (C) order.  Every
    tensor's `begin` is a multiple of 64, so its absolute file offset
    8 + N + begin is too; the gaps between tensors are zero bytes.  The
    region ends exactly at the last tensor's `end`.

`load_file` accepts any valid safetensors file (any alignment) with dtypes
F32, F64, F16, BF16 (BF16 is widened to float32), I64, I32, U8.
"""
import json
import struct

import numpy as np

ALIGN = 64

_NP_TO_ST = {
    np.dtype("<f4"): "F32",
    np.dtype("<f8"): "F64",
    np.dtype("<f2"): "F16",
    np.dtype("<i8"): "I64",
    np.dtype("<i4"): "I32",
    np.dtype("u1"): "U8",
}
_ST_TO_NP = {v: k for k, v in _NP_TO_ST.items()}


def _to_numpy(t):
    """Accept numpy arrays or torch tensors (imported lazily)."""
    if isinstance(t, np.ndarray):
        return t
    try:
        import torch
        if isinstance(t, torch.Tensor):
            return t.detach().cpu().contiguous().numpy()
    except ImportError:
        pass
    return np.asarray(t)


def save_file(tensors, path, metadata=None):
    """Write `tensors` (ordered mapping name -> array/tensor) to `path`."""
    header = {}
    blobs = []
    offset = 0
    for name, t in tensors.items():
        a = _to_numpy(t)
        dt = a.dtype.newbyteorder("<") if a.dtype.byteorder == ">" else a.dtype
        if dt not in _NP_TO_ST:
            raise ValueError(f"unsupported dtype {a.dtype} for {name}")
        a = np.ascontiguousarray(a, dtype=dt)
        pad = (-offset) % ALIGN
        if pad:
            blobs.append(b"\0" * pad)
            offset += pad
        raw = a.tobytes(order="C")
        header[name] = {
            "dtype": _NP_TO_ST[dt],
            "shape": [int(s) for s in a.shape],
            "data_offsets": [offset, offset + len(raw)],
        }
        blobs.append(raw)
        offset += len(raw)
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    hbytes = json.dumps(header, separators=(",", ":")).encode("utf-8")
    # Pad to 64 (a multiple of 8, as the format requires) so that, in a
    # page-aligned mmap, every tensor starts on a 64-byte boundary.
    hbytes += b" " * ((-(8 + len(hbytes))) % ALIGN)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hbytes)))
        f.write(hbytes)
        for b in blobs:
            f.write(b)


def read_header(path):
    """Return (file bytes, header length N, header dict with __metadata__ kept)."""
    with open(path, "rb") as f:
        buf = f.read()
    (n,) = struct.unpack("<Q", buf[:8])
    return buf, n, json.loads(buf[8:8 + n].decode("utf-8"))


def load_file(path):
    """Return (dict name -> numpy array, metadata dict) preserving file order."""
    buf, n, header = read_header(path)
    meta = header.pop("__metadata__", {}) or {}
    base = 8 + n
    out = {}
    for name, info in header.items():
        b, e = info["data_offsets"]
        dtype = info["dtype"]
        shape = tuple(info["shape"])
        raw = buf[base + b: base + e]
        if dtype == "BF16":
            u16 = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
            a = u16.view(np.float32)
        else:
            a = np.frombuffer(raw, dtype=_ST_TO_NP[dtype])
        expect = int(np.prod(shape)) if shape else 1
        if a.size != expect:
            raise ValueError(f"{name}: {a.size} elements, shape {shape}")
        out[name] = a.reshape(shape).copy()
    return out, meta
