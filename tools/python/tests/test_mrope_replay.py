"""MRoPE traces without the CLI (replayssm_kit.mrope_replay): the NumPy example passes every committed MRoPE
trace in process; each of its seeded MRoPE faults fails at least one, naming the command and the check; a target
that does not claim the trace's model is not covered; a file of another op is refused."""
import os
import sys

import pytest

from conftest import FIXTURES, HERE
import replayssm_kit as rk

sys.path.insert(0, os.path.join(os.path.dirname(HERE), "examples"))
from numpy_mrope import MROPE_FAULTS  # noqa: E402
from numpy_replay import NumpyReplay  # noqa: E402

TRACES = rk.find_fixtures(os.path.join(FIXTURES, "traces", "mrope"), {"mrope.session"})


def test_there_is_one_committed_trace_per_model():
    assert sorted(os.path.basename(p).split("__")[0] for p in TRACES) == ["qwen2-vl", "qwen2.5-vl", "qwen3-vl",
                                                                          "qwen3.5"]


@pytest.mark.parametrize("path", TRACES, ids=os.path.basename)
def test_the_example_passes_each_trace_in_process(path):
    result = rk.replay_mrope_trace(path, NumpyReplay())
    assert result.ok and result.covered, result.summary()
    assert sum(c.op == "mrope_step" for c in result.commands) >= 5


@pytest.mark.parametrize("fault", MROPE_FAULTS)
def test_each_fault_fails_a_trace_naming_the_command_and_check(fault):
    failures = [r.first_failure for r in (rk.replay_mrope_trace(p, NumpyReplay(fault)) for p in TRACES) if not r.ok]
    assert failures, f"{fault} passes every committed MRoPE trace"
    f = failures[0]
    assert f.op == "mrope_step" and f.check in ("index", "positions", "pad", "q_rot", "k_rot"), str(f)
    assert f.message.startswith(f"command {f.index} (step of "), f.message


def test_a_target_without_the_model_is_not_covered_and_another_op_is_refused():
    class Qwen35Only(NumpyReplay):
        def capabilities(self):
            return dict(super().capabilities(), mrope={"models": ["qwen3.5"]})

    path = next(p for p in TRACES if "qwen2-vl" in p)
    result = rk.replay_mrope_trace(path, Qwen35Only())
    assert not result.covered and not result.ok and "qwen2-vl" in result.not_covered
    with pytest.raises(ValueError, match="not 'mrope.session'"):
        rk.replay_mrope_trace(os.path.join(FIXTURES, "golden", "mrope", "mrope__qwen3.5.safetensors"), NumpyReplay())
