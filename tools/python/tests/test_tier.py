"""The kit's tier tolerances equal the C++ judge's (the same strings, printed by core/tier.cpp for the same
inputs: qwen3.5's model, BF16 activations and F32 state, and with F32 activations), and budgets compare as
documented."""
import numpy as np
import pytest

from replayssm_kit.compare import Tolerance, compare
from replayssm_kit.tiers import tier_tolerance, unit_roundoff

QWEN35 = {"act_dtype": "BF16", "state_dtype": "F32", "round_beta_to_act": False, "K": 128}

EXPECTED = [  # (tier, state, scale, spelling) from tier_tolerance in C++
    ("fp32", False, 0.5, "allclose(atol=0.015625,rtol=0)"),
    ("fp32", False, 3.0, "allclose(atol=0.046875,rtol=0)"),
    ("fp32", True, 0.5, "allclose(atol=2e-05,rtol=0)"),
    ("fp32", True, 3.0, "allclose(atol=6.000000000000001e-05,rtol=0)"),
    ("tf32", False, 0.5, "budget(rel_rms=0.01171875,atol=0.015625)"),
    ("tf32", False, 3.0, "budget(rel_rms=0.01171875,atol=0.046875)"),
    ("tf32", True, 0.5, "budget(rel_rms=0.00390625,atol=0.0078125)"),
    ("tf32", True, 3.0, "budget(rel_rms=0.00390625,atol=0.0234375)"),
    ("bf16", False, 0.5, "budget(rel_rms=0.0234375,atol=0.03125)"),
    ("bf16", False, 3.0, "budget(rel_rms=0.0234375,atol=0.09375)"),
    ("bf16", True, 0.5, "budget(rel_rms=0.015625,atol=0.03125)"),
    ("bf16", True, 3.0, "budget(rel_rms=0.015625,atol=0.09375)"),
]


@pytest.mark.parametrize("tier,state,scale,spelling", EXPECTED)
def test_tier_tolerance_matches_the_cpp_judge(tier, state, scale, spelling):
    assert str(tier_tolerance(tier, QWEN35, scale, state)) == spelling
    assert Tolerance.parse(spelling) == tier_tolerance(tier, QWEN35, scale, state)


def test_f32_activations_drop_the_storage_terms():
    m = dict(QWEN35, act_dtype="F32")
    assert str(tier_tolerance("fp32", m, 2.0, False)) == "allclose(atol=4e-05,rtol=0)"
    assert str(tier_tolerance("tf32", m, 2.0, False)) == "budget(rel_rms=0.00390625,atol=0.015625)"
    assert str(tier_tolerance("bf16", m, 2.0, False)) == "budget(rel_rms=0.015625,atol=0.0625)"


def test_unknown_tier_is_refused():
    with pytest.raises(ValueError, match="unknown precision tier 'fp16'"):
        unit_roundoff("fp16")


def test_budget_checks_both_the_rms_and_every_element():
    ref = np.linspace(-1.0, 1.0, 1000)
    tol = Tolerance("budget", ratio=1e-3, atol=1e-2)
    noise = np.resize([1e-4, -1e-4], 1000)
    assert compare(ref, ref + noise, tol).ok
    spike = ref.copy()
    spike[17] += 2e-2  # one element beyond atol: RMS alone would pass
    r = compare(ref, spike, tol)
    assert not r.ok and r.worst_index == 17
    drift = ref + 2e-3  # every element inside atol, RMS beyond the budget
    assert not compare(ref, drift, tol).ok
    tiny = ref * 1e-4  # the RMS is floored at 1: tiny references are judged on the scale of 1
    assert compare(tiny, tiny + noise, tol).ok


def test_a_fixture_checked_at_a_tier_names_both_tolerances(tmp_path):
    from replayssm_kit.fixture import load_fixture, save_fixture
    model = dict(QWEN35, op="gdn", H=1, HV=1, K=4, V=4)
    path = str(tmp_path / "f.safetensors")
    want = np.linspace(-2.0, 2.0, 16, dtype=np.float32).reshape(4, 4)
    save_fixture(path, "recurrent", {"model": model, "args": {}},
                 {"out.o": (want, "F32"), "out.state": (want, "F32")}, {"out.o": "allclose(atol=1e-05,rtol=1e-05)",
                                                      "out.state": "allclose(atol=1e-05,rtol=1e-05)"})
    fx = load_fixture(path)
    off = want + np.float32(3e-3)  # beyond the stored fp32 bound, inside the tf32 budget for outputs
    assert not fx.check(lambda f: {"o": off, "state": want}).ok
    r = fx.check(lambda f: {"o": off, "state": want}, tier="tf32")
    assert r.ok, r.summary()
    assert "judged at the tf32 tier; stored tolerance allclose(atol=1e-05,rtol=1e-05)" in r.summary()
    bad = want.copy()
    bad[1, 2] += 0.5  # an O(1) error is caught at every tier
    for tier in ("fp32", "tf32", "bf16"):
        assert not fx.check(lambda f: {"o": want, "state": bad}, tier=tier).ok


def test_pad_rows_of_mtp_batch_are_dont_care_unless_zeros_are_claimed():
    import glob
    import os
    from conftest import REPO
    from replayssm_kit.fixture import load_fixture
    paths = sorted(glob.glob(os.path.join(REPO, "fixtures", "golden", "**", "*mtp_batch*.safetensors"), recursive=True))
    fx = next(f for f in map(load_fixture, paths) if (np.asarray(f.tensors["in.slot"]) < 0).any())
    pad = np.asarray(fx.tensors["in.slot"]).reshape(-1) < 0
    got = {k: np.array(v, dtype=np.float32, copy=True) for k, v in fx.expected.items()}
    got["o"][pad] = 7.0  # garbage in the PAD rows' outputs only
    assert not fx.check(lambda f: got).ok  # claimed zeros (the default): caught
    assert fx.check(lambda f: got, pad_outputs_zero=False).ok  # not claimed: don't-care
    got["o"][~pad] += 1.0  # real rows are judged either way
    assert not fx.check(lambda f: got, pad_outputs_zero=False).ok
