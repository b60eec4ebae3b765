"""The pytest plugin (replayssm_kit/pytest_plugin.py), run as a user runs it: `pytest --replayssm-target CMD` in
a directory of its own, against the NumPy example (correct and with a seeded fault), with and without
pytest-xdist, with pytest's JUnit XML; the entry point registered once when two distributions declare it; the
plugin inert without --replayssm-target."""
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

from conftest import repo_cli, FIXTURES, HERE, REPO

KIT = os.path.dirname(HERE)
EXAMPLE = os.path.join(KIT, "examples", "numpy_replay.py")


def cli():
    return repo_cli()


def run_pytest(tmp_path, *args, plugin=True, env_extra=None):
    env = dict(os.environ, PYTHONPATH=KIT, REPLAYSSM_CLI=cli())
    env.pop("PYTEST_ADDOPTS", None)
    env.update(env_extra or {})
    argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rs", "-q"]
    argv += ["-p", "replayssm_kit.pytest_plugin"] if plugin else []
    return subprocess.run(argv + list(args), cwd=tmp_path, capture_output=True, text=True, env=env)


@pytest.fixture
def small_fixtures(tmp_path):
    """Four committed fixtures: a static golden one, a trace, an MRoPE one (fixture op mrope.rotary, protocol 1.10)
    and a ring-step one (not a target operation)."""
    d = tmp_path / "fx"
    d.mkdir()
    for rel in ("golden/tiny-gdn/tiny-gdn__recurrent__T12.safetensors", "traces/tiny-gdn/tiny-gdn__trace__0.safetensors",
                "peer/transformers/hf-mrope__qwen3.5.safetensors", "ring/tiny-gdn/tiny-gdn__ring_step__append_f32.safetensors"):
        shutil.copy(os.path.join(FIXTURES, rel), d)
    return d


def target(fault=None):
    return f"{sys.executable} {EXAMPLE}" + (f" --fault {fault}" if fault else "")


@pytest.mark.parametrize("xdist", [False, True], ids=["serial", "xdist"])
def test_items_pass_skip_with_reasons_and_land_in_junit(tmp_path, small_fixtures, xdist):
    if xdist:
        pytest.importorskip("xdist")
    junit = tmp_path / "out.xml"
    args = ["--replayssm-target", target(), "--replayssm-fixtures", str(small_fixtures), "--replayssm-preset", "tiny-gdn",
            "--replayssm-cases", "10", "--replayssm-max-commands", "20", f"--junitxml={junit}"]
    out = run_pytest(tmp_path, *args, *(["-n", "2"] if xdist else []))
    text = out.stdout + out.stderr
    assert out.returncode == 0, text
    # Three fixtures pass; the ring-step fixture is skipped with its reason; the short campaign is INCOMPLETE (10
    # cases of 20 commands cannot reach full depth) and skipped listing what was not exercised, never passed.
    assert "3 passed, 2 skipped" in text, text
    assert "ring-step fixtures need the ring's records" in text, text
    assert "INCOMPLETE, not exercised: op gdn: no full-depth campaign" in text, text
    names = sorted(tc.get("name") for tc in ET.parse(junit).getroot().iter("testcase"))
    assert names == ["campaign/tiny-gdn", "fixtures/hf-mrope__qwen3.5", "fixtures/tiny-gdn__recurrent__T12",
                     "fixtures/tiny-gdn__ring_step__append_f32", "traces/tiny-gdn__trace__0"], names


def test_strict_turns_an_incomplete_campaign_into_a_failure(tmp_path):
    out = run_pytest(tmp_path, "--replayssm-target", target(), "--replayssm-no-fixtures", "--replayssm-preset",
                     "tiny-gdn", "--replayssm-cases", "5", "--replayssm-max-commands", "10", "--replayssm-strict")
    text = out.stdout + out.stderr
    assert out.returncode == 1 and "1 failed" in text and "INCOMPLETE" in text, text


def test_a_faulty_target_fails_with_reason_shrunk_commands_dump_and_replay_line(tmp_path, small_fixtures):
    out = run_pytest(tmp_path, "--replayssm-target", target("off_by_one_accepted"), "--replayssm-fixtures",
                     str(small_fixtures), "--replayssm-preset", "tiny-gdn", "--replayssm-cases", "100",
                     "--replayssm-max-commands", "40")
    text = out.stdout + out.stderr
    assert out.returncode == 1, text
    # The trace fails at the command whose commit the fault changes, with the check named and the reproduce line.
    assert "traces/tiny-gdn__trace__0" in text and "(check: state)" in text, text
    assert "reproduce: " in text and " check --target " in text, text
    # The campaign: reason, shrunk commands, the dump and the exact replay command.
    for part in ("reason: ", "shrunk command sequence:", "dump: ", "replay: ", " fuzz --replay "):
        assert part in text, f"{part!r} missing:\n{text}"


def test_the_plugin_is_inert_without_a_target(tmp_path):
    (tmp_path / "test_plain.py").write_text("def test_one():\n    assert True\n")
    out = run_pytest(tmp_path)
    assert out.returncode == 0 and "1 passed" in out.stdout, out.stdout + out.stderr


def test_two_distributions_declaring_the_entry_point_register_it_once(tmp_path):
    """Both pyprojects declare pytest11 `replayssm`: installed together, pytest loads it once (no duplicate
    option error), found through the entry point alone (no -p)."""
    site = tmp_path / "site"
    for dist in ("replayssm_kit-0.0.0.dist-info", "replayssm-0.0.0.dist-info"):
        d = site / dist
        d.mkdir(parents=True)
        name = dist.split("-")[0].replace("_", "-")
        (d / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.0.0\n")
        (d / "entry_points.txt").write_text("[pytest11]\nreplayssm = replayssm_kit.pytest_plugin\n")
    shutil.copytree(os.path.join(KIT, "replayssm_kit"), site / "replayssm_kit",
                    ignore=shutil.ignore_patterns("__pycache__"))
    env = dict(os.environ, PYTHONPATH=str(site))
    out = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--help"], cwd=tmp_path,
                         capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.count("--replayssm-target=CMD") == 1, out.stdout
