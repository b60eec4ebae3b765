"""The NumPy raw-payload example target (examples/numpy_replay.py) on its own: the golden fixtures of every
variant (GDN/KDA, both gates, both l2norms, both layouts, F32/BF16 activations and states, GVA) through its
step/commit, and the lifecycle rules the judge's campaigns rely on (PAD rows, fresh prefill, n = 0)."""
import os
import sys

import numpy as np
import pytest

from conftest import FIXTURES, HERE
import replayssm_kit as rk
from replayssm_kit.pytest_helper import fixture_params
from replayssm_kit.target import Row, TargetError

sys.path.insert(0, os.path.join(os.path.dirname(HERE), "examples"))
from numpy_replay import NumpyReplay  # noqa: E402

GOLDEN = os.path.join(FIXTURES, "golden")


def _as_act(o, act):
    return rk.bf16_bits_to_f32(rk.f32_to_bf16_bits(o)) if act == "BF16" else o  # what serve() answers


def _target(model, num_slots, max_T, fault=None, stride=0):
    t = NumpyReplay(fault)
    cfg = dict(model, num_layers=1)
    t.setup({"config": cfg, "num_slots": num_slots, "slot_stride": stride, "max_T": max_T,
             "poison": np.float32(np.nan)}, [])
    return t


def _run_mtp_batch(fx, fault=None):
    """mtp_batch: B verify rows of T tokens from pool slots, then a commit with per-row accepted counts."""
    m, i = fx.model, fx.inputs
    B, T = i["q"].shape[:2]
    pool = i["pool"]
    t = _target(m, pool.shape[0], T, fault)
    t.params = [(fx.params["A_log"], fx.params["dt_bias"].reshape(m["HV"], -1))]
    t.pools[0][:] = pool.reshape(pool.shape[0], -1)
    slots = [int(s) for s in i["slot"]]
    rows = [Row(s, s, T, r * T, 0, "verify", False) for r, s in enumerate(slots)]
    flat = {name: i[name].reshape(B * T, *i[name].shape[2:]) for name in ("q", "k", "v", "b")}
    flat["a"] = i["a"].reshape(B * T, m["HV"], -1)
    o = t.step(rows, [flat])[0]
    t.commit([Row(s, s, T, r * T, int(i["accepted"][r]), "verify", False) for r, s in enumerate(slots)])
    return {"out.o": _as_act(o, m["act_dtype"]).reshape(B, T, m["HV"], m["V"]),
            "out.pool": t.pools[0].reshape(pool.shape)}


def _run_replay_commit(fx):
    """replay_commit: one verify row of T tokens from in.state, committed with in.accepted."""
    m, i = fx.model, fx.inputs
    T = i["k"].shape[0]
    t = _target(m, 1, T)
    t.params = [(fx.params["A_log"], fx.params["dt_bias"].reshape(m["HV"], -1))]
    t.pools[0][0] = i["state"].reshape(-1)
    x = {"q": np.zeros_like(i["k"]), "k": i["k"], "v": i["v"], "a": i["a"].reshape(T, m["HV"], -1), "b": i["b"]}
    t.step([Row(0, 0, T, 0, 0, "verify", False)], [x])
    t.commit([Row(0, 0, T, 0, int(i["accepted"]), "verify", False)])
    return {"out.state": t.committed_state(0, 0)}


@pytest.mark.parametrize("fx", fixture_params(GOLDEN, ops="mtp_batch"))
def test_example_passes_every_mtp_batch_fixture(fx):
    fx.assert_passes(_run_mtp_batch)


@pytest.mark.parametrize("fx", fixture_params(GOLDEN, ops="replay_commit"))
def test_example_passes_every_replay_commit_fixture(fx):
    fx.assert_passes(_run_replay_commit)


def test_the_fixtures_cover_every_variant_the_example_claims():
    seen = set()
    for p in rk.find_fixtures(GOLDEN, {"mtp_batch"}):
        m = rk.load_fixture(p).model
        seen |= {m["op"], m["l2norm"], m["layout"], "act:" + m["act_dtype"], "state:" + m["state_dtype"],
                 "gva" if m["HV"] > m["H"] else "no-gva", "beta-rounded" if m["round_beta_to_act"] else "beta"}
        if m["op"] == "kda":
            seen.add(m["kda_gate"])
    assert seen >= {"gdn", "kda", "rsqrt_mul", "div_sqrt", "kv", "vk", "act:F32", "act:BF16", "state:F32",
                    "state:BF16", "gva", "no-gva", "softplus", "lower_bound_sigmoid", "beta-rounded", "beta"}


def test_the_seeded_fault_fails_a_fixture():
    fx = rk.load_fixture(os.path.join(GOLDEN, "tiny-gdn", "tiny-gdn__mtp_batch__B4_T4.safetensors"))
    assert any(0 < n for n in fx.inputs["accepted"])
    assert not fx.check(lambda f: _run_mtp_batch(f, "off_by_one_accepted")).ok


MODEL = {"op": "kda", "H": 1, "HV": 2, "K": 4, "V": 3, "l2norm": "rsqrt_mul", "l2_eps": 1e-6, "q_scale": 0.0,
         "round_beta_to_act": False, "kda_gate": "softplus", "lower_bound": -5.0, "act_dtype": "F32",
         "state_dtype": "F32", "layout": "kv"}


def _inputs(n, seed=0):
    rng = np.random.default_rng(seed)
    shapes = {"q": (n, 1, 4), "k": (n, 1, 4), "v": (n, 2, 3), "a": (n, 2, 4), "b": (n, 2)}
    return [{k: rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()}]


def _fresh_target(model=MODEL, stride=28):
    t = _target(model, 3, 4, stride=stride)
    t.params = [(np.full(2, -1.0, np.float32), np.zeros((2, 4), np.float32))]
    return t


def test_pad_rows_read_and_write_nothing_and_output_zeros():
    t = _fresh_target()
    t.step([Row(1, 1, 3, 0, 3, "prefill", True)], _inputs(3))  # slot 1 holds a state, the others NaN poison
    before = t.pools[0].copy()
    rows = [Row(-1, -1, 2, 0, 0, "verify", False), Row(1, 1, 2, 2, 0, "verify", False)]
    o = t.step(rows, _inputs(4, seed=1))[0]
    assert np.all(o[:2] == 0) and np.all(np.isfinite(o[2:])) and np.any(o[2:] != 0)
    t.commit([Row(-1, -1, 2, 0, 2, "verify", False), Row(1, 1, 2, 2, 0, "verify", False)])
    assert np.array_equal(t.pools[0].view(np.uint32), before.view(np.uint32))  # n = 0 and PAD: bitwise equal


def test_fresh_prefill_starts_from_zero_and_the_gap_keeps_its_poison():
    t = _fresh_target()
    t.step([Row(0, 0, 2, 0, 2, "prefill", True)], _inputs(2))
    assert np.all(np.isfinite(t.pools[0][0, :24])) and np.all(np.isnan(t.pools[0][0, 24:]))
    again = _fresh_target()
    again.pools[0][0, :24] = 5.0  # whatever the slot held before: a fresh prefill ignores it
    again.step([Row(0, 0, 2, 0, 2, "prefill", True)], _inputs(2))
    assert np.array_equal(again.pools[0], t.pools[0], equal_nan=True)


def test_layouts_hold_the_same_state_transposed():
    kv, vk = _fresh_target(), _fresh_target(dict(MODEL, layout="vk"))
    for t in (kv, vk):
        t.step([Row(2, 2, 4, 0, 4, "prefill", True)], _inputs(4))
        t.step([Row(2, 2, 3, 0, 0, "verify", False)], _inputs(3, seed=5))
        t.commit([Row(2, 2, 3, 0, 2, "verify", False)])
    a, b = kv.committed_state(0, 2), vk.committed_state(0, 2)
    assert a.shape == (2, 4, 3) and b.shape == (2, 3, 4)
    assert np.array_equal(a, b.transpose(0, 2, 1))  # the same operations on every element


def test_commit_checks_accepted_and_the_batch():
    t = _fresh_target()
    t.step([Row(0, 0, 2, 0, 2, "prefill", True)], _inputs(2))
    t.step([Row(0, 0, 2, 0, 0, "verify", False)], _inputs(2))
    with pytest.raises(TargetError) as e:
        t.commit([Row(0, 0, 2, 0, 3, "verify", False)])
    assert e.value.field == "rows[0].accepted"
    with pytest.raises(TargetError, match="last step's rows"):
        t.commit([Row(1, 1, 2, 0, 1, "verify", False)])


def test_a_bf16_pool_holds_bf16_values_rounded_once_at_commit():
    t = _fresh_target(dict(MODEL, state_dtype="BF16"))
    t.step([Row(0, 0, 4, 0, 4, "prefill", True)], _inputs(4))
    t.step([Row(0, 0, 3, 0, 0, "verify", False)], _inputs(3, seed=2))
    t.commit([Row(0, 0, 3, 0, 3, "verify", False)])
    state = t.pools[0][0, :24]
    assert np.array_equal(state, rk.bf16_bits_to_f32(rk.f32_to_bf16_bits(state)))
    assert np.any(rk.f32_to_bf16_bits(state) & 0xFF)  # not trivially representable: low mantissa bits used


def test_n_zero_writes_nothing_even_to_another_write_slot():
    t = _fresh_target()
    t.step([Row(0, 0, 2, 0, 2, "prefill", True)], _inputs(2))
    before = t.pools[0].copy()
    t.step([Row(0, 2, 2, 0, 0, "verify", False)], _inputs(2, seed=3))
    t.commit([Row(0, 2, 2, 0, 0, "verify", False)])
    assert np.array_equal(t.pools[0].view(np.uint32), before.view(np.uint32))
    t.step([Row(0, 2, 2, 0, 0, "verify", False)], _inputs(2, seed=3))
    t.commit([Row(0, 2, 2, 0, 1, "verify", False)])
    assert np.all(np.isfinite(t.pools[0][2, :24]))  # n = 1 writes write_slot, from slot 0's checkpoint
    assert np.array_equal(t.pools[0][0].view(np.uint32), before[0].view(np.uint32))
