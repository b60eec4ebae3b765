"""Answers in the protocol's dtypes: exact when representable, otherwise rounded to nearest even once."""
import math
import os
import sys
import types
from fractions import Fraction

import numpy as np
import pytest

from replayssm_kit import bf16_bits_to_f32, f32_to_bf16_bits
from replayssm_kit.convert import ConversionError, f64_to_bf16_bits, to_wire


def _bf16_exact(x: float) -> int:
    """bf16 bits of the nearest (ties to even) bf16 value of a finite float64, by exact rational arithmetic
    (normal bf16 range only)."""
    if x == 0:
        return 0x8000 if math.copysign(1, x) < 0 else 0
    sign = 0x8000 if x < 0 else 0
    m, e = math.frexp(abs(x))  # abs(x) = m * 2^e, m in [0.5, 1)
    ulp = Fraction(2) ** (e - 8)  # 8 significant bits
    q, r = divmod(Fraction(abs(x)), ulp)
    if r > ulp / 2 or (r == ulp / 2 and q % 2 == 1):
        q += 1
    value = float(q * ulp)
    bits = int(np.array([value], dtype=np.float32).view(np.uint32)[0]) >> 16
    return sign | bits


def test_float64_rounds_to_bf16_once_not_twice():
    # 1 + 2^-8 + 2^-30: through float32 it becomes the tie 1 + 2^-8 and then 1.0 (even); once it is 1 + 2^-7.
    x = 1 + 2.0**-8 + 2.0**-30
    assert bf16_bits_to_f32(f32_to_bf16_bits(np.float32(x))) == 1.0  # the double rounding this avoids
    assert bf16_bits_to_f32(f64_to_bf16_bits(np.array([x])))[0] == 1 + 2.0**-7
    assert bf16_bits_to_f32(f64_to_bf16_bits(np.array([-x])))[0] == -(1 + 2.0**-7)


def test_float64_to_bf16_matches_exact_rounding():
    rng = np.random.default_rng(3)
    x = rng.standard_normal(4000) * np.exp2(rng.integers(-100, 100, 4000))
    ties = np.array([1 + 2.0**-8, 1 + 3 * 2.0**-8, -(2 + 2.0**-7), 3.0e38, 1.0e-30 * (1 + 2.0**-8)])
    x = np.concatenate([x, ties, np.nextafter(ties, 0), np.nextafter(ties, np.inf)])
    got = f64_to_bf16_bits(x)
    want = np.array([_bf16_exact(float(v)) for v in x], dtype=np.uint16)
    bad = np.nonzero(got != want)[0]
    assert bad.size == 0, [(float(x[i]), hex(got[i]), hex(want[i])) for i in bad[:5]]


def test_float64_to_bf16_special_values():
    x = np.array([np.inf, -np.inf, np.nan, 1e300, -1e300, 0.0, -0.0, 1e-300])
    got = f64_to_bf16_bits(x)
    assert list(got[[0, 1, 3, 4]]) == [0x7F80, 0xFF80, 0x7F80, 0xFF80]
    assert np.isnan(bf16_bits_to_f32(got[2:3]))[0]
    assert list(got[5:]) == [0x0000, 0x8000, 0x0000]


def test_to_wire_is_exact_when_representable():
    poison = np.array([0x7FC00000, 0x7FA00001], dtype=np.uint32).view(np.float32)  # NaNs with payload bits
    x = np.array([1.5, -0.125, poison[0], poison[1]], dtype=np.float32)
    assert np.array_equal(to_wire(x, "F32", (4,), "v").view(np.uint32), x.view(np.uint32))
    bf16_values = bf16_bits_to_f32(np.array([0x3F80, 0xC2F7, 0x0001, 0x7FC0], dtype=np.uint16))
    assert list(to_wire(bf16_values, "BF16", (4,), "v")) == [0x3F80, 0xC2F7, 0x0001, 0x7FC0]
    assert list(to_wire(bf16_values.astype(np.float64), "BF16", (4,), "v")) == [0x3F80, 0xC2F7, 0x0001, 0x7FC0]
    assert to_wire(np.float16(0.5) * np.ones(2, np.float16), "F32", (2,), "v").tolist() == [0.5, 0.5]


def test_to_wire_rounds_float32_to_bf16_to_nearest_even_like_a_kernel_store():
    x = np.array([1 + 2.0**-8, 1 + 3 * 2.0**-8, 1 + 2.0**-8 + 2.0**-20, -(1 + 2.0**-8)], dtype=np.float32)
    got = bf16_bits_to_f32(to_wire(x, "BF16", (2, 2), "o.0")).reshape(-1)
    assert got.tolist() == [1.0, 1 + 2.0**-6, 1 + 2.0**-7, -1.0]
    f64 = np.array([1 + 2.0**-30], dtype=np.float64)
    assert to_wire(f64, "F32", (1,), "o.0")[0] == np.float32(1 + 2.0**-30)  # nearest float32


def test_to_wire_checks_shape_and_dtype_naming_the_field():
    ok = to_wire(np.zeros(12, np.float32), "F32", (3, 4), "o.1")  # flat with the right count
    assert ok.shape == (3, 4) and ok.flags["C_CONTIGUOUS"]
    t = to_wire(np.zeros((4, 3), np.float32).T, "F32", (3, 4), "o.1")  # transposed view: values in logical order
    assert t.flags["C_CONTIGUOUS"]
    for value, what in ((np.zeros((4, 3), np.float32), "shape"), (np.zeros(11, np.float32), "shape"),
                        (np.zeros((3, 4), np.int32), "dtype")):
        with pytest.raises(ConversionError, match=what) as e:
            to_wire(value, "F32", (3, 4), "o.1")
        assert e.value.field == "o.1"
    with pytest.raises(ConversionError):
        to_wire(np.zeros(12, np.float32), "F32", (3, 4), "state", flat_ok=False)


class _FakeTorchTensor:
    """Just the torch API to_wire uses (detach, dtype, contiguous, view, cpu, numpy), over NumPy, in a module
    named "torch"; the real thing runs where torch is installed (test below)."""

    def __init__(self, arr, dtype):
        self.arr, self.dtype = arr, dtype

    def detach(self):
        return self

    def contiguous(self):
        return self

    def cpu(self):
        return self

    def view(self, dtype):
        assert dtype == "int16" and self.dtype == "bfloat16"
        return _FakeTorchTensor(self.arr.view(np.int16), "int16")

    def numpy(self):
        return self.arr


def test_torch_tensors_are_imported_lazily_and_converted(monkeypatch):
    fake = types.ModuleType("torch")
    fake.Tensor, fake.bfloat16, fake.int16 = _FakeTorchTensor, "bfloat16", "int16"
    _FakeTorchTensor.__module__ = "torch"
    monkeypatch.setitem(sys.modules, "torch", fake)
    bits = np.array([0x3F80, 0x4049, 0xBF00], dtype=np.uint16)
    bf = _FakeTorchTensor(bits.copy(), "bfloat16")
    assert list(to_wire(bf, "BF16", (3,), "o.0")) == list(bits)  # raw bits, bit for bit
    assert to_wire(bf, "F32", (3,), "o.0").tolist() == bf16_bits_to_f32(bits).tolist()
    f32 = _FakeTorchTensor(np.array([1 + 2.0**-8], np.float32), "float32")
    assert list(to_wire(f32, "BF16", (1,), "o.0")) == [0x3F80]


def test_real_torch_tensors_when_torch_is_installed():
    torch = pytest.importorskip("torch")
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    for dev in devices:
        x = torch.tensor([1.0, -2.5, 3.0e-3, 1 + 2.0**-8], dtype=torch.float32, device=dev)
        bf = x.to(torch.bfloat16)
        want = bf.cpu().view(torch.int16).numpy().view(np.uint16)
        assert np.array_equal(to_wire(bf, "BF16", (4,), "o"), want)  # exact
        assert np.array_equal(to_wire(x, "BF16", (4,), "o"), want)  # torch's own RNE store
        assert np.array_equal(to_wire(x, "F32", (4,), "o"), x.cpu().numpy())


def test_the_kit_never_imports_torch_for_numpy_answers(tmp_path):
    """A poisoned `torch` module first on the path: importing the kit and answering NumPy arrays must not touch it."""
    import subprocess

    from conftest import HERE

    (tmp_path / "torch.py").write_text("raise ImportError('the kit imported torch')\n")
    code = ("import sys, numpy as np; import replayssm_kit as rk; from replayssm_kit.convert import to_wire; "
            "assert to_wire(np.ones(2, np.float32), 'BF16', (2,), 'o').tolist() == [0x3F80, 0x3F80]; "
            "assert 'torch' not in sys.modules")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), os.path.dirname(HERE)]))
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
