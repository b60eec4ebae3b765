"""One version: the repository's VERSION file, printed alike by `replayssm --version` and
`python -m replayssm_kit --version`; the kit-only pyproject and the repository's pyproject agree."""
import os
import subprocess
import sys

import pytest

from conftest import HERE, REPO
from replayssm_kit.pytest_helper import find_cli

tomllib = pytest.importorskip("tomllib")  # Python >= 3.11 (Debian 12's python3)

with open(os.path.join(REPO, "VERSION"), encoding="utf-8") as f:
    VERSION = f.read().strip()


def kit_version_line():
    env = dict(os.environ, PYTHONPATH=os.path.dirname(HERE))
    out = subprocess.run([sys.executable, "-m", "replayssm_kit", "--version"], capture_output=True, text=True,
                         env=env, check=True)
    return out.stdout.strip()


def test_the_kit_prints_the_version_file():
    import replayssm_kit

    assert replayssm_kit.__version__ == VERSION
    assert kit_version_line() == f"replayssm_kit {VERSION}"


def test_the_cli_and_the_kit_agree():
    built = os.path.join(REPO, "build", "tools", "replayssm")
    cli = os.environ.get("REPLAYSSM_CLI") or (built if os.access(built, os.X_OK) else find_cli())
    if not cli:
        pytest.skip("replayssm CLI not found: set REPLAYSSM_CLI, put replayssm on PATH or build this checkout")
    out = subprocess.run([cli, "--version"], capture_output=True, text=True, check=True).stdout.strip()
    assert out == f"replayssm {VERSION}"
    assert out.split()[-1] == kit_version_line().split()[-1]


def test_both_pyprojects_take_the_version_file_and_the_same_dependencies():
    with open(os.path.join(REPO, "pyproject.toml"), "rb") as f:
        top = tomllib.load(f)
    with open(os.path.join(REPO, "tools", "python", "pyproject.toml"), "rb") as f:
        kit = tomllib.load(f)
    assert "version" in top["project"]["dynamic"] and "version" in kit["project"]["dynamic"]
    assert top["tool"]["scikit-build"]["metadata"]["version"]["input"] == "VERSION"
    assert kit["tool"]["setuptools"]["dynamic"]["version"]["file"] == "replayssm_kit/VERSION"
    assert os.path.realpath(os.path.join(REPO, "tools", "python", "replayssm_kit", "VERSION")) == \
        os.path.realpath(os.path.join(REPO, "VERSION"))
    assert sorted(top["project"]["dependencies"]) == sorted(kit["project"]["dependencies"])
