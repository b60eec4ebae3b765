"""The peer adapters judged in process through the committed trace fixtures, their negative controls, and the
SelfCheck wrapper's teeth. Needs torch + triton and the peer sources ($REPLAYSSM_FLA_SRC); skips cleanly
without them. On a machine without a GPU set TRITON_INTERPRET=1 (the traces are tiny-gdn / tiny-kda).

    REPLAYSSM_FLA_SRC=.peers/fla TRITON_INTERPRET=1 python -m pytest -q tools/peer/adapters/tests
"""

from __future__ import annotations

import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ADAPTERS = os.path.dirname(HERE)
REPO = os.path.abspath(os.path.join(ADAPTERS, "..", "..", ".."))
sys.path.insert(0, ADAPTERS)

torch = pytest.importorskip("torch")
pytest.importorskip("triton")
FLA = os.environ.get("REPLAYSSM_FLA_SRC")
if not FLA or not os.path.isdir(os.path.join(FLA, "fla")):
    pytest.skip("REPLAYSSM_FLA_SRC does not name a directory holding fla/", allow_module_level=True)
if not torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1":
    pytest.skip("no GPU and TRITON_INTERPRET is not 1", allow_module_level=True)

import common  # noqa: E402
import fla_spec  # noqa: E402
from replayssm_kit.replay import replay_trace  # noqa: E402

TRACE = os.path.join(REPO, "fixtures", "traces", "tiny-gdn", "tiny-gdn__trace__0.safetensors")


class AcceptRsqrt(common.Target):
    """The traces are recorded with l2norm rsqrt_mul; FLA divides by the square root (one rounding apart)."""

    def __init__(self, inner):
        self.inner = inner

    def capabilities(self):
        return dict(self.inner.capabilities(), l2norms=["rsqrt_mul", "div_sqrt"])

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def setup(self, s, p):
        return self.inner.setup(s, p)

    def step(self, r, i):
        return self.inner.step(r, i)

    def commit(self, r):
        return self.inner.commit(r)

    def copy_slot(self, s, d):
        return self.inner.copy_slot(s, d)

    def committed_state(self, l, s):
        return self.inner.committed_state(l, s)

    def pool(self, l):
        return self.inner.pool(l)


def test_fla_passes_a_trace_at_fp32():
    res = replay_trace(TRACE, AcceptRsqrt(fla_spec.build(["--peer-src", FLA])))
    assert res.ok, res.summary()
    assert res.judged == "fp32"


def test_fla_without_the_rsqrt_form_is_not_covered():
    res = replay_trace(TRACE, fla_spec.build(["--peer-src", FLA]))
    assert not res.covered and "l2norm" in res.not_covered


def test_fla_commit_one_fewer_is_caught():
    res = replay_trace(TRACE, AcceptRsqrt(fla_spec.build(["--peer-src", FLA, "--fault", "commit_one_fewer"])))
    assert not res.ok
    assert res.first_failure.check == "state", res.summary()


def test_self_check_reports_a_nondeterministic_step(tmp_path):
    """A target whose second run of the same step answers different bits must be reported."""
    log = tmp_path / "self.jsonl"

    class Flaky(AcceptRsqrt):
        calls = 0

        def step(self, rows, inputs):
            out = self.inner.step(rows, inputs)
            Flaky.calls += 1
            if Flaky.calls % 3 == 2:  # the repeat run of every step
                out = [o + 1 for o in out]
            return out

    target = common.SelfCheck(Flaky(fla_spec.build(["--peer-src", FLA])), str(log))
    replay_trace(TRACE, target)
    text = log.read_text() if log.exists() else ""
    assert '"check": "repeat outputs"' in text, text
    assert '"check": "reversed rows outputs"' not in text, text  # the reversed run is the unchanged kernel's


def test_self_check_is_silent_on_the_real_kernel(tmp_path):
    log = tmp_path / "self.jsonl"
    res = replay_trace(TRACE, common.SelfCheck(AcceptRsqrt(fla_spec.build(["--peer-src", FLA])), str(log)))
    assert res.ok, res.summary()
    assert not log.exists(), log.read_text()
