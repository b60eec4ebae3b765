"""The engine level of the protocol: the kit's serve_engine loop answers hello / errors as documented, and,
through the C++ judge (`replayssm fuzz --level engine --target exec:...`), the NumPy example engine passes its
campaign while its seeded fault (tokens after the stop token committed, H11) is caught, dumped and replayed.
The end-to-end part skips when the CLI is absent ($REPLAYSSM_CLI, `replayssm` on PATH, or this checkout's
build/ or build-cpu/)."""
import os
import shlex
import subprocess
import sys

import pytest

from conftest import HERE
from replayssm_kit.engine import EngineTarget, _Loop
from replayssm_kit.protocol import Frame

EXAMPLE = os.path.join(os.path.dirname(HERE), "examples", "numpy_engine.py")
COMMAND = f"{shlex.quote(sys.executable)} {shlex.quote(EXAMPLE)}"


def _call(loop, msg):
    answer, _, status = loop.answer(Frame(msg, {}, {}))
    return answer, status


def test_hello_names_the_protocol_and_refuses_another():
    loop = _Loop(EngineTarget(), None)
    bad, status = _call(loop, {"op": "hello", "protocol": "replayssm.target", "version": [1, 0]})
    assert not bad["ok"] and bad["error"]["field"] == "protocol" and status == 1
    before, _ = _call(loop, {"op": "requests"})
    assert not before["ok"] and "hello" in before["error"]["message"]
    ok, status = _call(loop, {"op": "hello", "protocol": "replayssm.engine", "version": [0, 1]})
    assert ok["ok"] and ok["version"] == [0, 1] and status is None
    early, _ = _call(loop, {"op": "step", "entries": [], "window_tokens": []})
    assert not early["ok"] and "setup" in early["error"]["message"]




def _fuzz(cli, command, *extra, tmp_path):
    return subprocess.run([cli, "fuzz", "--level", "engine", "--target", f"exec:{command}", "--preset", "tiny-gdn",
                           "--dump-dir", str(tmp_path), *extra], capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("preset", ["tiny-gdn", "tiny-kda"])
def test_the_example_engine_passes_its_campaign(cli, preset, tmp_path):
    r = subprocess.run([cli, "fuzz", "--level", "engine", "--target", f"exec:{COMMAND}", "--preset", preset,
                        "--cases", "25", "--seed", "3"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and "25 cases passed" in r.stdout, r.stdout + r.stderr


def test_the_seeded_stop_token_fault_is_caught_dumped_and_replayed(cli, tmp_path):
    r = _fuzz(cli, f"{COMMAND} --fault tokens_after_stop", "--cases", "100", tmp_path=tmp_path)
    assert r.returncode == 1 and "FAIL" in r.stdout, r.stdout + r.stderr
    dump = r.stdout.split("replay the shrunk case: replayssm fuzz --replay ")[1].split("\n")[0]
    assert os.path.dirname(dump) == str(tmp_path)
    # A command is never taken from a file: without --target the replay is refused.
    refused = subprocess.run([cli, "fuzz", "--replay", dump], capture_output=True, text=True, timeout=600)
    assert refused.returncode != 0 and "never taken from a file" in refused.stderr
    again = subprocess.run([cli, "fuzz", "--replay", dump, "--target", f"exec:{COMMAND} --fault tokens_after_stop"],
                           capture_output=True, text=True, timeout=600)
    assert again.returncode == 1 and "case fails" in again.stdout
    fixed = subprocess.run([cli, "fuzz", "--replay", dump, "--target", f"exec:{COMMAND}"], capture_output=True,
                           text=True, timeout=600)
    assert fixed.returncode == 0 and "case passes now" in fixed.stdout
