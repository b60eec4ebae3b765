"""The committed conv.* fixtures through the kit's fixture check: an independent NumPy implementation passes
every one, each catalogued slip fails at least one with a report naming the worst element, and a tampered
file fails at the tampered element."""
import os

import numpy as np
import pytest

from conftest import FIXTURES
import numpy_conv_reference
import replayssm_kit as rk
from replayssm_kit.pytest_helper import fixture_params

CONV_OPS = {"conv.prefill", "conv.update", "conv.commit"}
CONV = os.path.join(FIXTURES, "conv")


@pytest.mark.parametrize("fx", fixture_params(CONV, ops=CONV_OPS))
def test_numpy_conv_passes_committed_fixture(fx):
    fx.assert_passes(numpy_conv_reference.implementation())


def test_every_conv_op_is_committed():
    ops = {rk.read_op(p) for p in rk.find_fixtures(CONV)}
    assert ops == CONV_OPS


def test_a_claimed_tier_keeps_the_stored_conv_bound():
    # conv fixtures carry no GDN/KDA model configuration: a tier claim does not replace their derived bound
    for path in rk.find_fixtures(CONV, ops="conv.update")[:2]:
        fx = rk.load_fixture(path)
        r = fx.check(numpy_conv_reference.implementation(), tier="bf16")
        assert r.ok, r.summary()
        assert all(t.tier is None and t.tolerance == fx.tolerance[t.name] for t in r.tensors)


@pytest.mark.parametrize("fault", numpy_conv_reference.FAULTS)
def test_each_conv_slip_fails_a_committed_fixture(fault):
    failed = []
    for path in rk.find_fixtures(CONV):
        fx = rk.load_fixture(path)
        r = fx.check(numpy_conv_reference.implementation(faults=[fault]))
        if not r.ok:
            worst = r.worst()
            assert worst is not None and worst.report.mismatches > 0, r.summary()
            assert "worst@" in r.summary()
            failed.append(fx.name)
    assert failed, f"{fault} passes every committed conv fixture"


def test_tampered_conv_state_fails_naming_the_element(tmp_path):
    src = next(p for p in rk.find_fixtures(CONV, ops="conv.commit") if "n2" in os.path.basename(p))
    tensors, dtypes, meta = rk.read_safetensors(src)
    s = tensors["out.state"].copy()
    flat = s.reshape(-1)
    flat[5] += 1.0
    tensors["out.state"] = s
    path = str(tmp_path / "tampered.safetensors")
    rk.write_safetensors(path, {k: (v, dtypes[k]) for k, v in tensors.items()}, meta)
    r = rk.load_fixture(path).check(numpy_conv_reference.implementation())
    bad = [t for t in r.tensors if not t.ok]
    assert [t.name for t in bad] == ["out.state"]
    assert bad[0].report.worst_index == 5
    assert bad[0].report.worst_coords == tuple(int(c) for c in np.unravel_index(5, s.shape))
