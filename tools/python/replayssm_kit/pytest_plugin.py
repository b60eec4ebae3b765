"""The replayssm pytest plugin: an implementation's whole judgement as ordinary pytest items.

    pip install tools/python          # or `pip install .` at the repository root: either registers the plugin
    pytest --replayssm-target 'python3 my_target.py' [--replayssm-preset tiny-gdn --replayssm-preset tiny-kda]

collects, for the implementation that the command starts (it serves the target protocol,
docs/target-protocol.md):

* one item per committed static fixture and per trace (`replayssm/fixtures/<path>`, `replayssm/traces/<path>`),
  each run through the implementation with `replayssm check --target exec:CMD FILE` at the tier it claims;
* one campaign item per preset (`replayssm/campaign/<preset>`): `replayssm fuzz --target exec:CMD --preset P`.

An item the implementation does not claim (its capabilities exclude the fixture's configuration or op, or the
preset) is skipped with the reason, never passed. A campaign that passed but left a claimed value unexercised
(verdict INCOMPLETE, docs/lifecycle.md "Verdict levels") is skipped listing what was not exercised, or fails with
--replayssm-strict. A failing item prints the reason, the shrunk commands, the dump and the exact command that
replays it. Items are independent processes of the CLI, so pytest-xdist (`-n`) spreads them and pytest's own
`--junitxml` reports them.

The plugin does nothing unless --replayssm-target is given. Both distributions (replayssm-kit and replayssm)
declare it under the one entry-point name `replayssm`; pytest registers a name once, so installing both never
loads it twice. The helpers of pytest_helper (fuzz_target, fixture_params, ...) are the same code.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import tempfile

import pytest

from .pytest_helper import find_cli, fuzz_target

DEFAULT_PRESETS = ("tiny-gdn", "tiny-kda")


def pytest_addoption(parser):
    g = parser.getgroup("replayssm", "judge an implementation with replayssm (docs/target-protocol.md)")
    g.addoption("--replayssm-target", default=None, metavar="CMD",
                help="shell command that starts the implementation (it serves the target protocol); enables the "
                     "plugin's items")
    g.addoption("--replayssm-preset", action="append", default=None, metavar="P",
                help=f"a preset to run a campaign for (repeatable; default {', '.join(DEFAULT_PRESETS)})")
    g.addoption("--replayssm-fixtures", default=None, metavar="DIR",
                help="committed fixtures to run (default $REPLAYSSM_FIXTURES, else the installed share/replayssm/"
                     "fixtures, else this checkout's fixtures/)")
    g.addoption("--replayssm-cases", type=int, default=100, metavar="N", help="cases per campaign (default 100)")
    g.addoption("--replayssm-seed", type=int, default=1, metavar="S", help="campaign seed (default 1)")
    g.addoption("--replayssm-max-commands", type=int, default=100, metavar="N",
                help="longest command sequence of a campaign case (default 100: with 100 cases, a full-depth "
                     "campaign at a tiny preset)")
    g.addoption("--replayssm-no-fixtures", action="store_true", help="collect the campaigns only")
    g.addoption("--replayssm-no-campaigns", action="store_true", help="collect the fixtures and traces only")
    g.addoption("--replayssm-strict", action="store_true",
                help="a campaign whose verdict is INCOMPLETE fails instead of being skipped")


def _fixture_dir(config) -> str | None:
    given = config.getoption("replayssm_fixtures") or os.environ.get("REPLAYSSM_FIXTURES")
    if given:
        return given
    candidates = [os.path.join(sys.prefix, "share", "replayssm", "fixtures"),
                  os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures"))]
    for c in candidates:
        if os.path.isfile(os.path.join(c, "MANIFEST.json")):
            return c
    return None


class ReplayssmFailure(Exception):
    """A failed judgement; its text is the whole report (repr_failure prints it without a traceback)."""


class FixtureItem(pytest.Item):
    """One committed fixture or trace run through the implementation (`replayssm check --target`)."""

    def __init__(self, *, path: str, command: str, **kw):
        super().__init__(**kw)
        self.fixture_path, self.command = path, command

    def runtest(self):
        cli = find_cli()
        if not cli:
            pytest.skip("replayssm CLI not found: set REPLAYSSM_CLI, put replayssm on PATH or pip install .")
        with tempfile.TemporaryDirectory(prefix="replayssm-check-") as tmp:
            report = os.path.join(tmp, "report.json")
            argv = [cli, "check", "--target", "exec:" + self.command, self.fixture_path, "--json", report]
            proc = subprocess.run(argv, capture_output=True, text=True)
            replay = shlex.join([cli, "check", "--target", "exec:" + self.command, self.fixture_path])
            if not os.path.exists(report):
                raise ReplayssmFailure(f"replayssm check did not run (exit {proc.returncode}): {replay}\n"
                                       f"{proc.stderr}{proc.stdout}")
            with open(report) as f:
                rep = json.load(f)
        results = [r for t in rep.get("fixtures_through_target", []) for r in t.get("results", [])]
        if len(results) != 1:
            raise ReplayssmFailure(f"expected one result for {self.fixture_path}, got {len(results)}: {replay}")
        r = results[0]
        if not r.get("covered", True):
            pytest.skip(f"not claimed by the implementation: {r.get('why', '')}")
        if not r.get("ok", False):
            failing = [t.get("report", t.get("name", "")) for t in r.get("tensors", []) if not t.get("ok", True)]
            raise ReplayssmFailure(f"{r.get('op')} at the {r.get('tier')} tier: FAIL\n" + "\n".join(failing) +
                                   (f"\n{r['why']}" if r.get("why") else "") + f"\nreproduce: {replay}")

    def repr_failure(self, excinfo):
        if isinstance(excinfo.value, ReplayssmFailure):
            return str(excinfo.value)
        return super().repr_failure(excinfo)

    def reportinfo(self):
        return self.fixture_path, None, self.name


class CampaignItem(pytest.Item):
    """One lifecycle campaign of a preset against the implementation (`replayssm fuzz --target`)."""

    def __init__(self, *, preset: str, command: str, cases: int, seed: int, strict: bool, max_commands: int, **kw):
        super().__init__(**kw)
        self.preset, self.command, self.cases, self.seed, self.strict = preset, command, cases, seed, strict
        self.max_commands = max_commands

    def runtest(self):
        if not find_cli():
            pytest.skip("replayssm CLI not found: set REPLAYSSM_CLI, put replayssm on PATH or pip install .")
        # fuzz_target fails with the reason, the shrunk commands, the dump and the replay line, skips what is not
        # covered, and (complete=False) only warns on INCOMPLETE, which is decided here.
        import warnings

        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            fuzz_target(self.command, preset=self.preset, cases=self.cases, seed=self.seed, complete=False,
                        extra_args=("--max-commands", self.max_commands))
        incomplete = [str(w.message) for w in seen if "INCOMPLETE" in str(w.message)]
        if incomplete:
            if self.strict:
                raise ReplayssmFailure(incomplete[0])
            pytest.skip(incomplete[0])

    def repr_failure(self, excinfo):
        if isinstance(excinfo.value, ReplayssmFailure):
            return str(excinfo.value)
        return super().repr_failure(excinfo)

    def reportinfo(self):
        return "replayssm", None, self.name


class ReplayssmCollection(pytest.Collector):
    """The plugin's items, in a fixed order (pytest-xdist needs every worker to collect the same list)."""

    def __init__(self, *, command: str, fixture_dir: str | None, presets, cases: int, seed: int, strict: bool,
                 fixtures: bool, campaigns: bool, max_commands: int, **kw):
        super().__init__(**kw)
        self.max_commands = max_commands
        self.command, self.fixture_dir, self.presets = command, fixture_dir, presets
        self.cases, self.seed, self.strict, self.fixtures, self.campaigns = cases, seed, strict, fixtures, campaigns

    def collect(self):
        if self.fixtures:
            from .fixture import find_fixtures, read_op

            for p in sorted(find_fixtures(self.fixture_dir)):
                rel = os.path.relpath(p, self.fixture_dir).replace(os.sep, "/")
                kind = "traces" if read_op(p) == "lifecycle.trace" else "fixtures"
                name = f"{kind}/{rel[:-len('.safetensors')] if rel.endswith('.safetensors') else rel}"
                yield FixtureItem.from_parent(self, name=name, path=p, command=self.command)
        if self.campaigns:
            for preset in self.presets:
                yield CampaignItem.from_parent(self, name=f"campaign/{preset}", preset=preset, command=self.command,
                                               cases=self.cases, seed=self.seed, strict=self.strict,
                                               max_commands=self.max_commands)


def pytest_collection_modifyitems(session, config, items):
    command = config.getoption("replayssm_target")
    if not command:
        return
    fixtures = not config.getoption("replayssm_no_fixtures")
    fixture_dir = _fixture_dir(config) if fixtures else None
    if fixtures and (not fixture_dir or not os.path.isdir(fixture_dir)):
        raise pytest.UsageError("replayssm: committed fixtures not found (pass --replayssm-fixtures DIR or set "
                                "REPLAYSSM_FIXTURES)" + (f": {fixture_dir!r} is not a directory" if fixture_dir else ""))
    node = ReplayssmCollection.from_parent(
        session, name="replayssm", command=command, fixture_dir=fixture_dir,
        presets=config.getoption("replayssm_preset") or list(DEFAULT_PRESETS), cases=config.getoption("replayssm_cases"),
        seed=config.getoption("replayssm_seed"), strict=config.getoption("replayssm_strict"), fixtures=fixtures,
        campaigns=not config.getoption("replayssm_no_campaigns"), max_commands=config.getoption("replayssm_max_commands"))
    items.extend(node.collect())
