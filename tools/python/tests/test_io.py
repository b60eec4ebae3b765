"""The kit's safetensors reader agrees with the safetensors package and round-trips BF16 bit patterns."""
import json
import os
import struct

import numpy as np
import pytest
from safetensors import safe_open

from conftest import FIXTURES
from replayssm_kit import bf16_bits_to_f32, f32_to_bf16_bits, read_safetensors, write_safetensors
from replayssm_kit.safetensors_io import FormatError

GOLDEN = os.path.join(FIXTURES, "golden", "tiny-gdn", "tiny-gdn-f32act-bf16state__recurrent__T12.safetensors")


def test_reader_matches_the_safetensors_package_on_f32_tensors():
    ours, dtypes, meta = read_safetensors(GOLDEN)
    assert meta["schema"] == "replayssm.fixture"
    assert dtypes["in.state"] == "BF16" and dtypes["in.q"] == "F32"
    checked = 0
    with safe_open(GOLDEN, framework="numpy") as f:  # NumPy has no bfloat16: compare the other tensors
        assert f.metadata() == meta
        for name in f.keys():
            if dtypes[name] != "BF16":
                assert np.array_equal(ours[name], f.get_tensor(name)), name
                checked += 1
    assert checked >= 5


def test_bf16_rounding_is_nearest_even_and_round_trips(tmp_path):
    x = np.array([1.0, 1.00390625, 1.005859375, -2.5, 0.0, -0.0, np.inf, 3.0e38], dtype=np.float32)
    bits = f32_to_bf16_bits(x)
    back = bf16_bits_to_f32(bits)
    assert back[0] == 1.0 and back[1] == 1.0  # tie to even
    assert back[2] == np.float32(1.0078125)
    assert np.signbit(back[5]) and back[6] == np.inf
    path = str(tmp_path / "t.safetensors")
    write_safetensors(path, {"in.x": (bits, "BF16"), "in.i": (np.arange(3), "I32"), "in.s": (np.int64(7), "I64")},
                      {"k": "v"})
    t, d, m = read_safetensors(path)
    assert d == {"in.x": "BF16", "in.i": "I32", "in.s": "I64"} and m == {"k": "v"}
    assert t["in.s"].shape == () and int(t["in.s"]) == 7
    assert np.array_equal(f32_to_bf16_bits(t["in.x"]), bits)


def test_truncated_file_is_refused(tmp_path):
    with open(GOLDEN, "rb") as f:
        data = f.read()
    path = tmp_path / "cut.safetensors"
    path.write_bytes(data[:-3])
    with pytest.raises(FormatError):
        read_safetensors(str(path))


def test_bytes_and_files_share_one_parser(tmp_path):
    from replayssm_kit.safetensors_io import parse_safetensors, serialize_safetensors

    with open(GOLDEN, "rb") as f:
        data = f.read()
    from_file = read_safetensors(GOLDEN)
    from_bytes = parse_safetensors(data, "golden")
    assert from_bytes[1] == from_file[1] and from_bytes[2] == from_file[2]
    for name, arr in from_file[0].items():
        assert np.array_equal(arr, from_bytes[0][name], equal_nan=True), name
    # Serializing what was read gives the same bytes as writing the file (one serializer).
    tensors = {k: (v, from_file[1][k]) for k, v in from_file[0].items()}
    path = str(tmp_path / "again.safetensors")
    write_safetensors(path, tensors, from_file[2])
    with open(path, "rb") as f:
        assert f.read() == serialize_safetensors(tensors, from_file[2])
    with pytest.raises(FormatError, match="^frame: "):
        parse_safetensors(data[:-3], "frame")
    header = json.dumps({"x": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}}).encode()
    with pytest.raises(FormatError, match="negative dimension"):
        parse_safetensors(struct.pack("<Q", len(header)) + header + bytes(8), "frame")


def _container(header: dict, body: bytes) -> bytes:
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + body


def test_what_the_safetensors_package_lets_through_is_refused_naming_the_tensor():
    import safetensors

    from replayssm_kit.safetensors_io import parse_safetensors

    extra = _container({"x": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4], "extra": 1}}, bytes(4))
    fp8 = _container({"y": {"dtype": "F8_E4M3", "shape": [1], "data_offsets": [0, 1]}}, bytes(1))
    for data in (extra, fp8):
        safetensors.deserialize(data)  # the library accepts both
    with pytest.raises(FormatError, match="tensor 'x' entry must have exactly dtype, shape, data_offsets"):
        parse_safetensors(extra, "frame")
    with pytest.raises(FormatError, match="tensor 'y' has unsupported dtype F8_E4M3"):
        parse_safetensors(fp8, "frame")
    short = _container({"z": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}}, bytes(4))
    with pytest.raises(FormatError, match="tensor 'z' data_offsets do not match its shape"):
        parse_safetensors(short, "frame")


def test_the_package_reads_what_the_kit_writes_bf16_bits_included():
    import ml_dtypes
    import safetensors

    from replayssm_kit.safetensors_io import serialize_safetensors

    bits = np.array([0x3F80, 0x7FC1, 0x8001, 0xFF80], dtype=np.uint16)
    data = serialize_safetensors({"a.bf": (bits, "BF16"), "a.i": (np.arange(5, dtype=np.int64), "I64")}, {"k": "v"})
    decoded = dict(safetensors.deserialize(data))
    assert decoded["a.bf"]["dtype"] == "BF16" and decoded["a.bf"]["shape"] == [4]
    assert np.array_equal(np.frombuffer(decoded["a.bf"]["data"], dtype=np.uint16), bits)
    widened = np.frombuffer(decoded["a.bf"]["data"], dtype=ml_dtypes.bfloat16).astype(np.float32)
    assert np.array_equal(f32_to_bf16_bits(widened), bits)  # NaN payload and -0 subnormal kept bit for bit


def test_the_kit_writes_the_same_bytes_every_time():
    from replayssm_kit.safetensors_io import serialize_safetensors

    meta = {f"key{i}": str(i) for i in range(12)}
    tensors = {"x": (np.ones(3, dtype=np.float32), "F32"), "y": (np.zeros(2), "BF16")}
    assert len({serialize_safetensors(tensors, meta) for _ in range(10)}) == 1

