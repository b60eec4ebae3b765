"""What one step may mix (step_mix, protocol 1.7), end to end through the C++ judge and the NumPy example's
kernel that takes one width per step and/or keeps prefill chunks apart (numpy_replay.py --step-mix): claimed,
its campaigns send only such steps and pass, with the coverage counting no mixed step; unclaimed (the faults
one_width_unclaimed, prefill_apart_unclaimed), the same kernel fails on the judge's first mixed step; committed
traces that mix more than the claim are not covered (the first such step named) and the grouped traces run.
Skips when the CLI is absent."""
import json
import os
import shlex
import subprocess
import sys

import pytest

from conftest import FIXTURES, HERE

EXAMPLE = os.path.join(os.path.dirname(HERE), "examples", "numpy_replay.py")
COMMAND = f"{shlex.quote(sys.executable)} {shlex.quote(EXAMPLE)}"
TRACES = os.path.join(FIXTURES, "traces")




def _fuzz(cli, command, tmp_path, preset="tiny-gdn", cases=60, seed=3):
    report = tmp_path / f"fuzz-{preset}.json"
    argv = [cli, "fuzz", "--target", f"exec:{command}", "--preset", preset, "--cases", str(cases), "--seed",
            str(seed), "--dump-dir", str(tmp_path), "--json", str(report)]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    return proc, json.loads(report.read_text())


@pytest.mark.parametrize("mix,preset", [("one_width", "tiny-gdn"), ("prefill_apart", "tiny-kda"), ("both", "tiny-gdn")])
def test_a_claimed_step_mix_gets_only_such_steps_and_passes(cli, mix, preset, tmp_path):
    proc, report = _fuzz(cli, f"{COMMAND} --step-mix {mix}", tmp_path, preset)
    # 60 cases without a full-depth campaign: INCOMPLETE at best (exit 3), never a failure.
    assert proc.returncode == 3, proc.stdout[-3000:] + proc.stderr[-2000:]
    [v] = report["verdicts"]
    steps = v["coverage"]["steps"]
    if mix in ("one_width", "both"):
        assert steps["mixed_widths"] == 0, steps
    if mix in ("prefill_apart", "both"):
        assert steps["prefill_beside_verify"] == 0, steps
    assert not any(u.startswith("step mix:") for u in v["unmet"]), v["unmet"]  # nothing it rules out is asked of it
    rows = v["coverage"]["rows"]
    assert rows["verify"] > 100 and rows["prefill"] > 100 and rows["pad"] > 100, rows
    widths = set(v["coverage"]["matrix"]["width"])
    assert widths == {str(T) for T in range(1, 13)}, widths  # every width still verified, one per step


@pytest.mark.parametrize("fault", ["one_width_unclaimed", "prefill_apart_unclaimed"])
def test_the_same_kernel_without_the_claim_fails_on_a_mixed_step(cli, fault, tmp_path):
    proc, report = _fuzz(cli, f"{COMMAND} --fault {fault}", tmp_path)
    assert proc.returncode == 1 and "NOT CONFORMANT" in proc.stdout, proc.stdout[-3000:]
    assert "target.step.rows" in proc.stdout and "this kernel takes one step mix per launch" in proc.stdout


def test_the_default_mix_is_asked_to_mix_and_does(cli, tmp_path):
    proc, report = _fuzz(cli, COMMAND, tmp_path)
    steps = report["verdicts"][0]["coverage"]["steps"]
    assert steps["mixed_widths"] > 50 and steps["prefill_beside_verify"] > 20, steps


def test_traces_that_mix_more_are_not_covered_and_the_grouped_ones_run(cli, tmp_path):
    report = tmp_path / "check.json"
    proc = subprocess.run([cli, "check", "--target", f"exec:{COMMAND} --step-mix both", TRACES, "--json",
                           str(report)], capture_output=True, text=True, timeout=600)
    assert proc.returncode in (0, 3), proc.stdout[-3000:] + proc.stderr[-2000:]
    [through] = json.loads(report.read_text())["fixtures_through_target"]
    results = through["results"]
    grouped = [r for r in results if "/grouped/" in r["path"]]
    # the lifecycle traces: MRoPE sessions (fixtures/traces/mrope) have no steps of the recurrent state to mix
    others = [r for r in results if "/grouped/" not in r["path"] and r["op"] == "lifecycle.trace"]
    assert len(grouped) == 5 and all(r["covered"] and r["ok"] for r in grouped), grouped
    assert others and all(not r["covered"] for r in others)
    assert all("mixes more than the target's step_mix (one_width+prefill_apart) allows" in r["why"] for r in others)


def test_the_kit_replays_the_same_traces_in_process_and_leaves_the_mixed_ones_uncovered():
    """replay_trace (in process, no CLI) agrees with `check --target`: traces that mix more than the claim are
    not covered, naming the step mix; the grouped traces pass."""
    import replayssm_kit as rk
    from replayssm_kit.trace import find_traces
    sys.path.insert(0, os.path.dirname(EXAMPLE))
    from numpy_replay import NumpyReplay

    grouped = others = 0
    for path in find_traces(TRACES):
        r = rk.replay_trace(path, NumpyReplay(step_mix="both"))
        if "/grouped/" in path:
            grouped += 1
            assert r.covered and r.ok, (path, str(r))
        else:
            others += 1
            assert not r.covered and r.not_covered.startswith("step_mix (command "), (path, r.not_covered)
    assert grouped == 5 and others >= 10
