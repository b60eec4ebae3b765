"""What a target returns, in the dtype the protocol wants (docs/target-protocol.md).

A target may return NumPy arrays or torch tensors on any device (torch is imported only when a torch tensor
arrives). `to_wire` turns a value into the stored form of the wanted dtype: float32 for F32, uint16 raw bits
for BF16.

  * Exact whenever the values are representable in the wanted dtype (bf16 tensors, or float32 values that
    already are bf16 values, widen or pass through bit for bit; NaN payloads of float32 pass through F32).
  * Otherwise rounded to nearest, ties to even, once: float32 -> BF16 is what a kernel's bf16 store does
    (__float2bfloat16_rn); float64 -> F32 or -> BF16 is rounded directly from the float64 value (no double
    rounding through float32).
  * I64 and I32 (MRoPE positions, indices, deltas: protocol 1.10) only from integer values, exactly: a floating or
    boolean array, or a value outside the wanted range, is refused.
"""

from __future__ import annotations

import numpy as np

from .safetensors_io import bf16_bits_to_f32, f32_to_bf16_bits


class ConversionError(ValueError):
    """A returned value that cannot be answered; `field` names it ("o.1", "pool", "committed_state")."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def _numpy_of(value, field: str):
    """(array, is_bf16_bits): a NumPy view of value; torch bf16 tensors become their raw uint16 bits."""
    if isinstance(value, np.ndarray):
        return value, False
    if type(value).__module__.split(".")[0] == "torch":
        import torch  # only when a torch tensor is returned

        if isinstance(value, torch.Tensor):
            t = value.detach()
            if t.dtype == torch.bfloat16:
                return t.contiguous().view(torch.int16).cpu().numpy().view(np.uint16), True
            try:
                return t.cpu().numpy(), False
            except TypeError as e:
                raise ConversionError(field, f"torch dtype {t.dtype} cannot be answered: {e}") from None
    return np.asarray(value), False


def f64_to_bf16_bits(x) -> np.ndarray:
    """float64 -> bfloat16 bits, rounding to nearest even once. Rounds to float32 with round-to-odd first
    (exact when float32 carries at least two more bits than the target, which it does), then to bf16."""
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        t = np.ascontiguousarray(x.astype(np.float32))
    bits = t.reshape(-1).view(np.uint32).copy()
    xf = x.reshape(-1)
    finite = np.isfinite(xf)
    away = finite & (np.abs(t.reshape(-1).astype(np.float64)) > np.abs(xf))  # rounded away from zero
    bits[away] -= np.uint32(1)  # one float32 ulp toward zero (sign-magnitude): truncation
    inexact = finite & (bits.view(np.float32).astype(np.float64) != xf)
    bits[inexact] |= np.uint32(1)  # sticky bit: round to odd
    return f32_to_bf16_bits(bits.view(np.float32).reshape(x.shape))


INT_DTYPES = {"I64": np.dtype("<i8"), "I32": np.dtype("<i4")}


def _int_wire(arr: np.ndarray, dtype: str, field: str) -> np.ndarray:
    """An integer array as the wanted integer dtype, exactly (ConversionError for values outside its range)."""
    want = INT_DTYPES[dtype]
    info = np.iinfo(want)
    if arr.size and (int(arr.min()) < info.min or int(arr.max()) > info.max):
        raise ConversionError(field, f"holds values outside the range of {dtype}")
    return arr.astype(want)


def to_wire(value, dtype: str, shape: tuple, field: str, flat_ok: bool = True) -> np.ndarray:
    """value as a C-contiguous array of `shape` in the stored form of `dtype` ("F32": float32, "BF16": uint16
    bits, "I64" / "I32": int64 / int32). The value must hold floating-point numbers (integers for I64 and I32),
    have exactly `shape`, or (flat_ok) be 1-D with as many elements. ConversionError naming `field` otherwise."""
    arr, is_bf16 = _numpy_of(value, field)
    if dtype in INT_DTYPES and (is_bf16 or arr.dtype.kind not in "iu"):
        raise ConversionError(field, f"has dtype {'bfloat16' if is_bf16 else arr.dtype}, expected integer values "
                                     f"({dtype})")
    if not is_bf16 and dtype not in INT_DTYPES and arr.dtype.kind != "f":
        raise ConversionError(field, f"has dtype {arr.dtype}, expected floating-point values ({dtype})")
    want = tuple(int(d) for d in shape)
    count = int(np.prod(want, dtype=np.int64))
    if tuple(arr.shape) != want and not (flat_ok and arr.ndim == 1 and arr.size == count):
        raise ConversionError(field, f"has shape {list(arr.shape)}, expected {list(want)}")
    if dtype in INT_DTYPES:
        out = _int_wire(arr, dtype, field)
    elif dtype == "F32":
        if is_bf16:
            out = bf16_bits_to_f32(arr)
        else:
            with np.errstate(over="ignore"):
                out = arr.astype(np.float32)
    elif dtype == "BF16":
        if is_bf16:
            out = arr
        elif arr.dtype == np.float64 or arr.dtype.itemsize > 4:
            out = f64_to_bf16_bits(arr.astype(np.float64))
        else:
            out = f32_to_bf16_bits(arr.astype(np.float32))
    else:
        raise ConversionError(field, f"the protocol answers F32, BF16, I64 or I32 values, not {dtype}")
    return np.ascontiguousarray(out).reshape(want)

