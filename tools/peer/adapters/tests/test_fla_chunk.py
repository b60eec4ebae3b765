"""FLA's GDN chunk kernels through the adapter's `fixture` hook on committed `chunked` fixtures (chunk sizes 16
and 64, K != V, an F32-activation / BF16-state config), judged in process (`Fixture.check_target`), and a
negative control: the same kernels started from a zero state instead of the fixture's must fail. Needs torch +
triton and $REPLAYSSM_FLA_SRC; skips without them. On a CPU set TRITON_INTERPRET=1: the interpreter's dots are
IEEE fp32, so the test claims the fp32 tier; its bf16 dots are unusable and FLA's KDA chunk does not run under
it (a `gather` helper called outside a JIT function), so BF16 and KDA fixtures are judged on a GPU only."""

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
if not FLA or not os.path.isfile(os.path.join(FLA, "fla", "ops", "gated_delta_rule", "chunk.py")):
    pytest.skip("REPLAYSSM_FLA_SRC does not hold fla/ops/gated_delta_rule/chunk.py", allow_module_level=True)
if torch.cuda.is_available():
    pytest.skip("on a GPU the chunk's dots are TF32: judged by `replayssm check` at the tf32 tier",
                allow_module_level=True)
if os.environ.get("TRITON_INTERPRET") != "1":
    pytest.skip("no GPU and TRITON_INTERPRET is not 1", allow_module_level=True)

import fla_chunk  # noqa: E402
from replayssm_kit.fixture import load_fixture  # noqa: E402

FIXTURES = [os.path.join(REPO, "fixtures", "golden", p) for p in (
    "tiny-gdn/tiny-gdn-f32act-bf16state__chunked__T70_C16.safetensors",
    "tiny-gdn/tiny-gdn-f32act-bf16state__chunked__T70_C64.safetensors",
    "small-kv-neq/small-kv-neq-f32act-bf16state__chunked__T70_C16.safetensors")]


def target():
    return fla_chunk.build(["--peer-src", FLA, "--device", "cpu", "--act", "F32", "--tier", "fp32"])


@pytest.mark.parametrize("path", FIXTURES, ids=os.path.basename)
def test_chunk_passes_the_fixture_at_fp32(path):
    res = load_fixture(path).check_target(target())
    assert res.ok, res.summary()
    assert res.tensors and all(t.ok for t in res.tensors), res.summary()


class ZeroStart(fla_chunk.FlaChunk):
    """The chunk kernels started from zeros instead of the fixture's in.state (a dropped initial state)."""

    def fixture(self, op, config, inputs):
        return super().fixture(op, config, dict(inputs, **{"in.state": 0 * inputs["in.state"]}))


def test_a_dropped_initial_state_fails_the_fixture():
    t = target()
    z = ZeroStart(t.dev, "F32", "fp32")
    res = load_fixture(FIXTURES[0]).check_target(z)
    assert not res.ok, "a chunk run from a zero state passed a fixture with a random initial state"
