"""Frames and digests of the target protocol (docs/target-protocol.md, version 1.2).

A frame is an unsigned 64-bit little-endian length N, then N bytes that are a safetensors container whose
__metadata__ holds exactly one key, "msg": a JSON object as text. The container's tensors are the frame's
tensors (raw little-endian bytes; BF16 as raw bfloat16 bits). The C++ side is core/src/frame.cpp.

    frame = read_frame(sys.stdin.buffer)          # Frame(msg, tensors, dtypes), or None at a clean end of input
    write_frame(sys.stdout.buffer, {"ok": True}, {"o.0": (array, "BF16")})

`digest64` is the protocol's content digest, bit for bit the C++ function of core/include/replayssm/frame.hpp:
with w_i the little-endian 64-bit words of the bytes (the last one zero-padded), n the byte count and mix the
SplitMix64 finalizer, digest = mix(n + sum_i mix(w_i xor (i * 0x9E3779B97F4A7C15))) mod 2^64.
"""

from __future__ import annotations

import json
import struct
from typing import NamedTuple

import numpy as np

from .safetensors_io import FormatError, parse_safetensors, serialize_safetensors

PROTOCOL_NAME = "replayssm.target"
# 1.1 added the `fixture` command; 1.2 graph padding, PAD conventions, out-of-place commits; 1.3 the conv fixture ops;
# 1.4 the `capture` command; 1.5 the conv component of the lifecycle (`conv_state`, conv_* commands); 1.6 l2norm
# forms by formula (and div_norm_plus_eps, div_max_norm_eps), setup.gates "checkpoint"; 1.7 `step_mix`; 1.8
# `self_check`; 1.9 `graph_replay` (a step's and commit's `replay`: a captured bucket replayed); 1.10 MRoPE positions
# (the `mrope` capability, the mrope_* commands, the mrope.rotary fixture op; I64 tensors in answers); 1.11 the tree
# fixture ops (tree.verify, tree.commit, tree.conv_update, tree.conv_commit)
VERSION = (1, 11)
MAX_FRAME_BYTES = 8 << 30  # frames larger than 8 GiB are refused before anything is allocated


class ProtocolError(ValueError):
    """A frame that cannot be read or written; `field` names what is wrong ("frame.msg", "frame.length")."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class Frame(NamedTuple):
    msg: dict      # the JSON object
    tensors: dict  # name -> ndarray (BF16 widened exactly to float32)
    dtypes: dict   # name -> stored dtype name ("F32", "BF16", ...)


def encode_frame(msg: dict, tensors: dict | None = None) -> bytes:
    """Length prefix + container. tensors: name -> (array, dtype name); a BF16 array may be float (rounded to
    nearest even) or uint16 raw bits."""
    if not isinstance(msg, dict):
        raise ProtocolError("frame.msg", f"must be a JSON object, got {type(msg).__name__}")
    body = serialize_safetensors(tensors or {}, {"msg": json.dumps(msg, separators=(",", ":"))})
    return struct.pack("<Q", len(body)) + body


def decode_frame(body, origin: str = "frame") -> Frame:
    """The frame in `body` (the N bytes after the length prefix)."""
    try:
        tensors, dtypes, metadata = parse_safetensors(body, origin)
    except FormatError as e:
        raise ProtocolError(origin, str(e).removeprefix(origin + ": ")) from None
    if set(metadata) != {"msg"}:
        raise ProtocolError(f"{origin}.__metadata__", f'must hold exactly one key, "msg" (has {sorted(metadata)})')
    try:
        msg = json.loads(metadata["msg"])
    except json.JSONDecodeError as e:
        raise ProtocolError(f"{origin}.msg", f"is not JSON: {e}") from None
    if not isinstance(msg, dict):
        raise ProtocolError(f"{origin}.msg", f"must be a JSON object, got {type(msg).__name__}")
    return Frame(msg, tensors, dtypes)


def _read_exact(stream, n: int):
    """Up to n bytes (fewer only when the stream ends) and how many were read."""
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        if hasattr(stream, "readinto"):
            chunk = stream.readinto(view[got:]) or 0
        else:
            data = stream.read(n - got) or b""
            chunk = len(data)
            view[got : got + chunk] = data
        if chunk == 0:
            break
        got += chunk
    return buf, got


def read_frame(stream, max_bytes: int = MAX_FRAME_BYTES, origin: str = "frame") -> Frame | None:
    """Reads one frame from a binary stream. None when the stream ends cleanly before a frame starts;
    ProtocolError for a truncated frame, a length over max_bytes (checked before allocating) or a body that is
    not a valid frame."""
    head, got = _read_exact(stream, 8)
    if got == 0:
        return None
    if got < 8:
        raise ProtocolError(f"{origin}.length", f"input ended inside the length prefix ({got} of 8 bytes)")
    (n,) = struct.unpack("<Q", head)
    if n > max_bytes:
        raise ProtocolError(f"{origin}.length", f"declares {n} bytes, more than the cap of {max_bytes}")
    body, got = _read_exact(stream, n)
    if got < n:
        raise ProtocolError(f"{origin}.body", f"input ended after {got} of {n} bytes")
    return decode_frame(body, origin)


def write_frame(stream, msg: dict, tensors: dict | None = None) -> None:
    """Writes one frame (see encode_frame) and flushes the stream."""
    stream.write(encode_frame(msg, tensors))
    stream.flush()


# --- digest64 ---------------------------------------------------------------------------------------------
_U64 = np.uint64
_GOLDEN = _U64(0x9E3779B97F4A7C15)


def _mix(z: np.ndarray) -> np.ndarray:
    z = (z ^ (z >> _U64(30))) * _U64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> _U64(27))) * _U64(0x94D049BB133111EB)
    return z ^ (z >> _U64(31))


def _as_bytes(data) -> np.ndarray:
    if isinstance(data, np.ndarray):
        return np.ascontiguousarray(data).reshape(-1).view(np.uint8)
    return np.frombuffer(memoryview(data).cast("B"), dtype=np.uint8)


def digest_rows(rows: np.ndarray) -> np.ndarray:
    """digest64 of every row of a 2-D uint8 array (one digest per row, uint64), in one vectorized pass."""
    rows = np.asarray(rows)
    if rows.dtype != np.uint8 or rows.ndim != 2:
        raise ValueError(f"digest_rows wants a 2-D uint8 array, got {rows.dtype} {list(rows.shape)}")
    r, n = rows.shape
    words = (n + 7) // 8
    padded = np.zeros((r, words * 8), dtype=np.uint8)
    padded[:, :n] = rows
    w = padded.view("<u8").astype(_U64)
    with np.errstate(over="ignore"):
        terms = _mix(w ^ (np.arange(words, dtype=_U64) * _GOLDEN))
        h = terms.sum(axis=1, dtype=_U64) + _U64(n)
        return _mix(h)


def digest64(data) -> int:
    """The protocol's 64-bit content digest of a bytes-like object (bytes, bytearray, memoryview, or a NumPy
    array's bytes in memory order)."""
    return int(digest_rows(_as_bytes(data).reshape(1, -1))[0])


def hex64(d: int) -> str:
    """A digest as the protocol writes it: lowercase hexadecimal, no leading zeros ("0" for zero)."""
    return format(int(d), "x")


def parse_hex64(text, field: str) -> int:
    """A digest string of the judge's; ProtocolError naming `field` unless it is 1 to 16 hex digits."""
    if not isinstance(text, str) or not 1 <= len(text) <= 16 or any(c not in "0123456789abcdefABCDEF" for c in text):
        raise ProtocolError(field, f"{text!r} is not a 64-bit hexadecimal digest")
    return int(text, 16)
