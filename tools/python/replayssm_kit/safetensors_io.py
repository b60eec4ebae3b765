"""Reading and writing safetensors containers with NumPy, BF16 included, through the `safetensors` package and
`ml_dtypes` (NumPy's missing bfloat16).

Files and in-memory bytes (the target protocol's frames, protocol.py) share one parser and one serializer:
read_safetensors / write_safetensors are parse_safetensors / serialize_safetensors plus file I/O. The container
is described in docs/fixture-format.md, section 1. The `safetensors` package decodes the bytes
(safetensors.deserialize); the kit adds what it lacks:

* strict checks of the header, run before the library sees the bytes, whose errors name the tensor and the
  field: the library accepts tensor entries with unknown keys and dtypes neither this project nor the C++
  reader knows (F8_*, C64, ...), and its own messages do not name the tensor ("invalid shape, data type, or
  offset for tensor");
* the `__metadata__` map of in-memory bytes: safetensors.deserialize returns tensors only;
* a deterministic writer (serialize_safetensors says why the library's is not used).

Reading keeps each tensor's stored dtype name next to its values; BF16 values are widened exactly to float32
(ml_dtypes).
"""

from __future__ import annotations

import json
import os
import struct
import tempfile

import ml_dtypes
import numpy as np
import safetensors

# safetensors dtype name -> NumPy dtype of the values as stored (the project's dtypes, docs/fixture-format.md)
_STORED = {
    "BOOL": np.dtype(bool),
    "U8": np.dtype("u1"),
    "I8": np.dtype("i1"),
    "I16": np.dtype("<i2"),
    "U16": np.dtype("<u2"),
    "F16": np.dtype("<f2"),
    "BF16": np.dtype(ml_dtypes.bfloat16),
    "I32": np.dtype("<i4"),
    "U32": np.dtype("<u4"),
    "F32": np.dtype("<f4"),
    "I64": np.dtype("<i8"),
    "U64": np.dtype("<u8"),
    "F64": np.dtype("<f8"),
}
FLOAT_DTYPES = ("F16", "BF16", "F32", "F64")
MAX_HEADER = 100_000_000


class FormatError(ValueError):
    """A file that is not a valid safetensors container."""


def bf16_bits_to_f32(bits: np.ndarray) -> np.ndarray:
    """Exact widening of raw bfloat16 bit patterns (uint16) to float32."""
    return np.array(bits, dtype=np.uint16, order="C").view(ml_dtypes.bfloat16).astype(np.float32)


def f32_to_bf16_bits(x: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bit patterns, rounding to nearest even; a NaN stays a quiet NaN with its sign and top
    payload bits (the C++ core's rule; ml_dtypes would write one canonical NaN)."""
    x = np.asarray(x, dtype=np.float32)
    rounded = np.ascontiguousarray(x.astype(ml_dtypes.bfloat16)).view(np.uint16).reshape(-1).copy()
    nan = np.isnan(x.reshape(-1))
    if nan.any():
        u = np.ascontiguousarray(x).reshape(-1).view(np.uint32)
        rounded[nan] = ((u[nan] >> 16) | 0x40).astype(np.uint16)
    return rounded.reshape(x.shape)


def read_safetensors(path: str):
    """Returns (tensors, dtypes, metadata): name -> ndarray (BF16 widened to float32), name -> dtype name,
    and the string map of __metadata__ (empty when absent)."""
    with open(path, "rb") as f:
        data = f.read()
    return parse_safetensors(data, path)


def _check_header(data, origin: str):
    """The header's tensor entries and metadata after the kit's strict checks (FormatError naming the field)."""
    if len(data) < 8:
        raise FormatError(f"{origin}: shorter than 8 bytes")
    (n,) = struct.unpack("<Q", bytes(data[:8]))
    if n > MAX_HEADER or 8 + n > len(data):
        raise FormatError(f"{origin}: header length {n} runs past the end ({len(data)} bytes)")
    try:
        header = json.loads(bytes(data[8 : 8 + n]).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise FormatError(f"{origin}: header is not JSON: {e}") from None
    if not isinstance(header, dict):
        raise FormatError(f"{origin}: header is not a JSON object")
    body = len(data) - 8 - n
    metadata = header.pop("__metadata__", {}) or {}
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise FormatError(f"{origin}: __metadata__ must map strings to strings")
    spans = []
    for name, entry in header.items():
        if not isinstance(entry, dict) or set(entry) != {"dtype", "shape", "data_offsets"}:
            raise FormatError(f"{origin}: tensor '{name}' entry must have exactly dtype, shape, data_offsets")
        dt = entry["dtype"]
        if dt not in _STORED:
            raise FormatError(f"{origin}: tensor '{name}' has unsupported dtype {dt}")
        try:
            shape = tuple(int(d) for d in entry["shape"])
            begin, end = (int(x) for x in entry["data_offsets"])
        except (TypeError, ValueError):
            raise FormatError(f"{origin}: tensor '{name}' shape and data_offsets must be lists of integers") from None
        if any(d < 0 for d in shape):
            raise FormatError(f"{origin}: tensor '{name}' has a negative dimension in {list(shape)}")
        count = int(np.prod(shape, dtype=np.int64)) if shape else 1
        if end - begin != count * _STORED[dt].itemsize or begin < 0 or end > body:
            raise FormatError(f"{origin}: tensor '{name}' data_offsets do not match its shape")
        spans.append((begin, end, name))
    pos = 0
    for begin, end, name in sorted(spans):
        if begin != pos:
            raise FormatError(f"{origin}: tensor '{name}' leaves a gap or overlaps (offset {begin}, expected {pos})")
        pos = end
    if pos != body:
        raise FormatError(f"{origin}: {body - pos} trailing bytes after the last tensor")
    return metadata


def parse_safetensors(data, origin: str = "safetensors"):
    """The container in `data` (bytes-like) as read_safetensors returns it; errors start with `origin` (a file
    path, or the protocol's frame name)."""
    data = bytes(data)
    metadata = _check_header(data, origin)
    try:
        decoded = safetensors.deserialize(data)
    except Exception as e:  # safetensors.SafetensorError; the checks above make this a library disagreement
        raise FormatError(f"{origin}: {e}") from None
    tensors, dtypes = {}, {}
    for name, view in decoded:
        dt = view["dtype"]
        arr = np.frombuffer(view["data"], dtype=_STORED[dt]).reshape(view["shape"])
        tensors[name] = arr.astype(np.float32) if dt == "BF16" else arr.copy()
        dtypes[name] = dt
    return tensors, dtypes, metadata


def _as_stored(name: str, value, dtype: str) -> np.ndarray:
    arr = np.asarray(value)
    if dtype == "BF16":
        bits = arr if arr.dtype == np.uint16 else f32_to_bf16_bits(arr.astype(np.float32))  # uint16: raw bits
        return np.array(bits, dtype="<u2", order="C")
    return np.array(arr, dtype=_STORED[dtype], order="C")  # keeps 0-d scalars 0-d (np.ascontiguousarray would not)


def serialize_safetensors(tensors: dict, metadata: dict | None = None) -> bytes:
    """The container bytes of tensors (name -> (array, dtype name)) and metadata. A BF16 array may be float
    (rounded to nearest even) or uint16 raw bit patterns.

    Written here, not by safetensors.numpy.save: the library emits __metadata__ in hash-map order, which changes
    from call to call, so the same fixture would get different bytes (and SHA-256 in MANIFEST.json) each time.
    This writer is deterministic and lays the file out as the C++ writer does (metadata first in key order,
    header padded with spaces to a multiple of 8 bytes, tensors by descending element size, then name); the
    tests read its output back through the library."""
    prepared = {}
    for name, (value, dtype) in tensors.items():
        if dtype not in _STORED:
            raise ValueError(f"tensor '{name}': unsupported dtype {dtype}")
        prepared[name] = (_as_stored(name, value, dtype), dtype)
    order = sorted(prepared, key=lambda k: (-_STORED[prepared[k][1]].itemsize, k))
    header = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    offset = 0
    for name in order:
        arr, dtype = prepared[name]
        header[name] = {"dtype": dtype, "shape": list(arr.shape), "data_offsets": [offset, offset + arr.nbytes]}
        offset += arr.nbytes
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    text += b" " * ((8 - len(text) % 8) % 8)
    return b"".join([struct.pack("<Q", len(text)), text] + [prepared[name][0].tobytes() for name in order])


def write_safetensors(path: str, tensors: dict, metadata: dict | None = None) -> None:
    """Writes serialize_safetensors(tensors, metadata) to path atomically (a temporary file, then a rename)."""
    data = serialize_safetensors(tensors, metadata)
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=directory, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
