#!/usr/bin/env python3
"""Writes the seed corpora of the libFuzzer harnesses into fuzzing/corpus/<harness>/ (standard library only).

Seeds come from the committed fixtures (small ones only), the docs' MRoPE examples and hand-built documents
in the formats the harnesses read (frames and answers of the target protocol, fuzz-case files, model
configs). Run from the repository root: python3 fuzzing/make_seeds.py. The output is deterministic.
"""
import json
import os
import shutil
import struct
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "fuzzing", "corpus")

SMALL_FIXTURES = [
    "fixtures/golden/tiny-kda/tiny-kda__replay_commit__T6_n4.safetensors",
    "fixtures/golden/tiny-kda/tiny-kda__mtp_verify__T4.safetensors",
    "fixtures/golden/tiny-gdn/tiny-gdn__recurrent__T12.safetensors",
    "fixtures/golden/tiny-gdn/tiny-gdn-f32act-bf16state__replay_commit__T6_n0.safetensors",
    "fixtures/conv/tiny-gdn/tiny-gdn__conv__update_T3_k2_bias.safetensors",
    "fixtures/conv/tiny-kda/tiny-kda__conv__commit_T5_n3_k6_f32act_bf16state.safetensors",
]
MROPE_FIXTURE = "fixtures/golden/mrope/mrope__qwen2-vl.safetensors"


def safetensors(tensors, metadata):
    """tensors: name -> (dtype, shape, raw bytes). Writer conventions of core/src/safetensors.cpp."""
    header = {}
    if metadata:
        header["__metadata__"] = metadata
    data = b""
    for name in sorted(tensors):
        dtype, shape, raw = tensors[name]
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    return struct.pack("<Q", len(text)) + text + data


def f32(values):
    return struct.pack("<%df" % len(values), *values)


def frame_body(msg, tensors=None):
    return safetensors(tensors or {}, {"msg": json.dumps(msg, separators=(",", ":"))})


def header_metadata(path):
    raw = open(os.path.join(ROOT, path), "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    return json.loads(raw[8:8 + n])["__metadata__"]


def write(harness, name, data):
    d = os.path.join(OUT, harness)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def main():
    if os.path.isdir(OUT):
        shutil.rmtree(OUT)
    # Safetensors and fixtures: committed fixtures.
    for p in SMALL_FIXTURES + [MROPE_FIXTURE]:
        data = open(os.path.join(ROOT, p), "rb").read()
        write("fuzz_fixture", os.path.basename(p), data)
        if p in SMALL_FIXTURES[:2]:
            write("fuzz_safetensors", os.path.basename(p), data)
    write("fuzz_safetensors", "empty.safetensors", safetensors({}, {}))
    write("fuzz_safetensors", "dtypes.safetensors", safetensors({
        "b": ("BOOL", [2], b"\x00\x01"), "h": ("BF16", [1, 2], b"\x80\x3f\x00\x40"), "i": ("I64", [], b"\x07" + b"\0" * 7),
        "z": ("F32", [0, 3], b"")}, {"k": "v"}))

    # Model configs: the configs of the committed fixtures, and a KDA one with every key.
    for p in SMALL_FIXTURES[:3]:
        model = json.loads(header_metadata(p)["config"])["model"]
        write("fuzz_model_config", model["name"] + "-" + model["op"] + ".json", json.dumps(model))
    write("fuzz_model_config", "partial.json", '{"op": "kda", "H": 2, "HV": 4, "K": 16, "V": 8, "kda_gate": '
          '"lower_bound_sigmoid", "lower_bound": -3.5}')

    # MRoPE requests: the docs' examples.
    ex = os.path.join(ROOT, "docs", "examples", "mrope")
    for name in sorted(os.listdir(ex)):
        if name.endswith(".json") and not name.endswith(".out.json"):
            write("fuzz_mrope_request", name, open(os.path.join(ex, name), "rb").read())

    # MRoPE session cases: the committed MRoPE traces' configs (a drawn case per model), and a short hand-made one.
    traces = os.path.join(ROOT, "fixtures", "traces", "mrope")
    for name in sorted(os.listdir(traces)):
        if name.endswith(".safetensors"):
            write("fuzz_mrope_session", name.replace(".safetensors", ".json"),
                  header_metadata(os.path.join(traces, name))["config"])
    short = json.loads(header_metadata(os.path.join(traces, sorted(os.listdir(traces))[0]))["config"])
    short["commands"] = [
        {"op": "mrope_admit", "req": 0, "segments": [{"type": "text", "length": 2}, {"type": "image", "grid": [1, 4, 4]}]},
        {"op": "mrope_admit", "req": 1, "segments": [{"type": "text", "length": 9}], "cached": 4},
        {"op": "mrope_step", "tokens": 8, "rows": [{"req": 1, "kind": "prefill", "tokens": 5},
                                                 {"req": 0, "kind": "prefill", "tokens": 3}]},
        {"op": "mrope_step", "tokens": 8, "rows": [{"req": 0, "kind": "prefill", "tokens": 3},
                                                 {"req": 1, "kind": "verify", "tokens": 2}, {"kind": "pad", "tokens": 3}]},
        {"op": "mrope_accept", "rows": [{"req": 1, "accepted": 1}]},
        {"op": "mrope_release", "req": 1}]
    write("fuzz_mrope_session", "short.json", json.dumps(short))

    # Fuzz-case files (reference/fuzz/fuzz_case.hpp): a tiny GDN setup with every command kind.
    model = json.loads(header_metadata(SMALL_FIXTURES[2])["config"])["model"]
    model["num_layers"] = 1
    setup = {"config": model, "num_slots": 3, "slot_stride": 4 * 8 * 8 + 4, "max_T": 3, "ring_B": 5, "ring_T": 3,
             "recon": "serial", "ring_record_dtype": "F32", "page_tokens": 2}
    cmds = [
        {"kind": "admit", "req": 0, "req2": 0, "slot": 1, "prompt": 5, "seed": "12345678901234567890"},
        {"kind": "step", "rows": [{"req": 0, "T": 3, "accepted": 0, "stop_at": 0, "seed": "7"}], "pad_at": [0, 1]},
        {"kind": "step", "rows": [{"req": 0, "T": 3, "accepted": 2, "stop_at": 2, "seed": "0"}], "pad_at": []},
        {"kind": "continue", "req": 0, "req2": 0, "slot": 2, "prompt": 2, "seed": "9"},
        {"kind": "copy", "req": 0, "req2": 1, "slot": 0, "prompt": 0, "seed": "0"},
        {"kind": "preempt", "req": 1, "req2": 0, "slot": 0, "prompt": 0, "seed": "0"},
        {"kind": "resume", "req": 1, "req2": 0, "slot": 0, "prompt": 0, "seed": "0"},
        {"kind": "finish", "req": 1, "req2": 0, "slot": 0, "prompt": 0, "seed": "0"},
    ]
    params = {"param.A_log.0": ("F32", [4], f32([0.5, -0.25, 1.0, 0.0])),
              "param.dt_bias.0": ("F32", [4], f32([0.1, 0.2, -0.3, 0.4]))}
    for target, fault in (("replay", "none"), ("exec:python3 t.py", "none")):
        meta = {"schema": "replayssm.fuzz_case", "schema_version": "1", "setup": json.dumps(setup),
                "target": target, "fault": fault, "commands": json.dumps(cmds), "reason": "seed"}
        write("fuzz_replay_case", target.split(":")[0] + ".safetensors", safetensors(params, meta))

    # Engine-level case files (reference/fuzz/engine_case.hpp): the same setup, every event kind, two engines.
    events = [
        {"kind": "admit", "req": 0, "prompt": 4, "max_new": 5, "seed": "12345678901234567890"},
        {"kind": "step", "entries": [{"req": 0, "T": 3, "accepted": 0, "eog_at": 0, "seed": "1"}]},
        {"kind": "step", "entries": [{"req": 0, "T": 3, "accepted": 3, "eog_at": 0, "seed": "2"}]},
        {"kind": "fork", "req": 1, "from": 0},
        {"kind": "prefix_hit", "req": 2, "from": 0, "prompt": 2, "max_new": 3, "seed": "3"},
        {"kind": "step", "entries": [{"req": 2, "T": 2, "accepted": 0, "eog_at": 0, "seed": "4"},
                                     {"req": 1, "T": 3, "accepted": 3, "eog_at": 2, "seed": "5"}]},
        {"kind": "preempt", "req": 0},
        {"kind": "finish", "req": 2},
        {"kind": "resume", "req": 0},
    ]
    options = [{"max_live": 3, "commit": "same_iteration", "buffers": "in_place"},
               {"max_live": 3, "commit": "next_step", "buffers": "double"}]
    engine_setup = dict(setup, num_slots=8)
    meta = {"schema": "replayssm.engine_case", "schema_version": "1", "setup": json.dumps(engine_setup),
            "options": json.dumps(options), "target": "reference", "fault": "none", "events": json.dumps(events),
            "reason": "seed"}
    write("fuzz_engine_case", "reference.safetensors", safetensors(params, meta))

    # Frames (core/src/frame.cpp) and answers (conformance/exec/answers.cpp).
    hello = {"ok": True, "protocol": "replayssm.target", "version": [1, 0], "capabilities": {
        "name": "seed", "ops": ["gdn", "kda"], "act_dtypes": ["BF16"], "state_dtypes": ["F32"], "layouts": ["vk"],
        "l2norms": ["rsqrt_mul"], "kda_gates": ["softplus"], "gva_ratios": [1, 2], "K": [8], "V": [8], "max_T": 4,
        "max_layers": 2, "copy_slot": False, "bit_exact": False, "tier": "bf16", "pad_outputs_zero": True,
        "design": "replay", "fixture_ops": ["recurrent"]}}
    answers = {
        "hello": frame_body(hello),
        "error": frame_body({"ok": False, "error": {"field": "rows[0].slot", "message": "slot 9 out of range"}}),
        "state": frame_body({"ok": True, "digest": "0123456789abcdef"}, {"state": ("F32", [1, 2, 2], f32([1, 2, 3, 4]))}),
        "pool": frame_body({"ok": True, "digests": ["1", "2", "3", "4", "5", "6"], "slots": [2, 0]},
                           {"values": ("F32", [2, 8], f32([float(i) for i in range(16)]))}),
        "step": frame_body({"ok": True}, {"o.0": ("BF16", [2, 1, 2], b"\x80\x3f\x00\x40\x00\x00\x80\xbf")}),
        "fixture": frame_body({"ok": True}, {"out.o": ("F32", [2, 1, 2], f32([1, 2, 3, 4])),
                                             "out.state": ("BF16", [1, 2, 2], b"\x80\x3f\x00\x40\x00\x00\x80\xbf")}),
    }
    for name, body in answers.items():
        write("fuzz_exec_answer", name, body)
    write("fuzz_frame", "step_request", frame_body(
        {"op": "step", "rows": [{"slot": 0, "write_slot": 1, "T": 2, "token_offset": 0, "accepted": 0,
                                 "kind": "verify", "fresh": False}], "total_tokens": 2},
        {"q.0": ("F32", [2, 1, 2], f32([1, 2, 3, 4])), "b.0": ("BF16", [2, 1], b"\x80\x3f\x00\x40")}))
    write("fuzz_frame", "hello_answer", answers["hello"])
    write("fuzz_frame", "pool_answer", answers["pool"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
