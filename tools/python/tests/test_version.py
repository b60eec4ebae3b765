"""One version: the repository's VERSION file, printed alike by `replayssm --version` and
`python -m replayssm_kit --version`; the kit-only pyproject and the repository's pyproject agree."""
import os
import subprocess
import sys

import pytest

from conftest import HERE, REPO, repo_cli

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
    cli = repo_cli()
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
    assert sorted(top["project"]["dependencies"]) == sorted(kit["project"]["dependencies"])


def test_the_kit_version_file_is_a_plain_copy_of_the_repository_version():
    """A symlink breaks `pip install` of a copied kit folder (the link points outside it)."""
    kit_file = os.path.join(os.path.dirname(HERE), "replayssm_kit", "VERSION")
    assert not os.path.islink(kit_file), "replayssm_kit/VERSION must be a plain file"
    with open(kit_file, encoding="utf-8") as f:
        assert f.read().strip() == VERSION, "replayssm_kit/VERSION differs from the repository's VERSION"


def test_a_copied_kit_folder_installs(tmp_path):
    """The kit copied on its own (no repository around it) builds and installs: what a newcomer vendoring it does."""
    import shutil

    pytest.importorskip("setuptools")
    pytest.importorskip("wheel")  # scripts/install-deps.sh installs it into the venv
    src = os.path.dirname(HERE)
    dst = tmp_path / "kit"
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("tests", "__pycache__", ".pytest_cache", "*.egg-info", "build"))
    target = tmp_path / "site"
    out = subprocess.run([sys.executable, "-m", "pip", "install", "--disable-pip-version-check", "--no-deps",
                          "--no-build-isolation", "--no-index", "--target", str(target), str(dst)],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    installed = target / "replayssm_kit" / "VERSION"
    assert installed.read_text(encoding="utf-8").strip() == VERSION
