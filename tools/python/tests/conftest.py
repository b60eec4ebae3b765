import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # tools/python: the replayssm_kit package
sys.path.insert(0, HERE)                   # numpy_reference

REPO = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
FIXTURES = os.path.join(REPO, "fixtures")


def repo_cli():
    """The CLI the tests run: $REPLAYSSM_CLI, else this checkout's build, else find_cli(); pytest.skip without one."""
    import pytest
    from replayssm_kit.pytest_helper import find_cli

    builds = [os.path.join(REPO, b, "tools", "replayssm") for b in ("build", "build-cpu")]
    found = os.environ.get("REPLAYSSM_CLI") or next((b for b in builds if os.access(b, os.X_OK)), None) or find_cli()
    if not found:
        pytest.skip("replayssm CLI not found: set REPLAYSSM_CLI, put replayssm on PATH or build this checkout")
    return found


try:
    import pytest as _pytest

    @_pytest.fixture
    def cli(monkeypatch):
        """repo_cli(), also set as $REPLAYSSM_CLI for the kit's own helpers (find_cli, fuzz_target)."""
        path = repo_cli()
        monkeypatch.setenv("REPLAYSSM_CLI", path)
        return path
except ImportError:  # conftest is imported by helper scripts too
    pass
