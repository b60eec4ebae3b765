"""The scenario the replay-design adapter tests share (TokenSpeed's replay commit, SGLang's spec fold), judged
against the float32 recurrence of tools/python/examples/replay_math.py: two live slots of a pool with a gap after
every slot (slot stride > E) and one never-allocated slot, two layers, a fresh prefill each, then verify steps
with every accepted count (0..T) for one slot, a PAD row first in the batch and the other slot with a shorter
window. The caller has checked that torch and triton import."""

from __future__ import annotations

import os
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ADAPTERS = os.path.dirname(HERE)
REPO = os.path.abspath(os.path.join(ADAPTERS, "..", "..", ".."))
sys.path.insert(0, ADAPTERS)
sys.path.insert(0, os.path.join(REPO, "tools", "python", "examples"))

import common  # noqa: E402,F401  (puts replayssm_kit on the path)
from replay_math import Recurrence  # noqa: E402
from replayssm_kit.target import Row  # noqa: E402

TRACE = os.path.join(REPO, "fixtures", "traces", "tiny-gdn", "tiny-gdn__trace__0.safetensors")
CFG = {"op": "gdn", "H": 1, "HV": 2, "K": 16, "V": 8, "num_layers": 2, "l2norm": "div_sqrt", "l2_eps": 1e-6,
       "q_scale": 0.0, "round_beta_to_act": False, "kda_gate": "softplus", "lower_bound": -5.0,
       "act_dtype": "F32", "state_dtype": "F32", "layout": "vk"}
DEV = [] if torch.cuda.is_available() else ["--device", "cpu"]
GAP = 5  # elements after every slot that no command may write


def run(adapter, src, fault=None, seed=3):
    """(worst abs error over outputs and committed states, every layer's pool) of the scenario above."""
    rng = np.random.default_rng(seed)
    argv = ["--peer-src", src] + DEV + (["--fault", fault] if fault else [])
    t = adapter.build(argv)
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


def check_pools(pools) -> None:
    E = CFG["HV"] * CFG["K"] * CFG["V"]
    for l, pool in enumerate(pools):
        assert np.isnan(pool[0]).all(), f"layer {l}: slot 0 was never allocated: it must keep its poison"
        assert np.isnan(pool[:, E:]).all(), f"layer {l}: a gap after a slot was written"


def trace_twice(adapter, src) -> None:
    """A committed tiny-gdn trace (recorded with l2norm rsqrt_mul, one fp32 rounding from the kernels'
    division, inside the fp32 bound) twice: it passes at fp32 and the two runs answer the same bits."""
    import run_traces
    from replayssm_kit.replay import replay_trace

    target = adapter.build(["--peer-src", src] + DEV)
    logs = []
    for _ in range(2):
        rec = run_traces.Recorder(target, ["rsqrt_mul"])
        res = replay_trace(TRACE, rec)
        assert res.covered and res.ok, res.summary()
        logs.append(rec.log)
    assert logs[0] == logs[1], "two runs of the same trace answered different bits"
