"""The tree fixture ops (tree.verify, tree.commit, tree.conv_update, tree.conv_commit) through the target protocol
(1.11): what hello advertises to judges before and after 1.11, the NumPy example (examples/numpy_tree_ops.py)
reproducing every committed tree fixture (fixtures/trees) at its stored tolerance through serve(), and each seeded
tree fault failing the fixtures that can show it and no other: a chain (top-k 1) is immune to the faults that
confuse the flattened order with the ancestors, a commit of nothing accepted to all of them. The judge part (the
C++ CLI's check --target) skips without the CLI."""
import os
import shlex
import subprocess
import sys

import pytest

from conftest import FIXTURES, HERE
import replayssm_kit as rk
from test_conv_protocol import fixture_cmd, hello, session

sys.path.insert(0, os.path.join(os.path.dirname(HERE), "examples"))
from numpy_replay import NumpyReplay  # noqa: E402
from numpy_tree_ops import TREE_FAULTS, TREE_OPS  # noqa: E402

TREES = os.path.join(FIXTURES, "trees")
TREE_FIXTURES = rk.find_fixtures(TREES, set(TREE_OPS))
EXAMPLE = os.path.join(os.path.dirname(HERE), "examples", "numpy_replay.py")


def answer(target, fx, minor=11):
    a = session(target, hello(minor), fixture_cmd(fx))
    return a[0], a[1]


def test_the_tree_ops_are_advertised_only_to_a_judge_speaking_1_11():
    for minor, advertised in ((10, False), (11, True)):
        h = session(NumpyReplay(), hello(minor))[0]
        ops = h.msg["capabilities"]["fixture_ops"]
        assert all((op in ops) == advertised for op in TREE_OPS), (minor, ops)
        assert "mrope.rotary" in ops  # the 1.10 op stays


def test_every_op_has_committed_fixtures():
    assert {rk.read_op(p) for p in TREE_FIXTURES} == set(TREE_OPS) and len(TREE_FIXTURES) == 72


@pytest.mark.parametrize("path", TREE_FIXTURES, ids=os.path.basename)
def test_the_example_reproduces_each_tree_fixture_through_the_protocol(path):
    fx = rk.load_fixture(path)
    _, a = answer(NumpyReplay(), fx)
    assert a.msg["ok"], a.msg
    result = fx.compare_outputs(a.tensors)  # the stored tolerances, as the C++ judge applies them
    assert result.ok, result.summary()


def _fails(fault, fx):
    _, a = answer(NumpyReplay(fault), fx)
    assert a.msg["ok"], a.msg
    return not fx.compare_outputs(a.tensors).ok


# Which fixtures each fault can change: its op, a tree with a branch (top-k > 1; a chain's flattened order is its
# ancestors), and for the commits a node accepted (not "anone").
ACTS_ON = {"tree_accepted_as_chain": "tree.commit", "tree_sibling_leak": "tree.verify",
           "tree_conv_flattened": "tree.conv_update", "tree_conv_commit_as_chain": "tree.conv_commit"}


@pytest.mark.parametrize("fault", TREE_FAULTS)
def test_each_tree_fault_fails_fixtures_of_its_op_only(fault):
    failed = []
    for path in TREE_FIXTURES:
        fx = rk.load_fixture(path)
        name = os.path.basename(path)
        if fx.op != ACTS_ON[fault] or "__k1d" in name or name.endswith("_anone.safetensors"):
            assert not _fails(fault, fx), f"{fault} changes {name}, which it cannot affect"
        elif _fails(fault, fx):
            failed.append(name)
    assert failed, f"{fault} fails no committed tree fixture"


@pytest.mark.parametrize("fault", TREE_FAULTS)
def test_the_judge_catches_each_tree_fault_through_check_target(cli, fault):
    argv = [cli, "check", "--target", f"exec:{shlex.quote(sys.executable)} {shlex.quote(EXAMPLE)} --fault {fault}", TREES]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "FAIL " in proc.stdout and "0 not covered" in proc.stdout, proc.stdout[-2000:]
    ok = subprocess.run(argv[:3] + [f"exec:{shlex.quote(sys.executable)} {shlex.quote(EXAMPLE)}", TREES],
                        capture_output=True, text=True, timeout=600)
    assert ok.returncode == 0 and "72 passed, 0 failed, 0 not covered" in ok.stdout, ok.stdout[-2000:]
