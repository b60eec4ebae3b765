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

    built = os.path.join(REPO, "build", "tools", "replayssm")
    found = os.environ.get("REPLAYSSM_CLI") or (built if os.access(built, os.X_OK) else find_cli())
    if not found:
        pytest.skip("replayssm CLI not found: set REPLAYSSM_CLI, put replayssm on PATH or build this checkout")
    return found
