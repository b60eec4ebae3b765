"""vLLM's spec ring adapter against the float32 recurrence of tools/python/examples/replay_math.py on one
slot over a prefill and verify steps with every accepted count (0..T) and several flushes, at the smallest
shape the kernel accepts (K = 32). Needs torch + triton and $REPLAYSSM_VLLM_SRC; skips without them; on a
machine without a GPU set TRITON_INTERPRET=1 (the interpreter's dots are IEEE fp32, so the bound is fp32's)."""

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
SRC = os.environ.get("REPLAYSSM_VLLM_SRC")
if not SRC or not os.path.isdir(os.path.join(SRC, "vllm")):
    pytest.skip("REPLAYSSM_VLLM_SRC does not name a directory holding vllm/", allow_module_level=True)
if torch.cuda.is_available():
    pytest.skip("on a GPU the kernel's dots are TF32: judged by the campaigns at the tf32 tier", allow_module_level=True)
if os.environ.get("TRITON_INTERPRET") != "1":
    pytest.skip("no GPU and TRITON_INTERPRET is not 1", allow_module_level=True)

import vllm_spec_ring  # noqa: E402
from replay_math import Recurrence  # noqa: E402
from replayssm_kit.target import Row  # noqa: E402

CFG = {"op": "gdn", "H": 1, "HV": 2, "K": 32, "V": 32, "num_layers": 1, "l2norm": "rsqrt_mul", "l2_eps": 1e-6,
       "q_scale": 0.0, "round_beta_to_act": False, "kda_gate": "softplus", "lower_bound": -5.0,
       "act_dtype": "F32", "state_dtype": "F32", "layout": "vk"}


def run(fault=None, seed=3):
    rng = np.random.default_rng(seed)
    argv = ["--peer-src", SRC, "--act", "F32", "--device", "cpu"] + (["--fault", fault] if fault else [])
    t = vllm_spec_ring.build(argv)
    HV, K, V, T = CFG["HV"], CFG["K"], CFG["V"], 4
    params = [(rng.uniform(-1, 0.5, HV).astype(np.float32), rng.uniform(-1, 1, (HV, 1)).astype(np.float32))]
    t.setup({"config": CFG, "num_slots": 2, "slot_stride": 0, "max_T": T, "ring_B": T + 2, "ring_T": T,
             "poison": np.float32(np.nan)}, params)
    t.allocate(1)
    math = Recurrence(CFG)
    S = np.zeros((HV, K, V), np.float32)
    worst = 0.0

    def window(n):
        return {"q": rng.standard_normal((n, 1, K)).astype(np.float32),
                "k": rng.standard_normal((n, 1, K)).astype(np.float32),
                "v": rng.standard_normal((n, HV, V)).astype(np.float32),
                "a": rng.standard_normal((n, HV, 1)).astype(np.float32),
                "b": rng.standard_normal((n, HV)).astype(np.float32)}

    x = window(3)  # a fresh prefill of 3 tokens, committed by the step
    o = t.step([Row(1, 1, 3, 0, 3, "prefill", True)], [x])[0].numpy()
    for i in range(3):
        ref = math.token(S, params[0], x["k"][i], x["v"][i], x["a"][i], x["b"][i], x["q"][i])
        worst = max(worst, float(np.abs(o[i] - ref).max()))
    for step, n in enumerate([4, 0, 2, 4, 1, 3, 0, 4, 4, 2]):  # every accepted count, flushes on the way
        x = window(T)
        rows = [Row(-1, -1, 1, 0, 0, "verify", False), Row(1, 1, T, 1, 0, "verify", False)]  # a PAD row first
        both = {k: np.concatenate([window(1)[k], v]) for k, v in x.items()}
        o = t.step(rows, [both])[0].numpy()
        assert not o[0].any(), "PAD row output is not zero (the NULL block convention)"
        Sv = S.copy()
        for i in range(T):
            ref = math.token(Sv, params[0], x["k"][i], x["v"][i], x["a"][i], x["b"][i], x["q"][i])
            worst = max(worst, float(np.abs(o[1 + i] - ref).max()))
        t.commit([Row(-1, -1, 1, 0, 0, "verify", False), Row(1, 1, T, 1, n, "verify", False)])
        for i in range(n):
            math.token(S, params[0], x["k"][i], x["v"][i], x["a"][i], x["b"][i])
        got = t.committed_state(0, 1).numpy().transpose(0, 2, 1)  # [HV, V, K] -> [HV, K, V]
        worst = max(worst, float(np.abs(got - S).max()))
    pool = t.pool(0).numpy()
    return worst, pool


def test_spec_ring_matches_the_recurrence_through_flushes():
    worst, pool = run()
    # fp32 bound of docs/numerics.md: 2e-5 * max(1, scale); outputs and states here are O(1)
    assert worst < 2e-5, worst
    assert np.isnan(pool[0]).all(), "slot 0 was never allocated: it must keep its poison"


def test_commit_one_fewer_is_caught():
    worst, _ = run("commit_one_fewer")
    assert worst > 1e-2, worst
