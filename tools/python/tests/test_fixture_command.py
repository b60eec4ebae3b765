"""The protocol's `fixture` command on the kit side: what hello advertises, how serve() answers (names, dtypes,
shapes exactly as the fixture's out.* tensors; misfits refused naming the tensor), and the in-process check
(Fixture.check_target) of the NumPy example's fixture ops, correct and with its seeded fault."""
import io
import os
import sys

import numpy as np
import pytest

from conftest import FIXTURES, HERE
import replayssm_kit as rk
from replayssm_kit.protocol import encode_frame, read_frame
from replayssm_kit.target import FIXTURE_OPS, Target, serve

sys.path.insert(0, os.path.join(os.path.dirname(HERE), "examples"))
from numpy_replay import NumpyReplay  # noqa: E402

GOLDEN = os.path.join(FIXTURES, "golden")
HELLO = {"op": "hello", "protocol": "replayssm.target", "version": [1, 1]}


def _fx(rel):
    return rk.load_fixture(os.path.join(GOLDEN, rel))


def fixture_cmd(fx):
    """The command frame the judge sends (conformance/exec/exec_target.cpp, run_fixture)."""
    tensors = {k: (v, fx.dtypes[k]) for k, v in fx.tensors.items() if not k.startswith("out.")}
    outputs = {k: {"dtype": fx.dtypes[k], "shape": list(v.shape)} for k, v in fx.tensors.items() if k.startswith("out.")}
    return {"op": "fixture", "fixture_op": fx.op, "config": fx.config, "outputs": outputs}, tensors


def session(target, *commands):
    cin = io.BytesIO(b"".join(encode_frame(*c) if isinstance(c, tuple) else encode_frame(c) for c in commands))
    cout = io.BytesIO()
    assert serve(target, cin, cout) == 0
    cout.seek(0)
    answers = []
    while (f := read_frame(cout)) is not None:
        answers.append(f)
    return answers


class Lifecycle(Target):
    """A target without the fixture hook."""


class Answers(Target):
    """Answers whatever `self.out` says."""

    def __init__(self, out, caps=None):
        self.out, self.caps = out, caps or {}

    def capabilities(self):
        return self.caps

    def fixture(self, op, config, inputs):
        self.seen = (op, config, inputs)
        return self.out


def test_hello_advertises_the_fixture_ops_of_an_overridden_hook_only():
    assert session(Lifecycle(), HELLO)[0].msg["capabilities"]["fixture_ops"] == []
    assert session(NumpyReplay(), HELLO)[0].msg["capabilities"]["fixture_ops"] == list(FIXTURE_OPS)
    a = session(Answers({}, {"fixture_ops": ["recurrent"]}), HELLO)[0]
    assert a.msg["capabilities"]["fixture_ops"] == ["recurrent"]
    # claiming without the hook, or an op name that does not exist, is refused
    a = session(type("Claims", (Lifecycle,), {"capabilities": lambda self: {"fixture_ops": ["recurrent"]}})(), HELLO)[0]
    assert not a.msg["ok"] and a.msg["error"]["field"] == "capabilities.fixture_ops"
    a = session(Answers({}, {"fixture_ops": ["mtp-verify"]}), HELLO)[0]
    assert not a.msg["ok"] and "mtp-verify" in a.msg["error"]["message"]


def test_the_numpy_example_answers_a_fixture_with_its_outputs_in_their_dtypes_and_shapes():
    fx = _fx("tiny-gdn/tiny-gdn-f32act-bf16state__mtp_verify__T4.safetensors")
    a = session(NumpyReplay(), HELLO, fixture_cmd(fx), {"op": "shutdown"})
    assert a[1].msg["ok"], a[1].msg
    assert sorted(a[1].tensors) == ["out.o", "out.states"]
    assert a[1].dtypes == {"out.o": "F32", "out.states": "BF16"}
    result = fx.compare_outputs(a[1].tensors, tier="fp32", pad_outputs_zero=True)
    assert result.ok, result.summary()


@pytest.mark.parametrize("answer,field,says", [
    ({"out.o": np.zeros((12, 4, 8), np.float32)}, "out.state", "returned no such tensor"),
    ({"o": np.zeros((12, 4, 8), np.float32), "state": np.zeros((4, 8, 8), np.float32),
      "out.bonus": np.zeros(1, np.float32)}, "out.bonus", "not an output of this fixture"),
    ({"o": np.zeros((13, 4, 8), np.float32), "state": np.zeros((4, 8, 8), np.float32)}, "out.o", "has shape [13, 4, 8]"),
    ({"o": np.zeros((12, 4, 8), np.int32), "state": np.zeros((4, 8, 8), np.float32)}, "out.o", "has dtype int32"),
])
def test_misfit_answers_are_refused_naming_the_tensor(answer, field, says):
    fx = _fx("tiny-gdn/tiny-gdn__recurrent__T12.safetensors")
    target = Answers(answer)
    a = session(target, HELLO, fixture_cmd(fx))[1]
    assert not a.msg["ok"] and a.msg["error"]["field"] == field and says in a.msg["error"]["message"], a.msg
    op, config, inputs = target.seen
    assert op == "recurrent" and config == fx.config
    assert sorted(inputs) == sorted(k for k in fx.tensors if not k.startswith("out."))


def test_an_unclaimed_op_is_refused():
    fx = _fx("tiny-gdn/tiny-gdn__recurrent__T12.safetensors")
    a = session(Answers({}, {"fixture_ops": ["chunked"]}), HELLO, fixture_cmd(fx))[1]
    assert not a.msg["ok"] and a.msg["error"]["field"] == "fixture_op"


@pytest.mark.parametrize("path", rk.find_fixtures(os.path.join(GOLDEN, "tiny-kda"), ops=FIXTURE_OPS))
def test_the_numpy_example_passes_the_golden_fixtures_at_its_tier(path):
    result = rk.load_fixture(path).check_target(NumpyReplay())
    assert result.ok, result.summary()
    assert all(t.tier == "fp32" for t in result.tensors if t.stored is not None)


def test_the_seeded_replay_commit_fault_fails_every_fixture_with_n_above_zero_naming_the_worst_element():
    faulty = NumpyReplay("replay_commit_drops_last")
    for path in rk.find_fixtures(os.path.join(GOLDEN, "tiny-gdn"), ops="replay_commit"):
        result = rk.load_fixture(path).check_target(faulty)
        assert result.ok == path.endswith("_n0.safetensors"), result.summary()
        if not result.ok:
            assert "out.state: FAIL" in result.summary() and "worst@" in result.summary()
    for path in rk.find_fixtures(os.path.join(GOLDEN, "tiny-gdn"), ops=("recurrent", "mtp_batch")):
        assert rk.load_fixture(path).check_target(faulty).ok  # the other ops are untouched


def test_mtp_batch_pool_slots_no_row_writes_must_be_bitwise_unchanged_at_any_tier():
    fx = _fx("tiny-gdn/tiny-gdn__mtp_batch__B4_T4.safetensors")  # rows: slots 3, PAD, 0 (n = 0), 1
    good = NumpyReplay().fixture(fx.op, fx.config, fx.fixture_inputs())
    assert fx.compare_outputs(good, tier="bf16", pad_outputs_zero=False).ok
    bad = {k: np.array(v, copy=True) for k, v in good.items()}
    bad["out.pool"][0].reshape(-1)[5] = np.nextafter(bad["out.pool"][0].reshape(-1)[5], np.float32(np.inf))
    r = fx.compare_outputs(bad, tier="bf16", pad_outputs_zero=False)  # one ulp on the n = 0 slot
    assert not r.ok
    assert [t.name for t in r.tensors if not t.ok] == ["out.pool (slots no row writes: bitwise unchanged)"]
    written = [t for t in r.tensors if t.name == "out.pool (written slots)"][0]
    assert written.tolerance.atol < 1.0  # the written slots' scale, not the 1e30 marker's


def test_mtp_batch_pad_rows_are_exact_zeros_when_claimed_and_dont_care_otherwise():
    fx = _fx("tiny-kda/tiny-kda__mtp_batch__B4_T4.safetensors")  # row 1 is PAD
    assert int(fx.inputs["slot"][1]) == -1
    out = NumpyReplay().fixture(fx.op, fx.config, fx.fixture_inputs())
    out["out.o"][1, 2, 0, 3] = np.float32(1e-30)  # a PAD row's output, far below any tier's atol
    claimed = fx.compare_outputs(out, tier="fp32", pad_outputs_zero=True)
    assert [t.name for t in claimed.tensors if not t.ok] == ["out.o (PAD rows: exact zeros, claimed)"]
    assert fx.compare_outputs(out, tier="fp32", pad_outputs_zero=False).ok
    out["out.o"][1] = np.float32(7.0)
    assert fx.compare_outputs(out, tier="fp32", pad_outputs_zero=False).ok  # don't-care without the claim
