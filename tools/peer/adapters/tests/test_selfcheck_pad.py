"""The determinism checks (common.SelfCheck, run_traces.Recorder) ignore the outputs of PAD rows unless the
target claims `pad_outputs_zero` (they are don't-care: docs/target-protocol.md, "PAD rows"), and still report a
live row whose outputs change. A fake target answers fresh garbage in every PAD window (what a kernel that never
writes them returns from an uninitialised buffer). Needs torch only."""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

torch = pytest.importorskip("torch")

import common  # noqa: E402
import run_traces  # noqa: E402
from replayssm_kit.target import Row  # noqa: E402


class Garbage(common.Target):
    """Outputs [N, 2]: live rows 1.5 (or a new value per call when `live_noise`), PAD windows random bits."""

    def __init__(self, claim_zero=False, live_noise=False):
        self.claim_zero, self.live_noise, self.calls = claim_zero, live_noise, 0
        self.state = torch.zeros(3)

    def capabilities(self):
        return {"pad_outputs_zero": self.claim_zero}

    def tensors(self):
        return [self.state]

    def step(self, rows, inputs):
        self.calls += 1
        n = inputs[0]["q"].shape[0]
        o = torch.full((n, 2), 1.5)
        for r in rows:
            if r.is_pad:
                o[r.token_offset: r.token_offset + r.T] = torch.randn(r.T, 2) * 1e30
            elif self.live_noise:
                o[r.token_offset] += self.calls
        return [o]


ROWS = [Row(-1, -1, 2, 0, 0, "verify", False), Row(1, 1, 3, 2, 0, "verify", False)]
X = [{"q": np.zeros((5, 1, 2), np.float32)}]


def self_check(target, tmp_path):
    path = tmp_path / "self.jsonl"
    common.SelfCheck(target, str(path)).step(ROWS, X)
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_self_check_ignores_unclaimed_pad_outputs(tmp_path):
    assert self_check(Garbage(), tmp_path) == []


def test_self_check_reports_claimed_pad_outputs(tmp_path):
    found = self_check(Garbage(claim_zero=True), tmp_path)
    assert {f["check"] for f in found} == {"repeat outputs", "reversed rows outputs"}, found


def test_self_check_reports_a_live_row_that_changes(tmp_path):
    found = self_check(Garbage(live_noise=True), tmp_path)
    assert {f["check"] for f in found} == {"repeat outputs", "reversed rows outputs"}, found


def test_recorder_keeps_unclaimed_pad_outputs_as_zero():
    logs = []
    for _ in range(2):
        rec = run_traces.Recorder(Garbage(), [])
        out = rec.step(ROWS, X)
        assert np.abs(out[0][:2].numpy()).max() > 1e20, "the target's own answer is passed on unchanged"
        logs.append(rec.log)
    assert logs[0] == logs[1]
    kept = np.frombuffer(logs[0][0][1], np.float32).reshape(5, 2)
    assert (kept[:2] == 0).all() and (kept[2:] == 1.5).all(), kept
