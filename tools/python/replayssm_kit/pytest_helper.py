"""pytest glue: fixtures in a few lines, and lifecycle campaigns against an implementation in its own process.

    from replayssm_kit.pytest_helper import fixture_params, fuzz_target

    @pytest.mark.parametrize("fx", fixture_params("path/to/fixtures", ops={"recurrent"}))
    def test_my_kernel(fx):
        fx.assert_passes(my_kernel_adapter)     # adapter(fx) -> {"out.o": ..., "out.state": ...}

    @pytest.mark.parametrize("preset", ["tiny-gdn", "tiny-kda"])
    def test_my_kernel_lifecycle(preset):
        fuzz_target("python3 my_kernel_target.py", preset=preset)   # serves replayssm_kit.target.Target

    @pytest.mark.parametrize("trace", trace_params("path/to/traces"))
    def test_my_kernel_traces(trace):
        assert_trace_passes(trace, MyKernelTarget())  # a replayssm_kit.target.Target, no CLI needed

Each fixture parameter is a lazily loaded Fixture; the test id is the fixture path relative to the directory.
fuzz_target runs `replayssm fuzz --target exec:...` (the CLI from $REPLAYSSM_CLI or PATH; skipped without it).
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


# --- trace fixtures: the judge without the CLI -----------------------------------------------------------------
def trace_params(root: str, select=None):
    """pytest parameters (pytest.param(path, id=relative path)) for every trace fixture under root (other
    fixtures are skipped), filtered by select(path) -> bool. An empty selection raises ValueError."""
    import pytest

    from .trace import find_traces

    paths = find_traces(root)
    if select is not None:
        paths = [p for p in paths if select(p)]
    if not paths:
        raise ValueError(f"no trace fixtures selected under {root!r}")
    base = root if os.path.isdir(root) else os.path.dirname(root)
    return [pytest.param(p, id=os.path.relpath(p, base)) for p in paths]


def assert_trace_passes(trace, target, tier=None):
    """replay_trace(trace, target, tier): pytest.skip when the target's capabilities do not cover the trace
    (never a pass), pytest.fail with the failing command, the worst element and the judged tolerance on a
    failure; returns the result."""
    import pytest

    from .replay import replay_trace

    result = replay_trace(trace, target, tier)
    if not result.covered:
        pytest.skip(result.summary())
    if not result.ok:
        pytest.fail(result.summary(), pytrace=False)
    return result


# --- judging an implementation in its own process through `replayssm fuzz` ---------------------------------
def find_cli():
    """The replayssm CLI: $REPLAYSSM_CLI when set, else `replayssm` on PATH, else the one `pip install .` put next
    to this interpreter (sys.prefix/bin), else None."""
    import shutil
    import sys

    given = os.environ.get("REPLAYSSM_CLI")
    if given:
        return shutil.which(given) or given  # a bare name is looked up on PATH
    installed = os.path.join(sys.prefix, "bin", "replayssm")
    return shutil.which("replayssm") or (installed if os.access(installed, os.X_OK) else None)


def _shrunk_commands(counterexample: str) -> str:
    """The command lines of RapidCheck's shrunk counterexample (the block after the sequence's type line), and
    the captures inserted into it ("capture rows=R T=W before command I", from the block of capture points)."""
    lines = counterexample.splitlines()
    blocks = []
    for i, line in enumerate(lines):
        if line.startswith("std::vector<") and line.rstrip().endswith(":"):
            block = []
            for cmd in lines[i + 1 :]:
                if not cmd.strip():
                    break
                block.append(cmd)
            if not blocks or "CapturePoint" in line:
                blocks.append("\n".join(block))
    return "\n".join(blocks) if blocks else counterexample


def fuzz_target(command, preset="tiny-gdn", cases=100, seed=1, layers=None, max_T=None, extra_args=(),
                dump_dir=None, timeout=None, complete=True):
    """Judges the implementation that `command` starts (a shell command line, or an argv list) with
    `replayssm fuzz --target exec:COMMAND` and returns the campaign reports (dicts of the --json output).

    * No CLI ($REPLAYSSM_CLI, else `replayssm` on PATH): pytest.skip with the reason.
    * A campaign the implementation's capabilities do not cover: pytest.skip with the reason (never a pass);
      a campaign that ran but left something out (e.g. copies, without copy_slot) passes with a warning.
    * A failing campaign: pytest.fail with the reason, the shrunk command sequence, the dump path and the
      exact command line that replays the dump. Dumps go to dump_dir (default: a new temporary directory,
      kept so the replay line keeps working).
    * A verdict of INCOMPLETE (the campaigns passed but did not exercise everything the implementation claims,
      docs/lifecycle.md "Verdict levels"): pytest.fail listing what was not exercised, unless complete=False
      (a short smoke campaign), which warns instead.
    """
    import json
    import shlex
    import subprocess
    import tempfile
    import warnings

    import pytest

    cli = find_cli()
    if not cli:
        pytest.skip("replayssm CLI not found: set REPLAYSSM_CLI or put replayssm on PATH")
    if not os.access(cli, os.X_OK):
        pytest.fail(f"REPLAYSSM_CLI={cli!r} is not an executable file", pytrace=False)
    target = "exec:" + (command if isinstance(command, str) else shlex.join(command))
    dump_dir = dump_dir or tempfile.mkdtemp(prefix="replayssm-fuzz-")
    os.makedirs(dump_dir, exist_ok=True)
    report_path = os.path.join(dump_dir, f"report-{preset}-{seed}.json")
    if os.path.exists(report_path):
        os.unlink(report_path)
    argv = [cli, "fuzz", "--target", target, "--preset", preset, "--cases", str(cases), "--seed", str(seed),
            "--dump-dir", dump_dir, "--json", report_path]
    argv += ["--layers", str(layers)] if layers is not None else []
    argv += ["--max-T", str(max_T)] if max_T is not None else []
    argv += [str(a) for a in extra_args]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(f"replayssm fuzz ran past {timeout} s: {shlex.join(argv)}", pytrace=False)
    if not os.path.exists(report_path):
        pytest.fail(f"replayssm fuzz did not run (exit status {proc.returncode}): {shlex.join(argv)}\n"
                    f"{proc.stderr}{proc.stdout}", pytrace=False)
    with open(report_path) as f:
        report = json.load(f)
    campaigns = report["campaigns"]
    for c in campaigns:
        if c.get("failed"):
            replay = shlex.join([cli, "fuzz", "--replay", c["dump_path"], "--target", target]) if c.get(
                "dump_path") else "(no dump was written)"
            pytest.fail(
                f"replayssm fuzz: {target} failed after {c['cases_passed']} passing cases (preset {preset}, "
                f"seed {seed})\n"
                f"reason: {c['reason']}\n"
                f"shrunk command sequence:\n{_shrunk_commands(c.get('counterexample', ''))}\n"
                + ("as executed (captures, self checks and graph replays in place; the last one failed):\n"
                   + "\n".join(c["sequence"]) + "\n" if c.get("sequence") else "")
                + f"dump: {c.get('dump_path') or '(none)'}\n"
                f"replay: {replay}\n"
                f"rerun: {shlex.join(argv)}", pytrace=False)
    uncovered = [c for c in campaigns if not c.get("covered", True)]
    if uncovered:
        pytest.skip(f"not covered by {target} (preset {preset}): "
                    + "; ".join(c.get("not_covered", "") for c in uncovered))
    for c in campaigns:
        if c.get("not_covered"):
            warnings.warn(f"replayssm fuzz {preset}: passed, but not covered: {c['not_covered']}")
    if report.get("verdict") == "INCOMPLETE":
        unmet = [u for v in report.get("verdicts", []) for u in v.get("unmet", [])]
        text = f"replayssm fuzz {preset}: INCOMPLETE, not exercised: " + "; ".join(unmet)
        if complete:
            pytest.fail(text + f"\nrerun: {shlex.join(argv)}", pytrace=False)
        warnings.warn(text)
    elif proc.returncode != 0:
        pytest.fail(f"replayssm fuzz exited with status {proc.returncode}: {shlex.join(argv)}\n{proc.stderr}",
                    pytrace=False)
    return campaigns
