"""The CI template (tools/ci/github-actions-replayssm.yml), exercised locally: the workflow validated against the
GitHub workflow schema (check-jsonschema's vendored schema; a corrupted copy must fail it), then its jobs' own
`run` scripts executed as the CI would, with the NumPy example as the kernel:

* every shard of the campaign matrix as a separate process at the same time, each writing its report;
* the verdict job's merge of the shards' reports: the merged cases are the campaign's, each shard's 100 cases of
  up to 100 commands a full-depth campaign, and the merged verdict of the template's own campaign (400 cases in
  4 shards) is CONFORMANT with exit status 0 (a single shard alone is INCOMPLETE, which its job accepts);
* the fixtures job's pytest run (the plugin, under pytest-xdist) over a few committed fixtures and a trace.

usage: ci_template.py CLI   (run with a Python that has numpy, PyYAML, check-jsonschema and pytest-xdist)
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

import yaml

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
TEMPLATE = os.path.join(ROOT, "tools", "ci", "github-actions-replayssm.yml")
KIT = os.path.join(ROOT, "tools", "python")


def fail(msg):
    print(f"ci_template: {msg}", file=sys.stderr)
    sys.exit(1)


def step(job, name_part):
    for s in job["steps"]:
        if name_part in s.get("name", ""):
            return s["run"]
    fail(f"no step named like {name_part!r}")


def lint(path):
    exe = os.path.join(os.path.dirname(sys.executable), "check-jsonschema")
    return subprocess.run([exe, "--builtin-schema", "vendor.github-workflows", path], capture_output=True, text=True)


def main():
    cli = os.path.abspath(sys.argv[1])
    r = lint(TEMPLATE)
    if r.returncode != 0:
        fail("the template does not validate against the GitHub workflow schema:\n" + r.stdout + r.stderr)
    with open(TEMPLATE) as f:
        text = f.read()
    wf = yaml.safe_load(text)
    work = tempfile.mkdtemp(prefix="replayssm-ci-")
    try:
        broken = os.path.join(work, "broken.yml")
        with open(broken, "w") as f:  # a step with neither `run` nor `uses`: the linter must refuse it
            f.write(text.replace("      - uses: actions/checkout@v4\n", "      - with: {fetch-depth: 0}\n", 1))
        if lint(broken).returncode == 0:
            fail("the schema check passed a workflow whose first step has neither run nor uses")

        shards = wf["jobs"]["campaign"]["strategy"]["matrix"]["shard"]
        cases = int(wf["env"]["CASES"])  # the template's own campaign: it must come out CONFORMANT
        bindir = os.path.join(work, "bin")
        os.makedirs(bindir)
        os.symlink(cli, os.path.join(bindir, "replayssm"))
        env = dict(os.environ, TARGET_CMD=f"{sys.executable} {os.path.join(KIT, 'examples', 'numpy_replay.py')}",
                   PRESET=wf["env"]["PRESET"], CASES=str(cases), SHARDS=str(len(shards)),
                   PATH=bindir + os.pathsep + os.environ["PATH"], PYTHONPATH=KIT)
        script = step(wf["jobs"]["campaign"], "Campaign shard")
        procs = []
        for i in shards:
            d = os.path.join(work, f"shard{i}")
            os.makedirs(d)
            run = script.replace("${{ matrix.shard }}", str(i))
            procs.append((i, d, subprocess.Popen(["bash", "-e", "-c", run], cwd=d, env=env, stdout=subprocess.PIPE,
                                                 stderr=subprocess.STDOUT, text=True)))
        merged_in = os.path.join(work, "verdict", "reports")
        os.makedirs(merged_in)
        for i, d, p in procs:
            out, _ = p.communicate()
            if p.returncode != 0:
                fail(f"shard {i} failed (exit {p.returncode}):\n{out}")
            for name in os.listdir(os.path.join(d, "reports")):  # download-artifact, merge-multiple
                if name.endswith(".json"):
                    shutil.copy(os.path.join(d, "reports", name), merged_in)
            print(f"shard {i}/{len(shards)}: ok")
        v = subprocess.run(["bash", "-c", step(wf["jobs"]["verdict"], "Merge")], cwd=os.path.dirname(merged_in), env=env,
                           capture_output=True, text=True)
        merged = os.path.join(os.path.dirname(merged_in), "replayssm-campaign.json")
        if not os.path.exists(merged):
            fail(f"the merge wrote no report (exit {v.returncode}):\n{v.stdout}{v.stderr}")
        with open(merged) as f:
            m = json.load(f)
        verdict = m.get("verdict")
        want_rc = {"CONFORMANT": 0, "NOT CONFORMANT": 1, "INCOMPLETE": 3}.get(verdict)
        if want_rc is None or v.returncode != want_rc or verdict != "CONFORMANT":
            fail(f"merged verdict {verdict!r} with exit {v.returncode}:\n{v.stdout}{v.stderr}")
        summed = sum(c.get("cases_passed", 0) for c in m.get("campaigns", []))
        if summed != cases:
            fail(f"the merged report holds {summed} cases, the campaign ran {cases}:\n{v.stdout}")
        if not os.path.exists(os.path.join(os.path.dirname(merged_in), "replayssm-campaign.xml")):
            fail("the merge wrote no JUnit report")
        print(f"verdict job: {summed} cases merged from {len(shards)} shards, {verdict} (exit {v.returncode})")

        fx = os.path.join(work, "fixtures")
        os.makedirs(os.path.join(fx, "fx"))
        for rel in ("golden/tiny-gdn/tiny-gdn__recurrent__T12.safetensors",
                    "traces/tiny-gdn/tiny-gdn__trace__0.safetensors"):
            shutil.copy(os.path.join(ROOT, "fixtures", rel), os.path.join(fx, "fx"))
        run = step(wf["jobs"]["fixtures"], "Committed fixtures").replace("pytest ", f"{sys.executable} -m pytest ", 1)
        fenv = dict(env, REPLAYSSM_FIXTURES=os.path.join(fx, "fx"), REPLAYSSM_CLI=cli,
                    PYTEST_ADDOPTS="-p replayssm_kit.pytest_plugin -p no:cacheprovider")  # the kit is not installed here
        p = subprocess.run(["bash", "-c", run], cwd=fx, env=fenv, capture_output=True, text=True)
        if p.returncode != 0 or "2 passed" not in p.stdout:
            fail(f"the fixtures job failed (exit {p.returncode}):\n{p.stdout}{p.stderr}")
        if not os.path.exists(os.path.join(fx, "replayssm-fixtures.xml")):
            fail("the fixtures job wrote no JUnit report")
        print("fixtures job: 2 passed (pytest plugin, -n auto)")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
