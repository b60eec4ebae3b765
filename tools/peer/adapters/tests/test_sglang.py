"""SGLang's spec-fold adapter through the shared replay scenario (replay_scenario.py): outputs and committed states
within the fp32 bound, poisoned slot and gaps untouched, the commit-one-fewer control caught, a trace fixture
passing twice with equal bits. Needs torch + triton and $REPLAYSSM_SGLANG_SRC (a directory holding python/sglang/); skips without
them; on a machine without a GPU set TRITON_INTERPRET=1."""

from __future__ import annotations

import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

torch = pytest.importorskip("torch")
pytest.importorskip("triton")
SRC = os.environ.get("REPLAYSSM_SGLANG_SRC")
if not SRC or not os.path.isdir(os.path.join(SRC, "python", "sglang")):
    pytest.skip("REPLAYSSM_SGLANG_SRC does not name a directory holding python/sglang/", allow_module_level=True)
if not torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1":
    pytest.skip("no GPU and TRITON_INTERPRET is not 1", allow_module_level=True)

import sglang_fold  # noqa: E402
import replay_scenario as sc  # noqa: E402


def test_outputs_and_committed_states_match_the_recurrence():
    worst, pools = sc.run(sglang_fold, SRC)
    # fp32 bound of docs/numerics.md: 2e-5 * max(1, scale); outputs and states here are O(1)
    assert worst < 2e-5, f"worst abs error {worst} (seed 3)"
    sc.check_pools(pools)


def test_commit_one_fewer_is_caught():
    worst, _ = sc.run(sglang_fold, SRC, "commit_one_fewer")
    assert worst > 1e-2, worst


def test_trace_fixture_passes_and_is_deterministic():
    sc.trace_twice(sglang_fold, SRC)
