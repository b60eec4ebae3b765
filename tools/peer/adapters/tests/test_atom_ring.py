"""ATOM's ring adapter (GDN and KDA paths) against the float32 recurrence of tools/python/examples/replay_math.py:
two layers, a pool with a gap after every slot and a never-allocated slot, a fresh prefill, then verify steps with
every accepted count (0..T) and a PAD row first, through several flushes (cache_len 8, max_T 4: a flush every
second or third step). Also: the commit-one-fewer control is caught, and the split-V flush depends on program
order (docs/peer-findings/atom-flush-program-order.md). Needs torch + triton and $REPLAYSSM_ATOM_SRC; runs on the
CPU interpreter only (TRITON_INTERPRET=1: IEEE fp32 dots, so the bound is fp32's; on a GPU the fp32-record dots
are TF32, judged by the campaigns at the tf32 tier)."""

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
SRC = os.environ.get("REPLAYSSM_ATOM_SRC")
if not SRC or not os.path.isdir(os.path.join(SRC, "atom")):
    pytest.skip("REPLAYSSM_ATOM_SRC does not name a directory holding atom/", allow_module_level=True)
if torch.cuda.is_available():
    pytest.skip("on a GPU the fp32-record dots are TF32: judged by the campaigns at the tf32 tier",
                allow_module_level=True)
if os.environ.get("TRITON_INTERPRET") != "1":
    pytest.skip("no GPU and TRITON_INTERPRET is not 1", allow_module_level=True)

import atom_ring  # noqa: E402
from replay_math import Recurrence  # noqa: E402
from replayssm_kit.target import Row  # noqa: E402

GAP = 3  # elements after every slot that no command may write


def config(op: str, K: int, V: int) -> dict:
    return {"op": op, "H": 1, "HV": 2, "K": K, "V": V, "num_layers": 2, "l2_eps": 1e-6, "q_scale": 0.0,
            "l2norm": "div_sqrt" if op == "gdn" else "rsqrt_mul", "round_beta_to_act": False,
            "kda_gate": "softplus", "lower_bound": -5.0, "act_dtype": "F32", "state_dtype": "F32",
            "layout": "kv" if op == "gdn" else "vk"}


def run(op: str, K: int = 16, V: int = 8, fault=None, seed=3):
    """(worst |error| of outputs, worst |error| of committed states with its coordinates, the pools)."""
    rng = np.random.default_rng(seed)
    cfg = config(op, K, V)
    argv = ["--peer-src", SRC, "--device", "cpu", "--op", op, "--cache-len", "8", "--tier", "fp32"]
    t = atom_ring.build(argv + (["--fault", fault] if fault else []))
    L, HV, T, aw = cfg["num_layers"], cfg["HV"], 4, (K if op == "kda" else 1)
    params = [(rng.uniform(-1, 0.5, HV).astype(np.float32), rng.uniform(-1, 1, (HV, aw)).astype(np.float32))
              for _ in range(L)]
    t.setup({"config": cfg, "num_slots": 3, "slot_stride": HV * K * V + GAP, "max_T": T, "ring_B": T + 2,
             "ring_T": T, "poison": np.float32(np.nan)}, params)
    t.allocate(1)
    math = Recurrence(cfg)
    S = [np.zeros((HV, K, V), np.float32) for _ in range(L)]
    worst_o, worst_s = 0.0, (0.0, None)

    def window(n):
        return [{"q": rng.standard_normal((n, 1, K)).astype(np.float32),
                 "k": rng.standard_normal((n, 1, K)).astype(np.float32),
                 "v": rng.standard_normal((n, HV, V)).astype(np.float32),
                 "a": rng.standard_normal((n, HV, aw)).astype(np.float32),
                 "b": rng.standard_normal((n, HV)).astype(np.float32)} for _ in range(L)]

    x = window(3)  # a fresh prefill of 3 tokens, committed by the step
    o = t.step([Row(1, 1, 3, 0, 3, "prefill", True)], x)
    for l in range(L):
        for i in range(3):
            ref = math.token(S[l], params[l], x[l]["k"][i], x[l]["v"][i], x[l]["a"][i], x[l]["b"][i], x[l]["q"][i])
            worst_o = max(worst_o, float(np.abs(o[l][i].numpy() - ref).max()))
    for step, n in enumerate([4, 0, 2, 4, 1, 3, 0, 4, 4, 2, 4, 4]):  # every accepted count, flushes on the way
        rows = [Row(-1, -1, 1, 0, 0, "verify", False), Row(1, 1, T, 1, 0, "verify", False)]
        x = window(1 + T)
        o = t.step(rows, x)
        t.commit([Row(-1, -1, 1, 0, 0, "verify", False), Row(1, 1, T, 1, n, "verify", False)])
        for l in range(L):
            Sv = S[l].copy()
            for i in range(T):
                j = 1 + i
                ref = math.token(Sv, params[l], x[l]["k"][j], x[l]["v"][j], x[l]["a"][j], x[l]["b"][j], x[l]["q"][j])
                worst_o = max(worst_o, float(np.abs(o[l][j].numpy() - ref).max()))
                if i == n - 1:
                    S[l] = Sv.copy()
            got = t.committed_state(l, 1).numpy()
            if op == "kda":
                got = got.transpose(0, 2, 1)  # [HV, V, K] -> [HV, K, V]
            err = np.abs(got - S[l])
            if err.max() > worst_s[0]:
                worst_s = (float(err.max()), (step, l) + np.unravel_index(int(err.argmax()), err.shape))
    return worst_o, worst_s, [t.pool(l).numpy() for l in range(L)]


def check_pools(pools, E):
    for l, p in enumerate(pools):
        assert np.isnan(p[0]).all() and np.isnan(p[2]).all(), f"layer {l}: a never-allocated slot lost its poison"
        assert np.isnan(p[1, E:]).all(), f"layer {l}: slot 1's gap was written"


@pytest.mark.parametrize("op", ["gdn", "kda"])
def test_matches_the_recurrence_through_flushes(op):
    worst_o, worst_s, pools = run(op)
    # fp32 bound of docs/numerics.md: 2e-5 * max(1, scale); outputs and states here are O(1)
    assert worst_o < 2e-5, f"{op}: worst output error {worst_o} (seed 3)"
    assert worst_s[0] < 2e-5, f"{op}: worst committed-state error {worst_s[0]} at (step, layer, hv, k, v) {worst_s[1]}"
    check_pools(pools, 2 * 16 * 8)


@pytest.mark.parametrize("op", ["gdn", "kda"])
def test_commit_one_fewer_is_caught(op):
    _, worst_s, _ = run(op, fault="commit_one_fewer")
    assert worst_s[0] > 1e-2, worst_s


@pytest.fixture
def reversed_grid():
    """The interpreter runs a launch's programs from the last grid index to the first; restored afterwards."""
    from triton.runtime import interpreter as itp

    b = itp.interpreter_builder
    dims, set_dim, set_idx = [1, 1, 1], b.set_grid_dim, b.set_grid_idx

    def grid_dim(x, y, z):
        dims[:] = [x, y, z]
        set_dim(x, y, z)

    b.set_grid_dim = grid_dim
    b.set_grid_idx = lambda x, y, z: set_idx(dims[0] - 1 - x, dims[1] - 1 - y, dims[2] - 1 - z)
    yield
    b.set_grid_dim, b.set_grid_idx = set_dim, set_idx


@pytest.mark.parametrize("op,V", [("gdn", 128), ("kda", 64)])
def test_split_v_flush_fails_in_grid_order(op, V):
    """V over two programs (BV 64 GDN, 32 KDA): the interpreter runs program i_v = 0 first, which overwrites
    records 0..T-1 (k, g) before program i_v = 1 folds them: the committed state is wrong (the peer fault)."""
    _, worst_s, _ = run(op, K=16, V=V)
    assert worst_s[0] > 1e-2, f"{op}: the split-V flush agreed ({worst_s}); the peer fault is gone?"
    assert worst_s[1][4] >= V // 2, f"{op}: worst element {worst_s[1]} is not in the second program's columns"


@pytest.mark.parametrize("op,V", [("gdn", 128), ("kda", 64)])
def test_split_v_flush_agrees_with_the_grid_reversed(op, V, reversed_grid):
    """The same scenario with program i_v = 1 running first: within the fp32 bound, so the adapter's mapping
    is right and the difference above is the order of the peer's programs alone."""
    worst_o, worst_s, _ = run(op, K=16, V=V)
    assert worst_s[0] < 2e-5 and worst_o < 2e-5, (worst_o, worst_s)
