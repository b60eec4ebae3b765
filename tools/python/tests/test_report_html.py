"""`replayssm report html` in a real browser (Debian's headless Chromium): a failing campaign's dump and its --json
report become pages whose script, run by the browser, marks the first divergent command (the one
`replayssm fuzz --replay` names), draws expected, obtained and difference maps for each drawn head, and shows
the verdict; a screenshot of each page is kept as a test artifact ($REPLAYSSM_ARTIFACTS, else
build/Testing/artifacts). Skips without the CLI or without chromium (scripts/install-deps.sh installs it)."""
import json
import os
import re
import shutil
import subprocess

import pytest

from conftest import repo_cli, REPO


def cli():
    return repo_cli()


def chromium():
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if not exe:
        pytest.skip("chromium not found (Debian package chromium; scripts/install-deps.sh installs it)")
    return exe


def browser(*args, timeout=120):
    # --no-sandbox: CI runs as root in a container, where Chromium's sandbox cannot start.
    argv = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def failing_case(tmp_path_factory):
    d = tmp_path_factory.mktemp("html")
    report = d / "report.json"
    run = subprocess.run([cli(), "fuzz", "--target", "replay", "--preset", "tiny-gdn", "--cases", "100", "--fault",
                          "off_by_one_accepted", "--dump-dir", str(d), "--json", str(report)], capture_output=True, text=True)
    assert run.returncode == 1, run.stdout + run.stderr
    dump = json.loads(report.read_text())["campaigns"][0]["dump_path"]
    replay = subprocess.run([cli(), "fuzz", "--replay", dump], capture_output=True, text=True)
    m = re.search(r"case fails: command (\d+) ", replay.stdout + replay.stderr)
    assert m, replay.stdout + replay.stderr
    return d, dump, str(report), int(m.group(1))


def artifacts():
    d = os.environ.get("REPLAYSSM_ARTIFACTS") or os.path.join(REPO, "build", "Testing", "artifacts")
    os.makedirs(d, exist_ok=True)
    return d


@pytest.mark.parametrize("source", ["dump", "report"])
def test_the_page_marks_the_first_divergence_and_draws_the_tensor_in_a_browser(failing_case, source):
    d, dump, report, divergent = failing_case
    page = d / f"{source}.html"
    made = subprocess.run([cli(), "report", "html", dump if source == "dump" else report, "-o", str(page)],
                          capture_output=True, text=True)
    assert made.returncode == 0, made.stdout + made.stderr
    html = page.read_text()
    assert "http://" not in html and "https://" not in html, "the page must be self-contained (no network)"
    dom = browser("--dump-dom", page.as_uri()).stdout
    assert 'data-rendered="1"' in dom, "the page's script did not run to its end in the browser:\n" + dom[:2000]
    # The first divergent command: one header cell, the command `fuzz --replay` names.
    marks = re.findall(r'<th[^>]*id="first-divergence"[^>]*>', dom)
    assert len(marks) == 1, marks
    assert f'data-command="{divergent}"' in marks[0], (marks[0], divergent)
    assert 'id="divergent-command"' in dom
    # Expected, obtained and difference drawn for every drawn head.
    heads = re.findall(r'<div class="head" data-head="(\d+)"', dom)
    drawn = re.findall(r'<canvas[^>]*data-map="(expected|obtained|difference)"[^>]*data-drawn="1"', dom)
    assert heads and len(drawn) == 3 * len(heads), (heads, drawn)
    # The difference is not zero everywhere: the fault's committed state really differs.
    diffs = [float(x) for x in re.findall(r'data-map="difference"[^>]*data-max-abs="([^"]+)"', dom)]
    assert diffs and max(diffs) > 0, diffs
    if source == "report":
        assert re.search(r'id="verdict-replay"[^>]*>NOT CONFORMANT<', dom), "the verdict is not shown"
    shot = os.path.join(artifacts(), f"report_html_{source}.png")
    if os.path.exists(shot):
        os.unlink(shot)
    browser(f"--screenshot={shot}", "--window-size=1300,1600", page.as_uri())
    with open(shot, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n", "no screenshot written"


def test_a_report_without_failures_renders_its_verdict(tmp_path):
    report = tmp_path / "ok.json"
    run = subprocess.run([cli(), "fuzz", "--target", "replay", "--preset", "tiny-gdn", "--cases", "5", "--json",
                          str(report)], capture_output=True, text=True)
    assert run.returncode == 3, run.stdout + run.stderr  # five cases: INCOMPLETE, listing what was not exercised
    page = tmp_path / "ok.html"
    assert subprocess.run([cli(), "report", "html", str(report), "-o", str(page)]).returncode == 0
    dom = browser("--dump-dom", page.as_uri()).stdout
    assert re.search(r'id="verdict-replay"[^>]*>INCOMPLETE<', dom), dom[:2000]
    assert "not exercised: " in dom and 'id="first-divergence"' not in dom
