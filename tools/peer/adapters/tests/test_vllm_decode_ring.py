"""vLLM's standard-decode ring adapter against the float32 recurrence of tools/python/examples/replay_math.py:
one request through a fresh one-token prefill and decode steps with accepted counts 0 and 1 over several
flushes (ring length 3: a flush every third committed token, and n = 0 on flush steps), a PAD row in every
step, a slot copy in the middle of a ring, at the smallest shape the kernel accepts (K = 16 with nk = 1).
Needs torch + triton and $REPLAYSSM_VLLM_SRC; skips without them; on a machine without a GPU set
TRITON_INTERPRET=1 (the interpreter's dots are IEEE fp32, so the bound is fp32's; its bf16 dots are not usable,
so the test runs F32 activations and records only)."""

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
if not SRC or not os.path.isfile(os.path.join(SRC, "vllm/model_executor/layers/fla/ops/fused_recurrent_replayssm.py")):
    pytest.skip("REPLAYSSM_VLLM_SRC does not hold vLLM's fused_recurrent_replayssm.py", allow_module_level=True)
if torch.cuda.is_available():
    pytest.skip("on a GPU the kernel's dots are TF32: judged by the campaigns at the tf32 tier", allow_module_level=True)
if os.environ.get("TRITON_INTERPRET") != "1":
    pytest.skip("no GPU and TRITON_INTERPRET is not 1", allow_module_level=True)

import vllm_decode_ring  # noqa: E402
from replay_math import Recurrence  # noqa: E402
from replayssm_kit.target import Row  # noqa: E402

CFG = {"op": "gdn", "H": 1, "HV": 2, "K": 16, "V": 16, "num_layers": 1, "l2norm": "rsqrt_mul", "l2_eps": 1e-6,
       "q_scale": 0.0, "round_beta_to_act": False, "kda_gate": "softplus", "lower_bound": -5.0,
       "act_dtype": "F32", "state_dtype": "F32", "layout": "vk"}
HV, K, V = CFG["HV"], CFG["K"], CFG["V"]
E = HV * K * V
STRIDE = E + 4  # a 4-element gap after every slot, which nothing may write
ACCEPTED = [1, 0, 1, 1, 0, 1, 1, 1, 0, 0, 1, 1, 1, 0]  # with the prefill: flushes at n = 0 and n = 1


def token(rng):
    return {"q": rng.standard_normal((1, 1, K)).astype(np.float32),
            "k": rng.standard_normal((1, 1, K)).astype(np.float32),
            "v": rng.standard_normal((1, HV, V)).astype(np.float32),
            "a": rng.standard_normal((1, HV, 1)).astype(np.float32),
            "b": rng.standard_normal((1, HV)).astype(np.float32)}


def state_of(t, slot):
    return t.committed_state(0, slot).numpy().transpose(0, 2, 1)  # [HV, V, K] -> [HV, K, V]


def decode(t, math, params, S, slot, n, rng, pad_first=True):
    """One decode step of `slot` (with a PAD row before it) and its commit of n; returns the worst output error."""
    x = token(rng)
    pad = token(rng)
    rows = ([Row(-1, -1, 1, 0, 0, "verify", False)] if pad_first else []) + [Row(slot, slot, 1, int(pad_first), 0,
                                                                                "verify", False)]
    both = {k: np.concatenate([pad[k], v]) if pad_first else v for k, v in x.items()}
    before = t.pool(0).numpy().copy()
    o = t.step(rows, [both])[0].numpy()
    if pad_first:
        assert not o[0].any(), "PAD row output is not zero (the NULL block convention)"
    ref = math.token(S.copy(), params, x["k"][0], x["v"][0], x["a"][0], x["b"][0], x["q"][0])
    err = float(np.abs(o[-1] - ref).max())
    t.commit([Row(r.slot, r.write_slot, 1, r.token_offset, n if r.slot == slot else 0, "verify", False) for r in rows])
    if n == 0:
        after = t.pool(0).numpy()
        assert after.tobytes() == before.tobytes(), f"a commit of n = 0 changed the pool (slot {slot})"
    else:
        math.token(S, params, x["k"][0], x["v"][0], x["a"][0], x["b"][0])
    return err


def run(fault=None, seed=5):
    rng = np.random.default_rng(seed)
    argv = ["--peer-src", SRC, "--act", "F32", "--device", "cpu", "--nk", "1", "--ring-len", "3"]
    t = vllm_decode_ring.build(argv + (["--fault", fault] if fault else []))
    params = (rng.uniform(-1, 0.5, HV).astype(np.float32), rng.uniform(-1, 1, (HV, 1)).astype(np.float32))
    t.setup({"config": CFG, "num_slots": 3, "slot_stride": STRIDE, "max_T": 1, "ring_B": 2, "ring_T": 1,
             "poison": np.float32(np.nan)}, [params])
    math = Recurrence(CFG)
    t.allocate(1)
    S = np.zeros((HV, K, V), np.float32)
    x = token(rng)  # a fresh one-token prefill, committed by the step
    o = t.step([Row(1, 1, 1, 0, 1, "prefill", True)], [x])[0].numpy()
    worst = float(np.abs(o[0] - math.token(S, params, x["k"][0], x["v"][0], x["a"][0], x["b"][0], x["q"][0])).max())
    for n in ACCEPTED:
        worst = max(worst, decode(t, math, params, S, 1, n, rng))
        wp, pool = t.write_pos.clone(), t.pool(0).numpy().copy()
        got = state_of(t, 1)
        assert t.write_pos.equal(wp) and t.pool(0).numpy().tobytes() == pool.tobytes(), \
            "committed_state changed the slot's storage (the fold must run on the scratch block)"
        worst = max(worst, float(np.abs(got - S).max()))
    # a copy in the middle of a ring (live records), then both slots decode on their own
    assert 0 < int(t.write_pos[1 + 1]) < 2, "the copy must carry live records: choose ACCEPTED so that it does"
    t.allocate(2)
    t.copy_slot(1, 2)
    S2 = S.copy()
    for n in (1, 1, 0, 1):
        worst = max(worst, decode(t, math, params, S2, 2, n, rng, pad_first=False))
        worst = max(worst, float(np.abs(state_of(t, 2) - S2).max()))
    worst = max(worst, float(np.abs(state_of(t, 1) - S).max()))
    return worst, t.pool(0).numpy()


def test_decode_ring_matches_the_recurrence_through_flushes():
    worst, pool = run()
    # fp32 bound of docs/numerics.md: 2e-5 * max(1, scale); outputs and states here are O(1)
    assert worst < 2e-5, f"worst |got - ref| {worst} (seed 5; reproduce: this test with TRITON_INTERPRET=1)"
    assert np.isnan(pool[0]).all(), "slot 0 was never allocated: it must keep its poison"
    assert np.isnan(pool[:, E:]).all(), "a slot gap was written"


def test_commit_one_fewer_is_caught():
    worst, _ = run("commit_one_fewer")
    assert worst > 1e-2, worst
