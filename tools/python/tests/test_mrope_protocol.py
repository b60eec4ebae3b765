"""MRoPE positions through the protocol (1.10), in process: the kit's strict parsing of the `mrope` claim and of the
five mrope_* commands (each refusal names its field, and the target never sees a refused command), the claim left out
for a judge speaking 1.9, the NumPy example's positions, indices and rotations against hand-computed values (prefill
chunks, verify and accept, decode, padding, ragged steps), each of its seeded MRoPE faults changing the answer on a
case built to expose it and nothing where it must not matter, and the mrope.rotary fixture op reproducing the
committed fixtures."""
import os
import sys

import numpy as np
import pytest

from conftest import FIXTURES, HERE
import replayssm_kit as rk
from replayssm_kit.convert import ConversionError, to_wire
from replayssm_kit.target import MROPE_MODELS, MropeRow, Target
from test_fixture_command import fixture_cmd
from test_serve import HELLO, Fake, session

sys.path.insert(0, os.path.join(os.path.dirname(HERE), "examples"))
from numpy_mrope import MROPE_FAULTS, prompt_table, rotate  # noqa: E402
from numpy_replay import NumpyReplay  # noqa: E402

HELLO_1_9 = {**HELLO, "version": [1, 9]}
HELLO_1_10 = {**HELLO, "version": [1, 10]}
QH, KH = 2, 1  # q and k heads of every case here

# The presets in full, as the judge's mrope_setup sends them (docs/mrope.md section 4).
PRESETS = {
    "qwen2-vl": {"model": "qwen2-vl", "head_dim": 128, "rotary_dim": 128, "theta": 1000000.0,
                 "mrope_section": [16, 24, 24], "interleaved": False, "spatial_merge_size": 2,
                 "temporal_patch_size": 2, "video_rule": "frame-index", "tokens_per_second": 0.0},
    "qwen2.5-vl": {"model": "qwen2.5-vl", "head_dim": 128, "rotary_dim": 128, "theta": 1000000.0,
                   "mrope_section": [16, 24, 24], "interleaved": False, "spatial_merge_size": 2,
                   "temporal_patch_size": 2, "video_rule": "scaled-time", "tokens_per_second": 2.0},
    "qwen3-vl": {"model": "qwen3-vl", "head_dim": 128, "rotary_dim": 128, "theta": 5000000.0,
                 "mrope_section": [24, 20, 20], "interleaved": True, "spatial_merge_size": 2,
                 "temporal_patch_size": 2, "video_rule": "per-frame", "tokens_per_second": 0.0},
    "qwen3.5": {"model": "qwen3.5", "head_dim": 256, "rotary_dim": 64, "theta": 10000000.0,
                "mrope_section": [11, 11, 10], "interleaved": True, "spatial_merge_size": 2,
                "temporal_patch_size": 2, "video_rule": "per-frame", "tokens_per_second": 0.0},
}
TEXT_IMAGE_TEXT = [{"type": "text", "length": 2}, {"type": "image", "grid": [1, 4, 4]}, {"type": "text", "length": 2}]


def setup(model="qwen2-vl", **edits):
    return {"op": "mrope_setup", "config": {**PRESETS[model], **edits}, "q_heads": QH, "k_heads": KH}


def admit(req, segments):
    return {"op": "mrope_admit", "req": req, "segments": segments}


def step(rows, model="qwen2-vl", seed=0, tokens=None):
    """An mrope_step of rows ((req, kind, tokens) or ("pad", P)) with random q and k."""
    wire = [{"kind": "pad", "tokens": r[1]} if r[0] == "pad" else {"req": r[0], "kind": r[1], "tokens": r[2]}
            for r in rows]
    n = sum(r["tokens"] for r in wire)
    d = PRESETS[model]["head_dim"]
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((n, QH, d)).astype(np.float32)
    k = rng.standard_normal((n, KH, d)).astype(np.float32)
    return {"op": "mrope_step", "rows": wire, "tokens": n if tokens is None else tokens}, {"q": (q, "F32"),
                                                                                           "k": (k, "F32")}


def accept(*pairs):
    return {"op": "mrope_accept", "rows": [{"req": r, "accepted": n} for r, n in pairs]}


def release(req):
    return {"op": "mrope_release", "req": req}


class Recorder(Target):
    """Claims mrope, records what reaches it, answers zeros (index -1) and q, k unrotated."""

    def __init__(self, claim=None):
        self.claim = {"models": ["qwen2-vl", "qwen3.5"]} if claim is None else claim
        self.calls = []

    def capabilities(self):
        return {"name": "recorder", "mrope": self.claim}

    def mrope_setup(self, config, q_heads, k_heads):
        self.calls.append(("setup", config, q_heads, k_heads))

    def mrope_admit(self, req, segments, cached=0):
        self.calls.append(("admit", req, segments))

    def mrope_step(self, rows, q, k):
        self.calls.append(("step", rows, q, k))
        n = q.shape[0]
        return np.zeros((3, n), np.int64), np.full(n, -1, np.int64), q, k

    def mrope_accept(self, rows):
        self.calls.append(("accept", rows))

    def mrope_release(self, req):
        self.calls.append(("release", req))


def ok(answers):
    assert all(a.msg["ok"] for a in answers), [a.msg for a in answers if not a.msg["ok"]]
    return answers


def step_answers(target, *commands, model="qwen2-vl"):
    """The answers of every mrope_step among the commands, run after hello and mrope_setup: a list of dicts of
    positions, index, q_rot, k_rot (and the step's q, k)."""
    answers = ok(session(target, HELLO_1_10, setup(model), *commands))[2:]
    out = []
    for cmd, a in zip(commands, answers):
        if isinstance(cmd, tuple) and cmd[0]["op"] == "mrope_step":
            out.append({**a.tensors, "q": cmd[1]["q"][0], "k": cmd[1]["k"][0], "dtypes": a.dtypes})
    return out


# --- the capability at hello -------------------------------------------------------------------------------------
def test_the_claim_is_answered_to_a_1_10_judge_and_left_out_for_a_1_9_one():
    new = session(NumpyReplay(), HELLO_1_10)[0].msg
    assert new["version"] == [1, 11]  # the kit answers its own version
    assert new["capabilities"]["mrope"] == {"models": list(MROPE_MODELS), "pad_positions": "zero"}
    assert "mrope.rotary" in new["capabilities"]["fixture_ops"]
    old = session(NumpyReplay(), HELLO_1_9)[0].msg
    assert old["ok"] and "mrope" not in old["capabilities"]
    assert "mrope.rotary" not in old["capabilities"]["fixture_ops"]
    assert "conv.commit" in old["capabilities"]["fixture_ops"]
    # pad_positions defaults to "zero" in the answer
    assert session(Recorder(), HELLO_1_10)[0].msg["capabilities"]["mrope"] == {"models": ["qwen2-vl", "qwen3.5"],
                                                                              "pad_positions": "zero"}
    assert "mrope" not in session(Fake(), HELLO_1_10)[0].msg["capabilities"]  # never claimed by default


@pytest.mark.parametrize("claim,field", [
    (["qwen2-vl"], "capabilities.mrope"),
    ({"models": ["qwen2-vl"], "pad": "zero"}, "capabilities.mrope.pad"),
    ({}, "capabilities.mrope.models"),
    ({"models": []}, "capabilities.mrope.models"),
    ({"models": ["qwen2-vl", "qwen2-vl"]}, "capabilities.mrope.models"),
    ({"models": ["qwen2_vl"]}, "capabilities.mrope.models"),
    ({"models": "qwen2-vl"}, "capabilities.mrope.models"),
    ({"models": ["qwen3.5"], "pad_positions": "skip"}, "capabilities.mrope.pad_positions"),
])
def test_a_malformed_claim_is_refused_naming_its_field_whatever_the_judge_speaks(claim, field):
    for hello in (HELLO_1_10, HELLO_1_9):
        a = session(Recorder(claim), hello)[0].msg
        assert not a["ok"] and a["error"]["field"] == field, (claim, a)


def test_a_claim_needs_the_five_methods():
    class Partial(Fake):
        def capabilities(self):
            return {"mrope": {"models": ["qwen3.5"]}}

        def mrope_step(self, rows, q, k):
            return None

    a = session(Partial(), HELLO_1_10)[0].msg
    assert a["error"]["field"] == "capabilities.mrope" and "mrope_setup" in a["error"]["message"]


def test_mrope_rotary_in_fixture_ops_is_left_out_for_a_1_9_judge_only():
    class Rotary(Recorder):
        def capabilities(self):
            return {"fixture_ops": ["mrope.rotary"]}

        def fixture(self, op, config, inputs):
            return {}

    assert session(Rotary(), HELLO_1_10)[0].msg["capabilities"]["fixture_ops"] == ["mrope.rotary"]
    assert session(Rotary(), HELLO_1_9)[0].msg["capabilities"]["fixture_ops"] == []
    fx = rk.load_fixture(os.path.join(FIXTURES, "golden", "mrope", "mrope__qwen3.5.safetensors"))
    a = session(Rotary(), HELLO_1_9, fixture_cmd(fx))[1].msg
    assert not a["ok"] and a["error"]["field"] == "fixture_op"


# --- the commands: claim, order, fields --------------------------------------------------------------------------
def test_a_command_is_refused_naming_mrope_unless_claimed_to_this_judge():
    for target, hello in ((Fake(), HELLO_1_10), (Recorder(), HELLO_1_9)):
        a = session(target, hello, setup(), admit(0, TEXT_IMAGE_TEXT), step([(0, "prefill", 2)]))
        assert [x.msg["error"]["field"] for x in a[1:]] == ["mrope", "mrope", "mrope"], [x.msg for x in a]
    assert Recorder().calls == []


def test_the_commands_need_mrope_setup_and_no_lifecycle_setup():
    t = Recorder()
    a = session(t, HELLO_1_10, admit(0, TEXT_IMAGE_TEXT), setup(), admit(0, TEXT_IMAGE_TEXT))
    assert a[1].msg["error"] == {"field": "op", "message": "'mrope_admit' before a successful 'mrope_setup'"}
    assert a[2].msg["ok"] and a[3].msg["ok"]
    assert [c[0] for c in t.calls] == ["setup", "admit"]
    assert t.calls[0][1:] == (PRESETS["qwen2-vl"], QH, KH)
    assert t.calls[1][1:] == (0, TEXT_IMAGE_TEXT)


@pytest.mark.parametrize("edit,field", [
    (lambda c: c["config"].update(rotary_dim=127), "config.rotary_dim"),
    (lambda c: c["config"].update(rotary_dim=256), "config.rotary_dim"),
    (lambda c: c["config"].update(mrope_section=[16, 24, 23]), "config.mrope_section"),
    (lambda c: c["config"].update(mrope_section=[16, 24]), "config.mrope_section"),
    (lambda c: c["config"].update(video_rule="per_frame"), "config.video_rule"),
    (lambda c: c["config"].update(model="qwen3-vl"), "config.model"),  # not claimed by the Recorder
    (lambda c: c["config"].update(interleaved=0), "config.interleaved"),
    (lambda c: c["config"].update(theta=-1.0), "config.theta"),
    (lambda c: c["config"].update(theta=True), "config.theta"),
    (lambda c: c["config"].update(spatial_merge_size=0), "config.spatial_merge_size"),
    (lambda c: c["config"].update(tokens_per_second="2"), "config.tokens_per_second"),
    (lambda c: c["config"].update(partial_rotary_factor=1.0), "config.partial_rotary_factor"),
    (lambda c: c["config"].pop("head_dim"), "config.head_dim"),
    (lambda c: c.pop("config"), "config"),
    (lambda c: c.update(q_heads=0), "q_heads"),
    (lambda c: c.pop("k_heads"), "k_heads"),
])
def test_mrope_setup_is_parsed_strictly(edit, field):
    t = Recorder()
    cmd = setup()
    cmd["config"] = dict(cmd["config"])
    edit(cmd)
    a = session(t, HELLO_1_10, cmd, admit(0, TEXT_IMAGE_TEXT))
    assert not a[1].msg["ok"] and a[1].msg["error"]["field"] == field, a[1].msg
    assert a[2].msg["error"]["field"] == "op"  # a failed mrope_setup leaves no case behind
    assert t.calls == []


VIDEO = {"type": "video", "grid": [2, 4, 4], "second_per_grid": 1.0}


@pytest.mark.parametrize("model,req,segments,field", [
    ("qwen2-vl", -1, TEXT_IMAGE_TEXT, "req"),
    ("qwen2-vl", 0, [], "segments"),
    ("qwen2-vl", 0, {"type": "text", "length": 2}, "segments"),
    ("qwen2-vl", 0, [{"type": "text", "length": 0}], "segments"),  # no token
    ("qwen2-vl", 0, [{"type": "txt", "length": 2}], "segments[0].type"),
    ("qwen2-vl", 0, [{"type": "text", "length": -1}], "segments[0].length"),
    ("qwen2-vl", 0, [{"type": "text", "length": 2, "extra": 1}], "segments[0].extra"),
    ("qwen2-vl", 0, [{"type": "text", "length": 1}, {"type": "image", "grid": [1, 4, 5]}], "segments[1].grid"),
    ("qwen2-vl", 0, [{"type": "image", "grid": [0, 4, 4]}], "segments[0].grid"),
    ("qwen2-vl", 0, [{"type": "image", "grid": [1, 4]}], "segments[0].grid"),
    ("qwen2-vl", 0, [{"type": "image", "grid": [1, 4, 4], "fps": 2.0}], "segments[0].fps"),
    ("qwen2-vl", 0, [{"type": "text", "length": 1}, {**VIDEO, "frame_text": [1, 1]}], "segments[1].frame_text"),
    ("qwen2.5-vl", 0, [{"type": "video", "grid": [2, 4, 4]}], "segments[0].second_per_grid"),
    ("qwen2.5-vl", 0, [{**VIDEO, "fps": 2.0}], "segments[0].fps"),
    ("qwen2.5-vl", 0, [{**VIDEO, "second_per_grid": -0.5}], "segments[0].second_per_grid"),
    ("qwen3.5", 0, [{**VIDEO, "frame_text": [1]}], "segments[0].frame_text"),
    ("qwen3.5", 0, [{**VIDEO, "frame_text": [1, -1]}], "segments[0].frame_text[1]"),
])
def test_mrope_admit_is_parsed_strictly(model, req, segments, field):
    t = Recorder({"models": list(MROPE_MODELS)})
    a = session(t, HELLO_1_10, setup(model), admit(req, segments))
    assert not a[2].msg["ok"] and a[2].msg["error"]["field"] == field, a[2].msg
    assert [c[0] for c in t.calls] == ["setup"]


def test_a_live_request_is_not_admitted_twice_and_a_released_one_may_come_back():
    t = Recorder()
    a = session(t, HELLO_1_10, setup(), admit(0, TEXT_IMAGE_TEXT), admit(0, TEXT_IMAGE_TEXT), release(0),
                release(0), admit(0, TEXT_IMAGE_TEXT))
    assert [x.msg["ok"] for x in a[2:]] == [True, False, True, False, True]
    assert a[3].msg["error"]["field"] == "req" and a[5].msg["error"]["field"] == "req"
    assert [c[0] for c in t.calls] == ["setup", "admit", "release", "admit"]


def _edited(rows, edit):
    msg, tensors = step(rows)
    edit(msg, tensors)
    return msg, tensors


@pytest.mark.parametrize("rows,edit,field", [
    ([(0, "prefill", 2), ("pad", 2), (1, "prefill", 1)], None, "rows[1].kind"),          # pad not last
    ([(0, "prefill", 2), (1, "prefill", 1)], lambda m, t: m["rows"][1].update(kind="chunk"), "rows[1].kind"),
    ([(0, "prefill", 9)], None, "rows[0].tokens"),                                         # beyond the prompt (8)
    ([(0, "prefill", 2)], lambda m, t: m["rows"][0].update(tokens=0), "rows[0].tokens"),
    ([(0, "prefill", 2)], lambda m, t: m["rows"][0].update(tokens=2.0), "rows[0].tokens"),
    ([(0, "prefill", 2), (0, "prefill", 1)], None, "rows[1].req"),                        # twice in a step
    ([(7, "prefill", 2)], None, "rows[0].req"),                                            # not live
    ([(0, "prefill", 2)], lambda m, t: m["rows"][0].pop("req"), "rows[0].req"),
    ([(0, "verify", 2)], None, "rows[0].kind"),                                            # prompt not computed
    ([(0, "decode", 1)], None, "rows[0].kind"),
    ([(0, "prefill", 2), ("pad", 2)], lambda m, t: m["rows"][1].update(req=0), "rows[1].req"),
    ([(0, "prefill", 2), ("pad", 2)], lambda m, t: m["rows"][1].update(tokens=0), "rows[1].tokens"),
    ([(0, "prefill", 2)], lambda m, t: m["rows"][0].update(slot=0), "rows[0].slot"),       # not an MRoPE row key
    ([(0, "prefill", 2)], lambda m, t: m.update(tokens=3), "tokens"),
    ([(0, "prefill", 2)], lambda m, t: m.pop("tokens"), "tokens"),
    ([(0, "prefill", 2)], lambda m, t: m.update(rows={}), "rows"),
    ([(0, "prefill", 2)], lambda m, t: t.update(q=(t["q"][0], "BF16")), "q"),
    ([(0, "prefill", 2)], lambda m, t: t.update(k=(t["k"][0][:, :, :64], "F32")), "k"),
    ([(0, "prefill", 2)], lambda m, t: t.update(k=(np.zeros((2, 2, 128), np.float32), "F32")), "k"),  # k_heads 1
    ([(0, "prefill", 2)], lambda m, t: t.pop("q"), "q"),
])
def test_mrope_step_is_parsed_strictly(rows, edit, field):
    t = Recorder()
    cmd = _edited(rows, edit or (lambda m, t: None))
    a = session(t, HELLO_1_10, setup(), admit(0, TEXT_IMAGE_TEXT), admit(1, TEXT_IMAGE_TEXT), cmd)
    assert not a[4].msg["ok"] and a[4].msg["error"]["field"] == field, a[4].msg
    assert "step" not in [c[0] for c in t.calls]


def test_decode_is_one_token_and_rows_reach_the_target_with_their_offsets():
    t = Recorder()
    a = session(t, HELLO_1_10, setup(), admit(0, TEXT_IMAGE_TEXT), admit(1, [{"type": "text", "length": 3}]),
                step([(1, "prefill", 3), (0, "prefill", 8), ("pad", 5)]), step([(0, "decode", 2)]),
                step([(0, "decode", 1), (1, "verify", 3)]))
    ok(a[:5])
    assert a[5].msg["error"]["field"] == "rows[0].tokens" and a[6].msg["ok"]
    steps = [c for c in t.calls if c[0] == "step"]
    assert steps[0][1] == [MropeRow("prefill", 3, 0, 1), MropeRow("prefill", 8, 3, 0), MropeRow("pad", 5, 11)]
    assert steps[1][1] == [MropeRow("decode", 1, 0, 0), MropeRow("verify", 3, 1, 1)]
    assert steps[0][2].shape == (16, QH, 128) and steps[0][3].shape == (16, KH, 128)
    # the answer's tensors: names, dtypes and shapes of the protocol
    assert a[4].dtypes == {"positions": "I64", "index": "I64", "q_rot": "F32", "k_rot": "F32"}
    assert a[4].tensors["positions"].shape == (3, 16) and a[4].tensors["index"].shape == (16,)


def test_a_step_with_verify_rows_is_followed_by_its_accept_before_anything_else():
    t = Recorder()
    prompt = [{"type": "text", "length": 2}]
    base = (HELLO_1_10, setup(), admit(0, prompt), admit(1, prompt), step([(0, "prefill", 2), (1, "prefill", 2)]),
            step([(0, "verify", 3), (1, "verify", 2)]))
    cases = [
        (admit(2, prompt), "op"), (release(0), "op"), (step([(0, "decode", 1)]), "op"),
        (accept((0, 2)), "rows"), (accept((0, 2), (1, 1), (2, 1)), "rows[2].req"),
        (accept((0, 2), (0, 1)), "rows[1].req"),
        (accept((0, 4), (1, 1)), "rows[0].accepted"), (accept((0, 0), (1, 1)), "rows[0].accepted"),
        ({"op": "mrope_accept", "rows": [{"req": 0}]}, "rows[0].accepted"),
        ({"op": "mrope_accept", "rows": [{"req": 0, "accepted": 1, "T": 3}]}, "rows[0].T"),
    ]
    for cmd, field in cases:
        a = session(t, *base, cmd)
        assert not a[6].msg["ok"] and a[6].msg["error"]["field"] == field, (cmd, a[6].msg)
    t.calls = []
    ok(session(t, *base, accept((1, 2), (0, 3)), step([(0, "decode", 1)]), release(0)))
    assert [c[0] for c in t.calls][-3:] == ["accept", "step", "release"]
    assert t.calls[-3] == ("accept", [(1, 2), (0, 3)]) and t.calls[-1] == ("release", 0)  # in the judge's order
    a = session(t, *base[:-1], accept((0, 1)))  # nothing waits for an accept
    assert a[5].msg["error"]["field"] == "op"
    a = session(t, *base, setup(), admit(0, prompt))  # a new case drops the waiting accept with everything else
    ok(a)


def test_the_answer_is_converted_strictly():
    class Answers(Recorder):
        def mrope_step(self, rows, q, k):
            return self.answer(q.shape[0], q, k)

    cases = [
        (lambda n, q, k: (np.zeros((3, n)), np.zeros(n, np.int64), q, k), "positions"),  # floats
        (lambda n, q, k: (np.zeros((3, n), np.int64), np.zeros((1, n), np.int64), q, k), "index"),
        (lambda n, q, k: (np.zeros((3, n), np.int64), np.zeros(n, np.int64), q[:, :1], k), "q_rot"),
        (lambda n, q, k: (np.zeros((3, n), np.int64), np.zeros(n, np.int64), q, k.astype(np.int32)), "k_rot"),
        (lambda n, q, k: (np.zeros((3, n), np.int64), np.zeros(n, np.int64), q), "positions"),
    ]
    for answer, field in cases:
        t = Answers()
        t.answer = answer
        a = session(t, HELLO_1_10, setup(), admit(0, TEXT_IMAGE_TEXT), step([(0, "prefill", 2)]),
                    step([(0, "prefill", 7)]))
        assert not a[3].msg["ok"] and a[3].msg["error"]["field"] == field, a[3].msg
        # the refused answer moved nothing: 7 of the 8 prompt tokens are still left, so the target is asked again
        assert not a[4].msg["ok"] and a[4].msg["error"]["field"] == field, a[4].msg
    with pytest.raises(ConversionError, match="outside the range of I64"):
        to_wire(np.array([2 ** 63], np.uint64), "I64", (1,), "index")
    assert to_wire(np.array([1, -1], np.int32), "I64", (2,), "index").dtype == np.int64


# --- the NumPy example: hand-computed positions ------------------------------------------------------------------
def test_text_image_text_on_qwen2_vl_has_delta_minus_2():
    """text 2, a [1, 4, 4] image (2 x 2 placeholders at t = 2, h = 2 + hh, w = 2 + ww), text 2 from cur = 4:
    max 5, delta = 5 + 1 - 8 = -2, so the token after the prompt (index 8) sits at 6."""
    s = step_answers(NumpyReplay(), admit(0, TEXT_IMAGE_TEXT), step([(0, "prefill", 8)]), step([(0, "decode", 1)]))
    assert s[0]["positions"].tolist() == [[0, 1, 2, 2, 2, 2, 4, 5], [0, 1, 2, 2, 3, 3, 4, 5], [0, 1, 2, 3, 2, 3, 4, 5]]
    assert s[0]["index"].tolist() == list(range(8))
    assert s[1]["positions"].tolist() == [[6], [6], [6]] and s[1]["index"].tolist() == [8]
    assert s[0]["dtypes"] == {"positions": "I64", "index": "I64", "q_rot": "F32", "k_rot": "F32"}


def test_a_chunk_ending_inside_the_image_keeps_its_base():
    s = step_answers(NumpyReplay(), admit(0, TEXT_IMAGE_TEXT), step([(0, "prefill", 3)]), step([(0, "prefill", 5)]),
                     step([(0, "decode", 1)]))
    assert np.concatenate([s[0]["positions"], s[1]["positions"]], axis=1).tolist() == \
        [[0, 1, 2, 2, 2, 2, 4, 5], [0, 1, 2, 2, 3, 3, 4, 5], [0, 1, 2, 3, 2, 3, 4, 5]]
    assert s[1]["index"].tolist() == [3, 4, 5, 6, 7] and s[2]["positions"][:, 0].tolist() == [6, 6, 6]


def test_verify_accept_and_decode_move_the_cursor_by_the_accepted_count():
    """After the prompt (C = 8, delta -2): verify 3 covers indices 8..10 at 6..8; accepting 2 puts C at 10, so the
    next verify of 2 covers 10, 11 at 8, 9; accepting 1 and a decode: index 11 at 9."""
    s = step_answers(NumpyReplay(), admit(0, TEXT_IMAGE_TEXT), step([(0, "prefill", 8)]), step([(0, "verify", 3)]),
                     accept((0, 2)), step([(0, "verify", 2)]), accept((0, 1)), step([(0, "decode", 1)]))
    assert [a["index"].tolist() for a in s[1:]] == [[8, 9, 10], [10, 11], [11]]
    assert [a["positions"][0].tolist() for a in s[1:]] == [[6, 7, 8], [8, 9], [9]]
    assert all((a["positions"] == a["positions"][0]).all() for a in s[1:])  # text: one coordinate on all axes


def test_padding_gets_position_0_index_minus_1_and_is_copied_bit_for_bit():
    s = step_answers(NumpyReplay(), admit(0, TEXT_IMAGE_TEXT), step([(0, "prefill", 5), ("pad", 3)]))[0]
    assert s["positions"][:, 5:].tolist() == [[0] * 3] * 3 and s["index"].tolist() == [0, 1, 2, 3, 4, -1, -1, -1]
    for name in ("q", "k"):
        assert np.array_equal(s[name + "_rot"][5:].view(np.uint32), s[name][5:].view(np.uint32))
        assert not np.array_equal(s[name + "_rot"][1:5], s[name][1:5])  # real tokens rotate


def test_the_rotation_by_hand_split_half_pairs_chunked_axes_and_copied_dims():
    """head_dim 6, R = 4, section [1, 1, 0] chunked: frequency 0 (inv_freq 1) reads t, frequency 1 (inv_freq
    100^(-1/2) = 0.1) reads h; pairs (x0, x2) and (x1, x3); dims 4, 5 copied."""
    cfg = {"rotary_dim": 4, "theta": 100.0, "mrope_section": [1, 1, 0], "interleaved": False}
    x = np.array([[[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]]], np.float32)
    pos = np.array([[3], [7], [9]])
    a0, a1 = 3.0, 0.7
    want = [1 * np.cos(a0) - 3 * np.sin(a0), 2 * np.cos(a1) - 4 * np.sin(a1),
            3 * np.cos(a0) + 1 * np.sin(a0), 4 * np.cos(a1) + 2 * np.sin(a1), 5.0, 6.0]
    assert rotate(x, pos, cfg)[0, 0].tolist() == np.array(want, np.float32).tolist()
    inter = {**cfg, "rotary_dim": 6, "mrope_section": [1, 1, 1], "interleaved": True}  # t, h, w
    x = np.ones((1, 1, 6), np.float32)
    angles = np.array([3.0, 7 * 100.0 ** (-1 / 3), 9 * 100.0 ** (-2 / 3)])
    want = np.concatenate([np.cos(angles) - np.sin(angles), np.cos(angles) + np.sin(angles)]).astype(np.float32)
    assert rotate(x, pos, inter)[0, 0].tolist() == want.tolist()


def test_a_ragged_permuted_step_with_padding_matches_the_positions_from_scratch():
    """The spec's example on qwen3.5: request 1 (text 9) before request 0 (text 5, a 4 x 6 image, text 3) in the
    first step, request 0's chunk ending inside the image; then request 0's last 10 tokens beside request 1's
    verify window of 4, accepted 2, and request 1's next window at index 11."""
    segs0 = [{"type": "text", "length": 5}, {"type": "image", "grid": [1, 4, 6]}, {"type": "text", "length": 3}]
    segs1 = [{"type": "text", "length": 9}]
    m = "qwen3.5"
    s = step_answers(NumpyReplay(), admit(0, segs0), admit(1, segs1),
                     step([(1, "prefill", 9), (0, "prefill", 4), ("pad", 3)], m),
                     step([(0, "prefill", 10), (1, "verify", 4), ("pad", 2)], m), accept((1, 2)),
                     step([(1, "verify", 2), (0, "decode", 1)], m), accept((1, 2)), model=m)
    table0 = prompt_table(segs0, PRESETS[m])  # 14 tokens: 0..4, the image at cur 5 (t 5, h 5..6, w 5..7), 8..10
    assert table0.tolist() == [[0, 1, 2, 3, 4, 5, 5, 5, 5, 5, 5, 8, 9, 10], [0, 1, 2, 3, 4, 5, 5, 5, 6, 6, 6, 8, 9, 10],
                               [0, 1, 2, 3, 4, 5, 6, 7, 5, 6, 7, 8, 9, 10]]
    first, second, third = s
    assert first["positions"][:, :9].tolist() == [list(range(9))] * 3
    assert first["positions"][:, 9:13].tolist() == table0[:, :4].tolist()
    assert first["index"].tolist() == list(range(9)) + [0, 1, 2, 3] + [-1] * 3
    assert second["positions"][:, :10].tolist() == table0[:, 4:].tolist()
    assert second["positions"][:, 10:14].tolist() == [[9, 10, 11, 12]] * 3
    assert second["index"][10:14].tolist() == [9, 10, 11, 12]
    assert third["index"].tolist() == [11, 12, 14] and third["positions"].tolist() == [[11, 12, 11]] * 3  # delta -3
    for a in s:
        real = a["index"] >= 0
        for name in ("q", "k"):
            want = rotate(a[name][real], a["positions"][:, real], PRESETS[m])
            assert np.array_equal(a[name + "_rot"][real], want)
            assert np.array_equal(a[name + "_rot"][real][..., 64:], a[name][real][..., 64:])  # dims >= R copied


def test_videos_under_each_temporal_rule():
    """The docs' examples (docs/mrope.md section 8): Qwen2.5-VL scaled time and Qwen3-VL frames with their text."""
    scaled = [{"type": "text", "length": 2}, {"type": "video", "grid": [3, 4, 4], "fps": 2},
              {"type": "text", "length": 1}, {"type": "video", "grid": [4, 2, 2], "second_per_grid": 0.25},
              {"type": "text", "length": 1}]
    s = step_answers(NumpyReplay(), admit(3, scaled), step([(3, "prefill", 20)], "qwen2.5-vl"),
                     step([(3, "decode", 1)], "qwen2.5-vl"), model="qwen2.5-vl")
    assert s[0]["positions"][0].tolist() == [0, 1, 2, 2, 2, 2, 4, 4, 4, 4, 6, 6, 6, 6, 7, 8, 8, 9, 9, 10]
    assert s[1]["positions"][:, 0].tolist() == [11] * 3  # delta -9
    frames = [{"type": "text", "length": 1}, {"type": "video", "grid": [2, 4, 4], "frame_text": [3, 3]},
              {"type": "text", "length": 2}]
    s = step_answers(NumpyReplay(), admit(0, frames), step([(0, "prefill", 17)], "qwen3-vl"), model="qwen3-vl")
    assert s[0]["positions"].tolist() == [[0, 1, 2, 3, 4, 4, 4, 4, 6, 7, 8, 9, 9, 9, 9, 11, 12],
                                          [0, 1, 2, 3, 4, 4, 5, 5, 6, 7, 8, 9, 9, 10, 10, 11, 12],
                                          [0, 1, 2, 3, 4, 5, 4, 5, 6, 7, 8, 9, 10, 9, 10, 11, 12]]


# --- the seeded faults -------------------------------------------------------------------------------------------
TEXT = [{"type": "text", "length": 6}]
# A text-only single request: chunked prefill, a fully accepted verify, decode, no padding: no fault may matter.
QUIET = (admit(0, TEXT), step([(0, "prefill", 4)], seed=1), step([(0, "prefill", 2)], seed=2),
         step([(0, "verify", 3)], seed=3), accept((0, 3)), step([(0, "decode", 1)], seed=4),
         step([(0, "verify", 2)], seed=5), accept((0, 2)))
TWO = [{"type": "text", "length": 3}]
EXPOSE = {
    # the first chunk (3 tokens) ends before the image: its delta is 0, the prompt's -2
    "mrope_delta_from_chunk": (admit(0, TEXT_IMAGE_TEXT), step([(0, "prefill", 3)]), step([(0, "prefill", 5)]),
                               step([(0, "decode", 1)])),
    "mrope_verify_advances_T": (admit(0, TEXT), step([(0, "prefill", 6)]), step([(0, "verify", 4)]), accept((0, 1)),
                                step([(0, "decode", 1)])),
    "mrope_pad_takes_last_delta": (admit(0, TEXT), step([(0, "prefill", 6), ("pad", 2)])),
    # request 0 (text, delta 0) admitted before request 1 (image, delta -2); the rows come permuted, then request 1
    # alone (request 0 sits out)
    "mrope_delta_by_batch_row": (admit(0, TWO), admit(1, TEXT_IMAGE_TEXT),
                                 step([(1, "prefill", 8), (0, "prefill", 3)]),
                                 step([(1, "decode", 1), (0, "decode", 1)]),
                                 step([(1, "decode", 1)])),
    "mrope_index_from_rope": (admit(0, TEXT_IMAGE_TEXT), step([(0, "prefill", 8)]), step([(0, "decode", 1)])),
}
# What each fault may change (tensors of the answers) on its exposing case: nothing else differs.
CHANGES = {"mrope_delta_from_chunk": {"positions", "q_rot", "k_rot"},
           "mrope_verify_advances_T": {"positions", "index", "q_rot", "k_rot"},
           "mrope_pad_takes_last_delta": {"positions"},
           "mrope_delta_by_batch_row": {"positions", "q_rot", "k_rot"},
           "mrope_index_from_rope": {"index"}}


def _differs(fault, commands):
    good, bad = step_answers(NumpyReplay(), *commands), step_answers(NumpyReplay(fault), *commands)
    return {name for g, b in zip(good, bad) for name in ("positions", "index", "q_rot", "k_rot")
            if not np.array_equal(g[name], b[name])}, good, bad


def test_every_mrope_fault_has_an_exposing_case():
    assert sorted(EXPOSE) == sorted(MROPE_FAULTS) == sorted(CHANGES)


@pytest.mark.parametrize("fault", MROPE_FAULTS)
def test_each_fault_changes_what_it_says_on_its_case_and_nothing_on_a_quiet_text_only_request(fault):
    changed, good, bad = _differs(fault, EXPOSE[fault])
    assert changed == CHANGES[fault], changed
    assert _differs(fault, QUIET)[0] == set()


def test_what_each_fault_gets_wrong_by_hand():
    _, good, bad = _differs("mrope_delta_from_chunk", EXPOSE["mrope_delta_from_chunk"])
    assert good[2]["positions"][0].tolist() == [6] and bad[2]["positions"][0].tolist() == [8]  # delta 0, not -2
    assert good[1]["positions"].tolist() == bad[1]["positions"].tolist()  # the prompt's own tokens are right
    _, good, bad = _differs("mrope_verify_advances_T", EXPOSE["mrope_verify_advances_T"])
    assert good[2]["index"].tolist() == [7] and bad[2]["index"].tolist() == [10]
    _, good, bad = _differs("mrope_pad_takes_last_delta", EXPOSE["mrope_pad_takes_last_delta"])
    assert bad[0]["positions"][:, 6:].tolist() == [[6, 7]] * 3 and good[0]["positions"][:, 6:].tolist() == [[0, 0]] * 3
    assert bad[0]["index"][6:].tolist() == [-1, -1]
    _, good, bad = _differs("mrope_delta_by_batch_row", EXPOSE["mrope_delta_by_batch_row"])
    assert good[1]["positions"][0].tolist() == [6, 3] and bad[1]["positions"][0].tolist() == [8, 1]  # swapped deltas
    assert good[2]["positions"][0].tolist() == [7] and bad[2]["positions"][0].tolist() == [9]  # row 0 reads req 0's
    _, good, bad = _differs("mrope_index_from_rope", EXPOSE["mrope_index_from_rope"])
    assert bad[0]["index"].tolist() == [0, 1, 2, 2, 2, 2, 4, 5] and bad[1]["index"].tolist() == [6]
    assert good[1]["index"].tolist() == [8]


def test_faults_that_matter_even_for_text_only_requests():
    """A text-only request has delta 0: only the cursor and the padding can go wrong for it."""
    quiet_but = {"mrope_verify_advances_T": EXPOSE["mrope_verify_advances_T"],
                 "mrope_pad_takes_last_delta": EXPOSE["mrope_pad_takes_last_delta"]}
    for fault in MROPE_FAULTS:
        for name, commands in quiet_but.items():
            assert bool(_differs(fault, commands)[0]) == (fault == name), (fault, name)


# --- the fixture op mrope.rotary ---------------------------------------------------------------------------------
MROPE_FIXTURES = [p for d in ("golden/mrope", "peer/transformers") for p in rk.find_fixtures(os.path.join(FIXTURES, d))
                  if rk.read_op(p) == "mrope.rotary"]


def test_the_committed_golden_fixtures_are_there():
    golden = [os.path.basename(p) for p in MROPE_FIXTURES if "golden" in p]
    assert golden == sorted(f"mrope__{m}.safetensors" for m in MROPE_MODELS)


@pytest.mark.parametrize("path", MROPE_FIXTURES, ids=os.path.basename)
def test_mrope_rotary_reproduces_the_committed_fixtures_through_the_protocol(path):
    fx = rk.load_fixture(path)
    a = session(NumpyReplay(), HELLO_1_10, fixture_cmd(fx))[1]
    assert a.msg["ok"], a.msg
    assert a.dtypes == {"out.positions": "I64", "out.delta": "I64", "out.prompt_len": "I64", "out.q_rot": "F32",
                        "out.k_rot": "F32"}
    result = fx.compare_outputs(a.tensors)  # stored tolerances: exact integers, the rotary bound for q and k
    assert result.ok, result.summary()
    assert [t.tolerance.kind for t in result.tensors] == ["exact", "allclose", "exact", "exact", "allclose"]
    for name in ("positions", "delta", "prompt_len"):
        assert np.array_equal(a.tensors["out." + name], fx.tensors["out." + name])
    assert fx.check_target(NumpyReplay()).ok  # in process, as Fixture.check_target judges it


# --- prefix hits (cached prompt tokens) and empty steps --------------------------------------------------------
def test_a_cached_prefix_starts_the_first_chunk_there_and_keeps_the_positions_of_its_indices():
    """text 3000 + image [1,4,4] + text 2 on qwen2-vl, admitted with 2998 tokens cached: the first chunk is the
    index range [2998, 3004): text 2998, 2999, the image's (3000..3001) block, then decode at index 3005 + delta."""
    segs = [{"type": "text", "length": 3000}, {"type": "image", "grid": [1, 4, 4]}, {"type": "text", "length": 2}]
    a = session(NumpyReplay(), HELLO_1_10, setup(), {**admit(0, segs), "cached": 2998}, step([(0, "prefill", 8)]),
                step([(0, "decode", 1)]))
    assert all(x.msg["ok"] for x in a), [x.msg for x in a]
    pos, index = a[3].tensors["positions"], a[3].tensors["index"]
    assert index.tolist() == list(range(2998, 3006))
    assert pos[0].tolist() == [2998, 2999, 3000, 3000, 3000, 3000, 3002, 3003]
    assert pos[2].tolist() == [2998, 2999, 3000, 3001, 3000, 3001, 3002, 3003]
    # delta = 3003 + 1 - 3006 = -2: the first generated token (index 3006) sits at 3004
    assert a[4].tensors["index"].tolist() == [3006] and a[4].tensors["positions"][:, 0].tolist() == [3004] * 3


@pytest.mark.parametrize("cached,field", [(-1, "cached"), (8, "cached"), (9, "cached"), ("2", "cached")])
def test_cached_is_refused_outside_the_prompt_naming_the_field(cached, field):
    a = session(NumpyReplay(), HELLO_1_10, setup(), {**admit(0, TEXT_IMAGE_TEXT), "cached": cached})
    assert not a[2].msg["ok"] and a[2].msg["error"]["field"] == field, a[2].msg


def test_an_empty_step_is_refused_naming_rows():
    a = session(NumpyReplay(), HELLO_1_10, setup(), admit(0, TEXT_IMAGE_TEXT), step([]))
    assert not a[3].msg["ok"] and a[3].msg["error"]["field"] == "rows", a[3].msg
