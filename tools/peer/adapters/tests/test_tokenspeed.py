"""TokenSpeed's replay-commit adapter against the float32 recurrence of tools/python/examples/replay_math.py:
two live slots of a pool with a gap after every slot (slot stride > E) and one never-allocated slot, a fresh
prefill each, then verify steps with every accepted count (0..T), a PAD row in the batch and a row whose window
is shorter than the others'. Needs torch + triton and $REPLAYSSM_TOKENSPEED_SRC (a directory holding
tokenspeed-kernel/); skips without them; on a machine without a GPU set TRITON_INTERPRET=1."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ADAPTERS = os.path.dirname(HERE)
REPO = os.path.abspath(os.path.join(ADAPTERS, "..", "..", ".."))
sys.path.insert(0, ADAPTERS)
sys.path.insert(0, os.path.join(REPO, "tools", "python", "examples"))

torch = pytest.importorskip("torch")
pytest.importorskip("triton")
SRC = os.environ.get("REPLAYSSM_TOKENSPEED_SRC")
if not SRC or not os.path.isdir(os.path.join(SRC, "tokenspeed-kernel")):
    pytest.skip("REPLAYSSM_TOKENSPEED_SRC does not name a directory holding tokenspeed-kernel/", allow_module_level=True)
if not torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1":
    pytest.skip("no GPU and TRITON_INTERPRET is not 1", allow_module_level=True)

import tokenspeed_replay  # noqa: E402
from replay_math import Recurrence  # noqa: E402
from replayssm_kit.target import Row  # noqa: E402

CFG = {"op": "gdn", "H": 1, "HV": 2, "K": 16, "V": 8, "num_layers": 2, "l2norm": "div_sqrt", "l2_eps": 1e-6,
       "q_scale": 0.0, "round_beta_to_act": False, "kda_gate": "softplus", "lower_bound": -5.0,
       "act_dtype": "F32", "state_dtype": "F32", "layout": "vk"}
DEV = [] if torch.cuda.is_available() else ["--device", "cpu"]
GAP = 5  # elements after every slot that no command may write


def run(fault=None, seed=3):
    rng = np.random.default_rng(seed)
    argv = ["--peer-src", SRC] + DEV + (["--fault", fault] if fault else [])
    t = tokenspeed_replay.build(argv)
    L, HV, K, V, T = CFG["num_layers"], CFG["HV"], CFG["K"], CFG["V"], 4
    E = HV * K * V
    params = [(rng.uniform(-1, 0.5, HV).astype(np.float32), rng.uniform(-1, 1, (HV, 1)).astype(np.float32))
              for _ in range(L)]
    t.setup({"config": CFG, "num_slots": 3, "slot_stride": E + GAP, "max_T": T, "ring_B": T + 2, "ring_T": T,
             "poison": np.float32(np.nan)}, params)
    math = Recurrence(CFG)
    S = {s: [np.zeros((HV, K, V), np.float32) for _ in range(L)] for s in (1, 2)}
    worst = 0.0

    def window(n):
        return [{"q": rng.standard_normal((n, 1, K)).astype(np.float32),
                 "k": rng.standard_normal((n, 1, K)).astype(np.float32),
                 "v": rng.standard_normal((n, HV, V)).astype(np.float32),
                 "a": rng.standard_normal((n, HV, 1)).astype(np.float32),
                 "b": rng.standard_normal((n, HV)).astype(np.float32)} for _ in range(L)]

    def judge(rows, xs, outs, commit):
        """Outputs of every non-PAD row from its slot's state; with commit, advance the state by n tokens."""
        nonlocal worst
        for r in rows:
            if r.is_pad:
                continue
            for l in range(L):
                Sv, x = S[r.slot][l].copy(), xs[l]
                for i in range(r.T):
                    j = r.token_offset + i
                    ref = math.token(Sv, params[l], x["k"][j], x["v"][j], x["a"][j], x["b"][j], x["q"][j])
                    if outs is not None:
                        worst = max(worst, float(np.abs(outs[l][j] - ref).max()))
                    if commit and i == commit[r.slot] - 1:
                        S[r.slot][l] = Sv.copy()

    for s in (2, 1):
        t.allocate(s)
    x = window(5)  # two fresh prefills (3 and 2 tokens), committed by the step
    rows = [Row(2, 2, 3, 0, 3, "prefill", True), Row(1, 1, 2, 3, 2, "prefill", True)]
    judge(rows, x, [o.cpu().numpy() for o in t.step(rows, x)], {2: 3, 1: 2})
    for n2, n1 in [(4, 0), (0, 2), (2, 1), (3, 2), (1, 0), (4, 2)]:  # every accepted count for slot 2
        rows = [Row(-1, -1, 1, 0, 0, "verify", False), Row(2, 2, T, 1, 0, "verify", False),
                Row(1, 1, 2, 1 + T, 0, "verify", False)]  # a PAD row first, slot 1 with a shorter window
        x = window(1 + T + 2)
        judge(rows, x, [o.cpu().numpy() for o in t.step(rows, x)], None)
        acc = [Row(-1, -1, 1, 0, 0, "verify", False), Row(2, 2, T, 1, n2, "verify", False),
               Row(1, 1, 2, 1 + T, n1, "verify", False)]
        t.commit(acc)
        judge(acc, x, None, {2: n2, 1: n1})
        for s in (1, 2):
            for l in range(L):
                got = t.committed_state(l, s).cpu().numpy().transpose(0, 2, 1)  # [HV, V, K] -> [HV, K, V]
                worst = max(worst, float(np.abs(got - S[s][l]).max()))
    return worst, [t.pool(l).cpu().numpy() for l in range(L)]


def test_replay_commit_matches_the_recurrence():
    worst, pools = run()
    # fp32 bound of docs/numerics.md: 2e-5 * max(1, scale); outputs and states here are O(1)
    assert worst < 2e-5, f"worst abs error {worst} (seed 3)"
    E = CFG["HV"] * CFG["K"] * CFG["V"]
    for l, pool in enumerate(pools):
        assert np.isnan(pool[0]).all(), f"layer {l}: slot 0 was never allocated: it must keep its poison"
        assert np.isnan(pool[:, E:]).all(), f"layer {l}: a gap after a slot was written"


def test_commit_one_fewer_is_caught():
    worst, _ = run("commit_one_fewer")
    assert worst > 1e-2, worst


def test_trace_fixture_passes_and_is_deterministic():
    """A committed tiny-gdn trace (recorded with l2norm rsqrt_mul, one fp32 rounding from the kernels'
    division, inside the fp32 bound) twice: it passes at fp32 and the two runs answer the same bits."""
    import run_traces
    from replayssm_kit.replay import replay_trace

    path = os.path.join(REPO, "fixtures", "traces", "tiny-gdn", "tiny-gdn__trace__0.safetensors")
    target = tokenspeed_replay.build(["--peer-src", SRC] + DEV)
    logs = []
    for _ in range(2):
        rec = run_traces.Recorder(target, ["rsqrt_mul"])
        res = replay_trace(path, rec)
        assert res.covered and res.ok, res.summary()
        logs.append(rec.log)
    assert logs[0] == logs[1], "two runs of the same trace answered different bits"
