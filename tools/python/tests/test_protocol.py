"""Target-protocol frames and digest64: the C++ side's fixed vectors (core/tests/frame_test.cpp), round trips,
and refusal of malformed or oversized frames naming the field."""
import io
import json
import struct

import numpy as np
import pytest
from safetensors.numpy import load as st_load

from replayssm_kit import bf16_bits_to_f32, f32_to_bf16_bits
from replayssm_kit.protocol import (MAX_FRAME_BYTES, ProtocolError, decode_frame, digest64, digest_rows, encode_frame,
                                    hex64, parse_hex64, read_frame, write_frame)

B37 = bytes((i * 7 + 3) & 255 for i in range(37))


def test_digest64_fixed_vectors_equal_the_cpp_function():
    assert digest64(B37[:0]) == 0x0
    assert digest64(B37[:1]) == 0xB29A3BD06EEDAFE8
    assert digest64(B37[:8]) == 0xE4948AFC7EE3B87C
    assert digest64(B37[:37]) == 0x75BC6A1E0BE150A3
    f = np.array([1.0, -2.5, 0.0], dtype=np.float32)
    assert digest64(f.tobytes()) == 0x456EC1A313799C14
    assert digest64(f) == digest64(memoryview(f.tobytes())) == digest64(bytearray(f.tobytes()))


def test_digest64_changes_with_every_single_bit():
    d = digest64(B37)
    for i in range(37 * 8):
        c = bytearray(B37)
        c[i // 8] ^= 1 << (i % 8)
        assert digest64(bytes(c)) != d, f"bit {i}"


def test_digest_rows_is_digest64_of_each_row():
    rng = np.random.default_rng(7)
    for width in (0, 1, 7, 8, 9, 37, 64):
        rows = rng.integers(0, 256, size=(5, width), dtype=np.uint8)
        got = digest_rows(rows)
        assert [int(x) for x in got] == [digest64(r.tobytes()) for r in rows], width
    strided = rng.integers(0, 256, size=(3, 40), dtype=np.uint8)[:, 5:30]  # not contiguous
    assert [int(x) for x in digest_rows(strided)] == [digest64(r.tobytes()) for r in strided]


def test_hex_digests_are_lowercase_without_padding_and_parse_back():
    assert hex64(0) == "0" and hex64(0xB29A3BD06EEDAFE8) == "b29a3bd06eedafe8" and hex64(0xAB) == "ab"
    assert parse_hex64("B29A3BD06EEDAFE8", "known") == 0xB29A3BD06EEDAFE8
    for bad in ("", "12345678901234567", "xyz", 12, None):
        with pytest.raises(ProtocolError) as e:
            parse_hex64(bad, "known[3]")
        assert e.value.field == "known[3]"


def test_round_trip_keeps_message_and_tensor_bits():
    bits = f32_to_bf16_bits(np.array([[1, -2, 3.5, 0], [0.25, 8, -0.125, 1e-3]], dtype=np.float32))
    o = np.arange(6, dtype=np.float32).reshape(2, 3)
    msg = {"op": "step", "rows": [{"slot": 3, "T": 2}], "total_tokens": 2}
    framed = encode_frame(msg, {"q.0": (bits, "BF16"), "o.0": (o, "F32")})
    (n,) = struct.unpack("<Q", framed[:8])
    assert n + 8 == len(framed)
    f = decode_frame(framed[8:])
    assert f.msg == msg and f.dtypes == {"q.0": "BF16", "o.0": "F32"}
    assert np.array_equal(f32_to_bf16_bits(f.tensors["q.0"]), bits)
    assert f.tensors["q.0"].dtype == np.float32 and np.array_equal(f.tensors["q.0"], bf16_bits_to_f32(bits))
    assert np.array_equal(f.tensors["o.0"], o)
    # The body is an ordinary safetensors container: the safetensors package reads it (NumPy has no bf16).
    plain = encode_frame(msg, {"o.0": (o, "F32")})
    assert np.array_equal(st_load(plain[8:])["o.0"], o)
    (hn,) = struct.unpack("<Q", framed[8:16])
    assert json.loads(json.loads(framed[16 : 16 + hn])["__metadata__"]["msg"]) == msg


def test_stream_of_frames_then_a_clean_end():
    s = io.BytesIO()
    write_frame(s, {"op": "hello"})
    write_frame(s, {"ok": True}, {"x": (np.ones(3, np.float32), "F32")})
    s.seek(0)
    assert read_frame(s).msg == {"op": "hello"}
    f = read_frame(s)
    assert f.msg == {"ok": True} and np.array_equal(f.tensors["x"], np.ones(3))
    assert read_frame(s) is None


def _field(fn):
    with pytest.raises(ProtocolError) as e:
        fn()
    return e.value.field


def _body(metadata, tensors=b""):
    header = json.dumps({"__metadata__": metadata}).encode()
    return struct.pack("<Q", len(header)) + header + tensors


def test_malformed_frames_are_refused_naming_the_field():
    assert _field(lambda: decode_frame(_body({"other": "{}"}))) == "frame.__metadata__"
    assert _field(lambda: decode_frame(_body({"msg": "{}", "x": "1"}))) == "frame.__metadata__"
    assert _field(lambda: decode_frame(_body({"msg": "{op"}), "answer")) == "answer.msg"
    assert _field(lambda: decode_frame(_body({"msg": "[1, 2]"}))) == "frame.msg"
    assert _field(lambda: decode_frame(b"\x01\x02\x03")) == "frame"
    assert _field(lambda: decode_frame(_body({"msg": "{}"}, b"junk!"))) == "frame"  # trailing bytes
    assert _field(lambda: encode_frame([1, 2])) == "frame.msg"
    framed = encode_frame({"op": "x"}, {"t": (np.zeros(4, np.float32), "F32")})
    assert _field(lambda: read_frame(io.BytesIO(framed[:-1]))) == "frame.body"
    assert _field(lambda: read_frame(io.BytesIO(framed[:5]))) == "frame.length"


class _OnlyTheLength(io.RawIOBase):
    """A stream that hands out one length prefix and fails if anything more is read."""

    def __init__(self, n):
        self.head = struct.pack("<Q", n)
        self.reads = 0

    def readable(self):
        return True

    def readinto(self, b):
        self.reads += 1
        if self.reads > 1:
            raise AssertionError("the body was read although the length is over the cap")
        b[:8] = self.head
        return 8


def test_oversized_frames_are_refused_before_anything_is_read_or_allocated():
    s = _OnlyTheLength(MAX_FRAME_BYTES + 1)
    with pytest.raises(ProtocolError, match="more than the cap") as e:
        read_frame(s)  # allocating 8 GiB + 1 would fail or take seconds; the cap comes first
    assert e.value.field == "frame.length" and s.reads == 1
    assert MAX_FRAME_BYTES == 8 << 30
    with pytest.raises(ProtocolError):
        read_frame(_OnlyTheLength(1 << 63))
    framed = encode_frame({"op": "x"})
    assert read_frame(io.BytesIO(framed), max_bytes=len(framed) - 8).msg == {"op": "x"}
    with pytest.raises(ProtocolError, match="more than the cap"):
        read_frame(io.BytesIO(framed), max_bytes=len(framed) - 9)
