"""End to end: a NumPy implementation checked against the committed fixtures passes; wrong implementations
and tampered fixtures fail with a report that names the worst element."""
import os
import shutil

import numpy as np
import pytest

from conftest import FIXTURES
import numpy_reference
import replayssm_kit as rk
from replayssm_kit.pytest_helper import fixture_params

GDN_OPS = {"recurrent", "chunked", "mtp_verify", "replay_commit", "mtp_batch"}
GOLDEN = os.path.join(FIXTURES, "golden")


def small(path):
    return os.path.getsize(path) < 300_000


# The helper in its intended use: every small GDN/KDA fixture of the repository, one test each.
@pytest.mark.parametrize("fx", fixture_params(FIXTURES, ops=GDN_OPS, select=small))
def test_numpy_reference_passes_committed_fixture(fx):
    fx.assert_passes(numpy_reference.implementation())


def _one(name):
    for p in rk.find_fixtures(GOLDEN):
        if os.path.basename(p) == name:
            return rk.load_fixture(p)
    raise FileNotFoundError(name)


@pytest.mark.parametrize("fault,fixture", [
    ("modulo_gva", "small-gva3__recurrent__T12.safetensors"),
    ("no_l2norm", "tiny-kda__recurrent__T12.safetensors"),
    ("decay_after_read", "small-kv-neq__mtp_verify__T4.safetensors"),
])
def test_wrong_implementation_fails(fault, fixture):
    fx = _one(fixture)
    result = fx.check(numpy_reference.implementation(faults=[fault]))
    assert not result.ok
    worst = result.worst()
    assert worst is not None and worst.report.mismatches > 0
    assert "FAIL" in result.summary() and "worst@" in result.summary()
    with pytest.raises(AssertionError, match="worst@"):
        fx.assert_passes(numpy_reference.implementation(faults=[fault]))


def test_tampered_fixture_fails_naming_the_tampered_element(tmp_path):
    src = os.path.join(GOLDEN, "tiny-gdn", "tiny-gdn__recurrent__T12.safetensors")
    tensors, dtypes, meta = rk.read_safetensors(src)
    o = tensors["out.o"].copy()
    flat = o.reshape(-1)
    flat[37] += 0.05  # far outside allclose(1e-5, 1e-4)
    tensors["out.o"] = o
    path = str(tmp_path / "tampered.safetensors")
    rk.write_safetensors(path, {k: (v, dtypes[k]) for k, v in tensors.items()}, meta)
    fx = rk.load_fixture(path)
    result = fx.check(numpy_reference.implementation())
    assert not result.ok
    bad = [t for t in result.tensors if not t.ok]
    assert [t.name for t in bad] == ["out.o"]
    assert bad[0].report.worst_index == 37
    assert bad[0].report.worst_coords == tuple(int(c) for c in np.unravel_index(37, o.shape))
    assert "worst@37" in result.summary()


def test_missing_and_misshapen_outputs_are_errors():
    fx = _one("tiny-gdn__recurrent__T12.safetensors")
    good = numpy_reference.implementation()(fx)
    r = fx.compare_outputs({"out.o": good["out.o"]})
    assert not r.ok and any("out.state" in e for e in r.errors)
    r = fx.compare_outputs({"o": good["out.o"][:-1], "state": good["out.state"]})
    assert not r.ok and any("shape" in e for e in r.errors)
    r = fx.compare_outputs({"o": good["out.o"][None], "state": good["out.state"]})  # leading batch of one
    assert r.ok, r.summary()


def test_loader_refuses_invalid_fixtures(tmp_path):
    src = os.path.join(GOLDEN, "tiny-gdn", "tiny-gdn__recurrent__T12.safetensors")
    tensors, dtypes, meta = rk.read_safetensors(src)
    bad_meta = dict(meta)
    del bad_meta["tolerance"]
    path = str(tmp_path / "x.safetensors")
    rk.write_safetensors(path, {k: (v, dtypes[k]) for k, v in tensors.items()}, bad_meta)
    with pytest.raises(rk.FixtureError, match="tolerance"):
        rk.load_fixture(path)
    rk.write_safetensors(path, {**{k: (v, dtypes[k]) for k, v in tensors.items()}, "x.y": (np.zeros(1), "F32")}, meta)
    with pytest.raises(rk.FixtureError, match="prefixes"):
        rk.load_fixture(path)


def test_fixture_params_refuses_an_empty_selection(tmp_path):
    with pytest.raises(ValueError, match="no fixtures"):
        fixture_params(str(tmp_path))
    params = fixture_params(os.path.join(GOLDEN, "tiny-gdn"), ops="mtp_batch")
    assert len(params) == 3 and all("mtp_batch" in p.id for p in params)


def test_save_fixture_round_trips(tmp_path):
    path = str(tmp_path / "double.safetensors")
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    rk.save_fixture(path, "example.double", {}, {"in.x": (x, "F32"), "out.y": (2 * x, "BF16")},
                    {"out.y": "exact"}, extra_metadata={"peer.note": "test"})
    fx = rk.load_fixture(path)
    assert fx.dtypes["out.y"] == "BF16" and fx.extra_metadata == {"peer.note": "test"}
    assert fx.check(lambda f: {"y": 2 * f.inputs["x"]}).ok
    assert not fx.check(lambda f: {"y": 2 * f.inputs["x"] + 1}).ok
