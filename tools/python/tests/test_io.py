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
