"""The torch example target (examples/torch_replay.py): judged by the CLI's campaigns on both presets (no failure;
the 100 cases of up to 100 commands are a full-depth campaign, so the verdict is CONFORMANT), and every committed
trace replayed through it in-process. Skips without torch (CI has none; run on a GPU machine before changing it:
docs/testing.md)."""
import os
import sys

import pytest

torch = pytest.importorskip("torch")

from conftest import FIXTURES, HERE  # noqa: E402
from replayssm_kit.pytest_helper import fuzz_target, trace_params  # noqa: E402
from replayssm_kit.replay import replay_trace  # noqa: E402

EXAMPLES = os.path.join(os.path.dirname(HERE), "examples")
sys.path.insert(0, EXAMPLES)
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


@pytest.mark.parametrize("preset", ["tiny-gdn", "tiny-kda"])
def test_torch_example_campaign(preset):
    fuzz_target(f"{sys.executable} {os.path.join(EXAMPLES, 'torch_replay.py')} --device {DEVICE}", preset=preset,
                cases=100, extra_args=("--max-commands", "100"), complete=True)


@pytest.mark.parametrize("trace", trace_params(os.path.join(FIXTURES, "traces")))
def test_torch_example_passes_every_committed_trace(trace):
    from torch_replay import TorchReplay

    result = replay_trace(trace, TorchReplay(DEVICE))
    if not result.covered:
        pytest.skip(result.summary())
    assert result.ok, result.summary()
