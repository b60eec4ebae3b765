"""Reading and writing safetensors containers with NumPy, including BF16 (which NumPy has no type for).

Files and in-memory bytes (the target protocol's frames, protocol.py) share one parser and one serializer:
read_safetensors / write_safetensors are parse_safetensors / serialize_safetensors plus file I/O. The container is described in docs/fixture-format.md, section 1. Reading keeps each tensor's stored dtype
name next to its values; BF16 values are widened exactly to float32. Writing follows the project's
convention (metadata first, header padded with spaces to a multiple of 8 bytes, tensors by descending
element size then name) so files written here look like the C++ writer's.
"""

from __future__ import annotations

import json
import os
import struct
import tempfile

import numpy as np

# safetensors dtype name -> (NumPy dtype of the stored bytes, element size)
_STORED = {
    "BOOL": (np.dtype("u1"), 1),
    "U8": (np.dtype("u1"), 1),
    "I8": (np.dtype("i1"), 1),
    "I16": (np.dtype("<i2"), 2),
    "U16": (np.dtype("<u2"), 2),
    "F16": (np.dtype("<f2"), 2),
    "BF16": (np.dtype("<u2"), 2),
    "I32": (np.dtype("<i4"), 4),
    "U32": (np.dtype("<u4"), 4),
    "F32": (np.dtype("<f4"), 4),
    "I64": (np.dtype("<i8"), 8),
    "U64": (np.dtype("<u8"), 8),
    "F64": (np.dtype("<f8"), 8),
}
FLOAT_DTYPES = ("F16", "BF16", "F32", "F64")
MAX_HEADER = 100_000_000


class FormatError(ValueError):
    """A file that is not a valid safetensors container."""


def bf16_bits_to_f32(bits: np.ndarray) -> np.ndarray:
    """Exact widening of raw bfloat16 bit patterns (uint16) to float32."""
    return (bits.astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16_bits(x: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bit patterns, rounding to nearest even (NaN stays a quiet NaN)."""
    x = np.asarray(x, dtype=np.float32)
    u = np.ascontiguousarray(x).reshape(-1).view(np.uint32).astype(np.uint64)
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(x.reshape(-1))
    if nan.any():
        rounded[nan] = ((u[nan] >> 16) | 0x40).astype(np.uint16)
    return rounded.reshape(x.shape)


def read_safetensors(path: str):
    """Returns (tensors, dtypes, metadata): name -> ndarray (BF16 widened to float32), name -> dtype name,
    and the string map of __metadata__ (empty when absent)."""
    with open(path, "rb") as f:
        data = f.read()
    return parse_safetensors(data, path)


def parse_safetensors(data, origin: str = "safetensors"):
    """The container in `data` (bytes-like) as read_safetensors returns it; errors start with `origin` (a file
    path, or the protocol's frame name)."""
    data = memoryview(data).cast("B")
    if len(data) < 8:
        raise FormatError(f"{origin}: shorter than 8 bytes")
    (n,) = struct.unpack("<Q", data[:8])
    if n > MAX_HEADER or 8 + n > len(data):
        raise FormatError(f"{origin}: header length {n} runs past the end ({len(data)} bytes)")
    try:
        header = json.loads(bytes(data[8 : 8 + n]).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise FormatError(f"{origin}: header is not JSON: {e}") from None
    if not isinstance(header, dict):
        raise FormatError(f"{origin}: header is not a JSON object")
    body = data[8 + n :]
    metadata = header.pop("__metadata__", {}) or {}
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise FormatError(f"{origin}: __metadata__ must map strings to strings")
    tensors, dtypes, spans = {}, {}, []
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
        stored, size = _STORED[dt]
        count = int(np.prod(shape, dtype=np.int64)) if shape else 1
        if end - begin != count * size or begin < 0 or end > len(body):
            raise FormatError(f"{origin}: tensor '{name}' data_offsets do not match its shape")
        spans.append((begin, end, name))
        arr = np.frombuffer(body[begin:end], dtype=stored).reshape(shape)
        if dt == "BF16":
            arr = bf16_bits_to_f32(arr)
        elif dt == "BOOL":
            arr = arr.astype(bool)
        tensors[name] = arr.copy()
        dtypes[name] = dt
    pos = 0
    for begin, end, name in sorted(spans):
        if begin != pos:
            raise FormatError(f"{origin}: tensor '{name}' leaves a gap or overlaps (offset {begin}, expected {pos})")
        pos = end
    if pos != len(body):
        raise FormatError(f"{origin}: {len(body) - pos} trailing bytes after the last tensor")
    return tensors, dtypes, metadata


def _as_stored(name: str, value, dtype: str) -> np.ndarray:
    stored, _ = _STORED[dtype]
    arr = np.asarray(value)
    if dtype == "BF16":
        if arr.dtype == np.uint16:  # raw bit patterns
            return np.array(arr, order="C")
        return f32_to_bf16_bits(arr.astype(np.float32))
    if dtype == "BOOL":
        return np.array(arr.astype(bool), dtype=np.uint8, order="C")
    return np.array(arr, dtype=stored, order="C")  # keeps 0-d scalars 0-d (np.ascontiguousarray would not)


def serialize_safetensors(tensors: dict, metadata: dict | None = None) -> bytes:
    """The container bytes of tensors (name -> (array, dtype name)) and metadata. A BF16 array may be float
    (rounded to nearest even) or uint16 raw bit patterns."""
    prepared = {}
    for name, (value, dtype) in tensors.items():
        if dtype not in _STORED:
            raise ValueError(f"tensor '{name}': unsupported dtype {dtype}")
        prepared[name] = (_as_stored(name, value, dtype), dtype)
    order = sorted(prepared, key=lambda k: (-_STORED[prepared[k][1]][1], k))
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
