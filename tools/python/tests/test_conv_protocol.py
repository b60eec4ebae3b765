"""The conv fixture ops (conv.prefill, conv.update, conv.commit) through the target protocol (1.3): what hello
advertises to judges before and after 1.3, how serve() answers them (names, dtypes and shapes of the fixture's
out.* tensors; misfits refused naming the tensor), and the NumPy example (examples/numpy_conv_ops.py) through
the C++ judge: every committed conv fixture passes, and its seeded commit fault fails exactly the commits that
accept fewer tokens than the window, each naming out.state and its worst element. The judge part skips without
the CLI ($REPLAYSSM_CLI, `replayssm` on PATH, or this checkout's build/tools/replayssm)."""
import io
import os
import shlex
import subprocess
import sys

import numpy as np
import pytest

from conftest import FIXTURES, HERE
import replayssm_kit as rk
from replayssm_kit.protocol import encode_frame, read_frame
from replayssm_kit.target import CONV_FIXTURE_OPS, FIXTURE_OPS, Target, serve

sys.path.insert(0, os.path.join(os.path.dirname(HERE), "examples"))
from numpy_replay import NumpyReplay  # noqa: E402

CONV = os.path.join(FIXTURES, "conv")
EXAMPLE = os.path.join(os.path.dirname(HERE), "examples", "numpy_replay.py")
COMMAND = f"{shlex.quote(sys.executable)} {shlex.quote(EXAMPLE)}"
FAULT = "conv_commit_keeps_window_tail"


def hello(minor):
    return {"op": "hello", "protocol": "replayssm.target", "version": [1, minor]}


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


class Answers(Target):
    """Answers whatever `self.out` says, claiming `caps`."""

    def __init__(self, out, caps=None):
        self.out, self.caps = out, caps or {}

    def capabilities(self):
        return self.caps

    def fixture(self, op, config, inputs):
        self.seen = (op, config, inputs)
        return self.out


def _conv(rel):
    return rk.load_fixture(os.path.join(CONV, rel))


# --- the kit side ----------------------------------------------------------------------------------------------
def test_conv_ops_are_advertised_when_claimed_and_only_to_a_judge_speaking_1_3():
    everything = list(FIXTURE_OPS + CONV_FIXTURE_OPS)
    assert session(NumpyReplay(), hello(3))[0].msg["capabilities"]["fixture_ops"] == everything
    # a judge before 1.3 refuses op names it does not know: the conv ops are left out of the claim
    assert session(NumpyReplay(), hello(2))[0].msg["capabilities"]["fixture_ops"] == list(FIXTURE_OPS)
    # overriding fixture() without listing them claims the golden ops only (it was written for those)
    assert session(Answers({}), hello(3))[0].msg["capabilities"]["fixture_ops"] == list(FIXTURE_OPS)
    a = session(Answers({}, {"fixture_ops": ["conv.commit", "conv.commit"]}), hello(3))[0]
    assert not a.msg["ok"] and a.msg["error"]["field"] == "capabilities.fixture_ops" and "twice" in a.msg["error"]["message"]
    a = session(Answers({}, {"fixture_ops": ["conv.verify"]}), hello(3))[0]
    assert not a.msg["ok"] and "conv.verify" in a.msg["error"]["message"]


def test_a_conv_op_unclaimed_under_1_2_is_refused_as_a_command():
    fx = _conv("tiny-gdn/tiny-gdn__conv__commit_T4_n2.safetensors")
    a = session(NumpyReplay(), hello(2), fixture_cmd(fx))[1]
    assert not a.msg["ok"] and a.msg["error"]["field"] == "fixture_op", a.msg


def test_the_example_answers_a_conv_update_in_the_fixture_dtypes_and_shapes():
    fx = _conv("tiny-gdn/tiny-gdn__conv__update_T1_bias_f32act_bf16state.safetensors")
    a = session(NumpyReplay(), hello(3), fixture_cmd(fx), {"op": "shutdown"})
    assert a[1].msg["ok"], a[1].msg
    assert a[1].dtypes == {"out.y": "F32", "out.states": "BF16"}
    assert {k: v.shape for k, v in a[1].tensors.items()} == {k: fx.tensors[k].shape for k in ("out.y", "out.states")}
    result = fx.compare_outputs(a[1].tensors)
    assert result.ok, result.summary()


@pytest.mark.parametrize("answer,field,says", [
    ({"out.y": np.zeros((4, 64), np.float32)}, "out.states", "returned no such tensor"),
    ({"y": np.zeros((4, 64), np.float32), "states": np.zeros((4, 64, 3), np.float32),
      "out.state": np.zeros((64, 3), np.float32)}, "out.state", "not an output of this fixture"),
    ({"y": np.zeros((4, 64), np.float32), "states": np.zeros((4, 64, 2), np.float32)}, "out.states",
     "has shape [4, 64, 2]"),
])
def test_misfit_conv_answers_are_refused_naming_the_tensor(answer, field, says):
    fx = _conv("tiny-gdn/tiny-gdn__conv__update_T4.safetensors")
    assert fx.tensors["out.states"].shape == (4, 64, 3)
    target = Answers(answer, {"fixture_ops": ["conv.update"]})
    a = session(target, hello(3), fixture_cmd(fx))[1]
    assert not a.msg["ok"] and a.msg["error"]["field"] == field and says in a.msg["error"]["message"], a.msg
    op, config, inputs = target.seen
    assert op == "conv.update" and config == fx.config and "model" not in config
    assert sorted(inputs) == sorted(k for k in fx.tensors if not k.startswith("out."))


def test_the_seeded_conv_fault_in_process_fails_exactly_the_commits_below_the_window():
    for path in rk.find_fixtures(CONV):
        fx = rk.load_fixture(path)
        r = fx.check_target(NumpyReplay(FAULT))
        partial = fx.op == "conv.commit" and int(fx.inputs["accepted"]) < fx.inputs["x"].shape[0]
        assert r.ok != partial, (path, r.summary())
        assert fx.check_target(NumpyReplay()).ok, path


# --- through the C++ judge ------------------------------------------------------------------------------------


def _check(cli, command):
    proc = subprocess.run([cli, "check", "--target", f"exec:{command}", CONV], capture_output=True, text=True,
                          timeout=600)
    return proc, proc.stdout + proc.stderr


def test_the_example_passes_every_committed_conv_fixture_through_the_judge(cli):
    proc, out = _check(cli, COMMAND)
    n = len(rk.find_fixtures(CONV))
    assert n == 20
    assert proc.returncode == 0 and f"{n} passed, 0 failed, 0 not covered" in out, out
    assert out.count("PASS ") == n and all(f"({op}, fp32 tier)" in out for op in CONV_FIXTURE_OPS), out


def test_the_seeded_conv_commit_fault_fails_exactly_the_partial_commits_naming_the_worst_element(cli):
    proc, out = _check(cli, f"{COMMAND} --fault {FAULT}")
    partial = []
    for path in rk.find_fixtures(CONV, ops="conv.commit"):
        fx = rk.load_fixture(path)
        if int(fx.inputs["accepted"]) < fx.inputs["x"].shape[0]:
            partial.append(path)
    assert len(partial) == 7  # n = 0, 2 of T = 4 and n = 3 of T = 5 on tiny-gdn and tiny-kda; n = 1 of 2 on qwen3.5
    assert proc.returncode != 0 and f"13 passed, 7 failed, 0 not covered" in out, out
    failed = sorted(line.split()[1] for line in out.splitlines() if line.startswith("FAIL "))
    assert failed == sorted(partial), out
    for path in partial:  # out.state, exact, with the worst element's [channel, column]
        block = out.split(f"FAIL {path} (conv.commit, fp32 tier)")[1].split("\nPASS ")[0].split("\nFAIL ")[0]
        assert "out.state: FAIL [exact]" in block and "worst element [" in block, block
