"""JUnit XML, JSON reports, sharded campaigns and `report merge` of the replayssm CLI, end to end.

Usage: python3 cli_reports_test.py CLI {junit|shards}. Standard library only (xml.etree parses every JUnit
file). Prints one line per check; exit status 1 on the first failure.
"""
import json
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

CLI, PART = sys.argv[1], sys.argv[2]
WORK = tempfile.mkdtemp(prefix="replayssm-reports-")
SMALL = ["--preset", "tiny-gdn", "--layers", "1", "--max-commands", "20"]


def run(*args, env=None, expect=0):
    p = subprocess.run([CLI, *args], capture_output=True, text=True, env=env)
    if expect is not None and p.returncode != expect:
        sys.exit(f"FAIL: {' '.join(args)}: exit {p.returncode}, expected {expect}\n{p.stdout}\n{p.stderr}")
    return p


def check(cond, what):
    if not cond:
        sys.exit(f"FAIL: {what}")
    print(f"ok   {what}")


def junit(path):
    """(root, counts) of a JUnit file: counts of testcases, failures, skipped, as the elements say."""
    root = ET.parse(path).getroot()
    cases = root.findall("./testsuite/testcase")
    counts = (len(cases), sum(1 for c in cases if c.find("failure") is not None),
              sum(1 for c in cases if c.find("skipped") is not None))
    declared = (int(root.get("tests")), int(root.get("failures")), int(root.get("skipped")))
    check(counts == declared, f"{os.path.basename(path)}: declared counts {declared} match the elements {counts}")
    return root, counts


def path(name):
    return os.path.join(WORK, name)


def test_junit():
    # check: a clean set, then one fixture corrupted -> one failure naming the worst element and the repro.
    run("fixtures", "generate", "--preset", "tiny-kda", "--out", path("g"))
    files = sorted(os.path.relpath(os.path.join(d, f), path("g")) for d, _, fs in os.walk(path("g")) for f in fs
                   if f.endswith(".safetensors"))
    run("check", path("g"), "--quiet", "--junit", path("check.xml"))
    _, counts = junit(path("check.xml"))
    check(counts == (len(files), 0, 0), f"check: one passing test case per fixture ({len(files)})")
    victim = next(f for f in files if "recurrent" in f)
    data = bytearray(open(path("g/" + victim), "rb").read())
    n = int.from_bytes(data[:8], "little")
    entries = json.loads(data[8:8 + n])
    out = next(e for k, e in sorted(entries.items()) if k.startswith("out.") and e["dtype"] in ("F32", "F64"))
    width = 4 if out["dtype"] == "F32" else 8
    data[8 + n + out["data_offsets"][0] + width - 1] ^= 0x20  # an exponent bit of the first expected output
    open(path("g/" + victim), "wb").write(bytes(data))
    run("check", path("g"), "--quiet", "--junit", path("check_bad.xml"), expect=1)
    root, counts = junit(path("check_bad.xml"))
    check(counts == (len(files), 1, 0), "check: the changed fixture is the one failure")
    failure = root.find("./testsuite/testcase/failure")
    check(victim in root.find("./testsuite/testcase[failure]").get("name"), "check: the failing case names the file")
    check("worst" in failure.get("message") or "error" in failure.get("message"),
          f"check: the failure message names the worst element ({failure.get('message')[:80]}...)")
    check("replayssm check" in (failure.text or ""), "check: the failure text holds the repro command")
    check("reproduce: replayssm check " in failure.get("message") and victim in failure.get("message"),
          "check: the failure message itself holds the repro command")

    # fuzz: a passing campaign too short to exercise what the target claims (INCOMPLETE, exit 3, a failing verdict
    # case naming what was not exercised), a full-depth one (CONFORMANT), then an injected fault -> failure with
    # reason and rerun command.
    run("fuzz", "--target", "replay", *SMALL, "--cases", "5", "--junit", path("fuzz.xml"), "--json", path("fuzz.json"),
        expect=3)
    root, counts = junit(path("fuzz.xml"))
    verdict = root.find("./testsuite[@name='verdict']/testcase/failure")
    check(counts == (2, 1, 0) and verdict is not None and verdict.get("message").startswith("INCOMPLETE: not exercised"),
          "fuzz: a passing campaign and an INCOMPLETE verdict case naming what was not exercised")
    run("fuzz", "--target", "replay", "--preset", "tiny-gdn", "--cases", "100", "--max-commands", "100",
        "--junit", path("fuzz_full.xml"))
    _, counts = junit(path("fuzz_full.xml"))
    check(counts == (2, 0, 0), "fuzz: a full-depth campaign and a CONFORMANT verdict case")
    run("fuzz", "--target", "replay", *SMALL, "--cases", "100", "--fault", "zero_accepted_as_one", "--dump-dir",
        path("d"), "--junit", path("fuzz_bad.xml"), expect=1)
    root, counts = junit(path("fuzz_bad.xml"))
    failure = root.find("./testsuite/testcase/failure")
    check(counts == (2, 2, 0) and failure.get("message"), "fuzz: the faulty campaign fails with its reason")
    check("replayssm fuzz --replay" in failure.text and "--fault zero_accepted_as_one" in failure.text,
          "fuzz: the failure text holds the replay and rerun commands")
    check("reproduce: replayssm fuzz --replay " in failure.get("message"),
          "fuzz: the failure message itself holds the replay command")

    # conform: one test case per fixture (committed and generated) and per campaign.
    run("conform", "--preset", "tiny-kda", "--cases", "3", "--no-deep", "--json", path("conform.json"), "--junit",
        path("conform.xml"), expect=3)
    rep = json.load(open(path("conform.json")))
    n_fx = sum(len(d["results"]) for d in rep["committed_fixtures"]) + len(rep["determinism"]["results"])
    _, counts = junit(path("conform.xml"))
    n_v = len(rep["verdicts"])
    n_bad = sum(v["verdict"] != "CONFORMANT" for v in rep["verdicts"])
    check(rep["verdict"] == "INCOMPLETE" and n_bad >= 1 and counts == (n_fx + len(rep["fuzz"]) + n_v, n_bad, 0),
          f"conform: {n_fx} fixtures + {len(rep['fuzz'])} campaigns + {n_v} verdicts, INCOMPLETE without --deep")

    # A campaign the target does not cover is skipped (a report as a shard would write it, merged).
    uncovered = {"command": "fuzz", "campaigns": [
        {"target": "exec:x", "preset": "tiny-gdn", "covered": False, "not_covered": "K = 64 only", "failed": False,
         "cases_passed": 0, "seconds": 0, "campaign": "replayssm fuzz --target exec:x"}]}
    json.dump(uncovered, open(path("uncovered.json"), "w"))
    run("report", "merge", path("uncovered.json"), "--junit", path("uncovered.xml"), expect=3)
    root, counts = junit(path("uncovered.xml"))
    check(counts == (2, 1, 1) and "K = 64 only" in root.find(".//skipped").get("message"),
          "a campaign not covered is a skipped test case, with the reason")

    # A JUnit file that cannot be written: non-zero exit, the error names the option, nothing left behind.
    p = run("check", path("g"), "--quiet", "--junit", path("no/such/dir/x.xml"), expect=None)
    check(p.returncode not in (0, 1) and "junit" in p.stderr, f"unwritable --junit: exit {p.returncode}, names junit")
    check(not os.path.exists(path("no")), "unwritable --junit: nothing written")

    # --json reports: written atomically, a failed write named and nothing half-written or left behind.
    for args in (["check", path("g"), "--quiet"], ["fuzz", "--target", "replay", *SMALL, "--cases", "2"]):
        p = run(*args, "--json", path("no/such/dir/r.json"), expect=None)
        check(p.returncode == 2 and "error: json: cannot" in p.stderr and not os.path.exists(path("no")),
              f"{args[0]} --json into a missing directory: exit 2, names json, nothing written")
    os.makedirs(path("taken.json/inside"))
    p = run("check", path("g"), "--quiet", "--json", path("taken.json"), expect=None)
    check(p.returncode == 2 and "is a directory" in p.stderr and os.listdir(path("taken.json")) == ["inside"],
          "--json onto a directory: exit 2, named, the directory untouched")
    open(path("old.json"), "w").write("previous report\n")
    p = run("check", path("g/no-such-fixture.safetensors"), "--json", path("old.json"), expect=None)
    check(p.returncode == 2 and open(path("old.json")).read() == "previous report\n",
          "a run that fails before reporting leaves an existing --json file as it was")
    leftovers = [f for d, _, fs in os.walk(WORK) for f in fs if f.endswith(".tmp")]
    check(not leftovers, f"no temporary file left behind ({leftovers})")


def test_shards():
    env = dict(os.environ)
    reports = []
    for i in range(3):
        out = path(f"s{i}.json")
        run("fuzz", "--target", "replay", *SMALL, "--cases", "10", "--seed", "5", "--shard", f"{i}/3", "--json", out,
            expect=3)
        reports.append(json.load(open(out)))
    camps = [r["campaigns"][0] for r in reports]
    check(sum(c["cases_passed"] for c in camps) == 10 and [c["cases"] for c in camps] == [4, 3, 3],
          "3 shards of 10 cases run 4 + 3 + 3")
    check(len({c["seed"] for c in camps}) == 3 and 5 not in {c["seed"] for c in camps}, "each shard has its own seed")
    again = path("s1_again.json")
    run("fuzz", "--target", "replay", *SMALL, "--cases", "10", "--seed", "5", "--shard", "1/3", "--json", again,
        expect=3)
    a = json.load(open(again))["campaigns"][0]
    check((a["seed"], a["cases_passed"]) == (camps[1]["seed"], camps[1]["cases_passed"]), "shard 1/3 reruns alone")
    env.update(GTEST_SHARD_INDEX="1", GTEST_TOTAL_SHARDS="3")
    run("fuzz", "--target", "replay", *SMALL, "--cases", "10", "--seed", "5", "--json", path("env.json"), env=env,
        expect=3)
    e = json.load(open(path("env.json")))["campaigns"][0]
    check(e["seed"] == camps[1]["seed"] and "--shard 1/3" in e["rerun"], "GTEST_SHARD_INDEX/GTEST_TOTAL_SHARDS honoured")
    whole = json.load(open(path("s0.json")))["campaigns"][0]["campaign"]
    check("--shard" not in whole and "--cases 10" in whole, "the campaign line runs the whole campaign")
    p = run("fuzz", "--target", "replay", *SMALL, "--cases", "2", "--shard", "0/3", expect=None)
    check(p.returncode == 2 and "shard" in p.stderr, "more shards than cases: an error naming shard")
    p = run("fuzz", "--target", "replay", *SMALL, "--shard", "3/3", expect=None)
    check(p.returncode == 2 and "shard" in p.stderr, "shard index out of range: an error naming shard")

    merged = path("merged.json")
    run("report", "merge", *[path(f"s{i}.json") for i in range(3)], "--json", merged, "--junit", path("merged.xml"),
        expect=3)
    m = json.load(open(merged))
    check(m["verdict"] == "INCOMPLETE" and m["campaigns"][0]["cases_passed"] == 10 and m["campaigns"][0]["shards"] == 3
          and m["verdicts"][0]["coverage"]["cases"] == 10,
          "merge: 10 cases over 3 shards, their coverage summed, INCOMPLETE as each shard")
    _, counts = junit(path("merged.xml"))
    check(counts == (2, 1, 0), "merge: one test case for the campaign, one for its verdict")
    p = run("report", "merge", path("s0.json"), path("s2.json"), expect=1)
    check("shard 1/3 is missing" in p.stdout, "merge: a missing shard fails the merge, named")
    p = run("report", "merge", path("s0.json"), path("s0.json"), path("s1.json"), path("s2.json"), expect=1)
    check("given 2 times" in p.stdout, "merge: a shard given twice fails the merge")

    # A failing shard: the merge fails and keeps that shard's repro.
    bad = [path(f"f{i}.json") for i in range(2)]
    for i, out in enumerate(bad):
        run("fuzz", "--target", "replay", *SMALL, "--cases", "60", "--fault", "zero_accepted_as_one", "--shard",
            f"{i}/2", "--dump-dir", path("fd"), "--json", out, expect=None)
    p = run("report", "merge", *bad, "--json", path("fm.json"), "--junit", path("fm.xml"), expect=1)
    fm = json.load(open(path("fm.json")))
    fails = fm["campaigns"][0]["failures"]
    check(not fm["ok"] and fails and all("--shard" in f["rerun"] and f["dump_path"] for f in fails),
          f"merge: a failing shard fails the merge; {len(fails)} failure(s) kept with rerun and dump")
    root, counts = junit(path("fm.xml"))
    check(counts == (2, 2, 0) and "--shard" in root.find(".//failure").text, "merge: JUnit failure with the repro")

    # Engine-level shards merge the same way (each report names its shard and the whole campaign).
    for i in range(2):
        run("fuzz", "--level", "engine", "--target", "engine:reference", *SMALL, "--cases", "10", "--shard",
            f"{i}/2", "--json", path(f"e{i}.json"))
    run("report", "merge", path("e0.json"), path("e1.json"), "--json", path("em.json"))
    em = json.load(open(path("em.json")))
    check(em["ok"] and em["campaigns"][0]["cases_passed"] == 10 and em["campaigns"][0]["shards"] == 2,
          "merge: engine-level shards, 10 cases over 2 shards")
    p = run("fuzz", "--target", "replay", *SMALL, "--cases", "0", expect=None)
    check(p.returncode == 2 and "cases" in p.stderr, "zero cases: an error naming cases")

    # conform shards: fixtures split, every fixture checked once over the shards.
    for i in range(2):
        run("conform", "--preset", "tiny-kda", "--cases", "2", "--no-deep", "--shard", f"{i}/2", "--json",
            path(f"c{i}.json"), expect=3)
    run("report", "merge", path("c0.json"), path("c1.json"), "--json", path("cm.json"), expect=3)
    cm = json.load(open(path("cm.json")))
    run("conform", "--preset", "tiny-kda", "--cases", "2", "--no-deep", "--json", path("c_all.json"), expect=3)
    whole = json.load(open(path("c_all.json")))
    n = sum(len(d["results"]) for d in whole["committed_fixtures"]) + len(whole["determinism"]["results"])
    paths = [f["path"] for f in cm["fixtures"]]
    check(len(paths) == n and len(set(paths)) == n, f"conform shards: the {n} fixtures checked once each")


{"junit": test_junit, "shards": test_shards}[PART]()
print(f"cli_reports {PART}: ok")
