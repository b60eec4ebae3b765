"""Engine protocol 0.2 in the kit: prefix snapshots and migration.

The serve_engine loop negotiates the version (0.2 claims reach only a judge speaking 0.2) and declines the new
commands unless claimed. The NumPy example engine keeps snapshots by the track step rule: checked here on the
engine alone against a second request that prefills exactly the first X tokens (same arithmetic, one rounding
at X), with rejected drafts that reach a boundary taking no snapshot, a snapshot hit, and a migration that moves
state and snapshot; each seeded snapshot fault fails these checks. The end-to-end part (the C++ judge running a
campaign with snapshots on, and catching the faults) skips when the CLI is absent.
"""
import glob
import os
import shlex
import subprocess
import sys

import numpy as np
import pytest

from conftest import FIXTURES, HERE
import replayssm_kit as rk
from replayssm_kit.engine import EngineTarget, _Loop
from replayssm_kit.protocol import Frame
from replayssm_kit.target import TargetError

sys.path.insert(0, os.path.join(os.path.dirname(HERE), "examples"))
from numpy_engine import NumpyEngine  # noqa: E402

EXAMPLE = os.path.join(os.path.dirname(HERE), "examples", "numpy_engine.py")
COMMAND = f"{shlex.quote(sys.executable)} {shlex.quote(EXAMPLE)}"
SEED = 20261201


def _call(loop, msg):
    answer, _, status = loop.answer(Frame(msg, {}, {}))
    return answer, status


class _Claims(EngineTarget):
    def capabilities(self):
        return {"name": "claims", "prefix_snapshots": True, "migrates": True}


def test_hello_negotiates_the_minor_and_claims_0_2_only_to_a_0_2_judge():
    new, _ = _call(_Loop(_Claims(), None), {"op": "hello", "protocol": "replayssm.engine", "version": [0, 2]})
    assert new["version"] == [0, 2] and new["capabilities"]["prefix_snapshots"] is True
    old, _ = _call(_Loop(_Claims(), None), {"op": "hello", "protocol": "replayssm.engine", "version": [0, 1]})
    assert old["ok"] and old["version"] == [0, 1], old
    assert "prefix_snapshots" not in old["capabilities"] and "migrates" not in old["capabilities"]


def test_a_capability_that_is_not_a_boolean_is_refused_at_hello():
    class Bad(EngineTarget):
        def capabilities(self):
            return {"prefix_snapshots": "yes"}
    bad, status = _call(_Loop(Bad(), None), {"op": "hello", "protocol": "replayssm.engine", "version": [0, 2]})
    assert not bad["ok"] and bad["error"]["field"] == "capabilities.prefix_snapshots" and status == 1


@pytest.mark.parametrize("op", ["snapshot", "snapshot_hit", "migrate"])
def test_an_engine_that_does_not_claim_them_declines_the_0_2_commands(op):
    loop = _Loop(EngineTarget(), None)
    _call(loop, {"op": "hello", "protocol": "replayssm.engine", "version": [0, 2]})
    loop.session = object()  # past setup: the command itself must be refused
    answer, _ = _call(loop, {"op": op, "req": 0})
    assert not answer["ok"] and answer["error"]["field"] == "op" and "capability" in answer["error"]["message"]


# --- the example engine on its own ---------------------------------------------------------------------------

def _model(state_dtype, layout):
    path = sorted(glob.glob(os.path.join(FIXTURES, "golden", "tiny-gdn", "*mtp_batch*.safetensors")))[0]
    return dict(rk.load_fixture(path).model, num_layers=2, state_dtype=state_dtype, layout=layout)


def _engine(model, block, fault=None):
    rng = np.random.default_rng(SEED)
    HV = model["HV"]
    params = [(rng.uniform(-1, 1, HV).astype(np.float32), rng.uniform(-1, 1, (HV, 1)).astype(np.float32))
              for _ in range(model["num_layers"])]
    e = NumpyEngine(fault)
    e.setup({"config": model, "num_slots": 3 * 4 + 2, "slot_stride": 0, "max_T": 4, "poison": np.float32(np.nan)},
            {"max_live": 4, "commit": "same_iteration", "buffers": "in_place", "block": block}, params)
    return e


def _tokens(model, n, rng):
    H, HV, K, V = model["H"], model["HV"], model["K"], model["V"]
    f = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
    return [{"q": f(n, H, K), "k": f(n, H, K), "v": f(n, HV, V), "a": f(n, HV, 1), "b": f(n, HV)}
            for _ in range(model["num_layers"])]


def _cut(x, t0, t1):
    return [{k: v[t0:t1] for k, v in layer.items()} for layer in x]


def _state_after_prefill(engine, req, prompt):
    """A second request that prefills exactly these tokens in one chunk: its committed state is the state after
    them with one rounding at the end, the track step rule's truth for a snapshot at len(prompt)."""
    engine.admit(req, prompt, 4)
    engine.step([{"req": req, "T": prompt[0]["q"].shape[0], "accepted": 0, "eog_at": 0}], [_cut(prompt, 0, 0)])
    states = [np.array(engine.committed_state(req, l)) for l in range(engine.L)]
    engine.finish(req)
    return states


def _assert_snapshot(engine, req, X, want, layer_ok=True):
    got, _ = engine.snapshot(req, None)
    assert got == X, f"snapshot of request {req} at {got} tokens, the track step rule puts it at {X} (seed {SEED})"
    for l, w in enumerate(want):
        _, s = engine.snapshot(req, l)
        bad = np.argwhere(np.asarray(s) != w)
        assert (bad.size == 0) == layer_ok, \
            f"request {req} layer {l}: snapshot at {X} differs at {bad[:1].tolist()} (seed {SEED})"


@pytest.mark.parametrize("state_dtype,layout", [("F32", "kv"), ("BF16", "vk")])
def test_the_track_step_rule_snapshots_the_boundary_crossed_not_the_run_end(state_dtype, layout):
    model = _model(state_dtype, layout)
    rng = np.random.default_rng(SEED)
    prompt, window = _tokens(model, 5, rng), _tokens(model, 4, rng)
    e = _engine(model, block=3)
    e.admit(0, prompt, 8)
    none = _cut(prompt, 0, 0)
    e.step([{"req": 0, "T": 4, "accepted": 0, "eog_at": 0}], [none])  # prefill 0 -> 4 crosses 3
    _assert_snapshot(e, 0, 3, _state_after_prefill(e, 9, _cut(prompt, 0, 3)))
    assert 9 not in e.slot_map() and len(e.slot_map()[0]) == 2  # the snapshot's slot is the request's own
    e.step([{"req": 0, "T": 4, "accepted": 0, "eog_at": 0}], [none])  # prefill 4 -> 5: no boundary
    _assert_snapshot(e, 0, 3, _state_after_prefill(e, 10, _cut(prompt, 0, 3)))
    # Drafts reach 6 and 9 but nothing is accepted: no snapshot moves.
    e.step([{"req": 0, "T": 4, "accepted": 0, "eog_at": 0}], [window])
    _assert_snapshot(e, 0, 3, _state_after_prefill(e, 11, _cut(prompt, 0, 3)))
    # One accepted token: 5 -> 6 crosses 6, the run's end: the snapshot is the committed state (rounded at the
    # end of each committed call, 4 + 1 + 1 tokens).
    e.step([{"req": 0, "T": 4, "accepted": 1, "eog_at": 0}], [window])
    _assert_snapshot(e, 0, 6, [np.array(e.committed_state(0, l)) for l in range(e.L)])


def test_the_seeded_run_end_fault_fails_the_track_step_check():
    model = _model("F32", "kv")
    prompt = _tokens(model, 5, np.random.default_rng(SEED))
    e = _engine(model, block=3, fault="snapshot_at_run_end")
    e.admit(0, prompt, 8)
    e.step([{"req": 0, "T": 4, "accepted": 0, "eog_at": 0}], [_cut(prompt, 0, 0)])
    _assert_snapshot(e, 0, 3, _state_after_prefill(e, 9, _cut(prompt, 0, 3)), layer_ok=False)


@pytest.mark.parametrize("fault", [None, "migration_drops_snapshot"])
def test_a_snapshot_hit_restores_a_private_copy_and_a_migration_moves_state_and_snapshot(fault):
    model = _model("F32", "kv")
    rng = np.random.default_rng(SEED)
    prompt, more = _tokens(model, 4, rng), _tokens(model, 2, rng)
    e = _engine(model, block=2, fault=fault)
    e.admit(0, prompt, 8)
    e.step([{"req": 0, "T": 3, "accepted": 0, "eog_at": 0}], [_cut(prompt, 0, 0)])  # 0 -> 3: snapshot at 2
    snap = [np.array(e.snapshot(0, l)[1]) for l in range(e.L)]
    e.snapshot_hit(1, 0, more, 4)
    assert e.requests()[1] == {"status": "running", "committed": 2, "to_prefill": 2, "generated": 0}
    assert e.snapshot(1, None) == (0, None)  # a hit starts without a snapshot of its own
    assert not set(e.slot_map()[1]) & set(e.slot_map()[0])  # copy-on-write into a private slot
    for l in range(e.L):
        assert np.array_equal(e.committed_state(1, l), snap[l])
    before = {l: np.array(e.committed_state(0, l)) for l in range(e.L)}
    slots = e.slot_map()[0]
    e.migrate(0)
    assert not set(e.slot_map()[0]) & set(slots), "a migration moves the request to other slots"
    for l in range(e.L):
        assert np.array_equal(e.committed_state(0, l), before[l])
    if fault is None:
        _assert_snapshot(e, 0, 2, snap)
    else:
        assert e.snapshot(0, None)[0] == 0  # the seeded slip: the snapshot stayed behind


def test_a_snapshot_hit_on_a_request_without_snapshot_is_an_error_naming_the_field():
    model = _model("F32", "kv")
    e = _engine(model, block=4)
    e.admit(0, _tokens(model, 2, np.random.default_rng(SEED)), 4)
    with pytest.raises(TargetError) as err:
        e.snapshot_hit(1, 0, _tokens(model, 1, np.random.default_rng(SEED)), 4)
    assert err.value.field == "from"


# --- through the C++ judge -----------------------------------------------------------------------------------

def _fuzz(cli, command, *extra):
    return subprocess.run([cli, "fuzz", "--level", "engine", "--target", f"exec:{command}", "--preset", "tiny-gdn",
                           *extra], capture_output=True, text=True, timeout=600)


def test_the_example_passes_a_campaign_with_snapshots_and_migrations_on(cli):  # noqa: F811
    r = _fuzz(cli, COMMAND, "--cases", "30", "--seed", "5")
    assert r.returncode == 0 and "30 cases passed" in r.stdout, r.stdout + r.stderr
    assert "not covered" not in r.stdout, r.stdout


def test_an_engine_claiming_neither_is_reported_not_covered(cli):  # noqa: F811
    r = _fuzz(cli, f"{COMMAND} --claims none", "--cases", "5")
    assert r.returncode == 0 and "not covered: prefix snapshots" in r.stdout and "migrate" in r.stdout, r.stdout


@pytest.mark.parametrize("fault", ["snapshot_at_run_end", "migration_drops_snapshot"])
def test_each_seeded_snapshot_fault_is_caught_at_the_default_budget(cli, fault, tmp_path):  # noqa: F811
    r = _fuzz(cli, f"{COMMAND} --fault {fault}", "--dump-dir", str(tmp_path))
    assert r.returncode == 1 and "FAIL" in r.stdout and "snapshot" in r.stdout, r.stdout + r.stderr
    dump = r.stdout.split("replay the shrunk case: replayssm fuzz --replay ")[1].split("\n")[0]
    fixed = subprocess.run([cli, "fuzz", "--replay", dump, "--target", f"exec:{COMMAND}"], capture_output=True,
                           text=True, timeout=600)
    assert fixed.returncode == 0 and "case passes now" in fixed.stdout, fixed.stdout + fixed.stderr
