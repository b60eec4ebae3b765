"""pytest glue: parametrize a test over a fixture directory in a few lines.

    from replayssm_kit.pytest_helper import fixture_params

    @pytest.mark.parametrize("fx", fixture_params("path/to/fixtures", ops={"recurrent"}))
    def test_my_kernel(fx):
        fx.assert_passes(my_kernel_adapter)     # adapter(fx) -> {"out.o": ..., "out.state": ...}

Each parameter is a lazily loaded Fixture; the test id is the fixture path relative to the directory.
"""

from __future__ import annotations

import os

from .fixture import find_fixtures, load_fixture


class LazyFixture:
    """Loads the fixture on first use so collecting many large fixtures stays cheap."""

    def __init__(self, path: str):
        self.path = path
        self._fx = None

    def _get(self):
        if self._fx is None:
            self._fx = load_fixture(self.path)
        return self._fx

    def __getattr__(self, item):
        return getattr(self._get(), item)

    def __repr__(self):
        return f"LazyFixture({self.path!r})"


def fixture_params(root: str, ops=None, select=None):
    """pytest parameters (pytest.param(LazyFixture, id=relative path)) for every fixture under root, filtered
    by op (a name or a set of names) and by select(path) -> bool. An empty selection raises ValueError, so a
    wrong path never turns into a silently empty test run."""
    import pytest

    paths = find_fixtures(root, ops)
    if select is not None:
        paths = [p for p in paths if select(p)]
    if not paths:
        raise ValueError(f"no fixtures selected under {root!r} (ops={ops!r})")
    base = root if os.path.isdir(root) else os.path.dirname(root)
    return [pytest.param(LazyFixture(p), id=os.path.relpath(p, base)) for p in paths]
