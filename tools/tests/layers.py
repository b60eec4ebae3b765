"""The include graph between the project's layers (docs/architecture.md, "Layers"): every #include of a non-test
source file must name a file of its own layer or of a layer below it. Prints the graph (layer -> layers it
includes, with the number of include lines) and exits 1 naming every include that goes up or sideways.

    python3 tools/tests/layers.py [ROOT]        # the source tree (default: this checkout)
    python3 tools/tests/layers.py --self-test   # the checker itself: a clean tree passes, every kind of bad edge fails

Standard library only. Quoted includes are resolved as the compiler does: next to the including file first, then
on the include directories of the layers (each layer's include/ folder, reference/fuzz, conformance/exec).
"""

import re
import sys
import tempfile
from pathlib import Path

# Layer -> the folders that hold it (relative to the root). A file belongs to the layer of the longest folder
# that contains it.
FOLDERS = {
    "core": ["core"],
    "recurrence": ["reference/recurrence"],
    "mrope": ["reference/mrope"],
    "lifecycle": ["reference/lifecycle"],
    "engine_level": ["reference/engine_level"],
    "fixtures": ["reference/fixtures"],
    "fuzz": ["reference/fuzz"],
    "optimized": ["optimized"],
    "conformance": ["conformance"],
    "tools": ["tools/replayssm"],
}
# Layer -> the layers it may include (besides itself). The reference's layers never see optimized/ and optimized/
# never sees them; only conformance/ sees both.
ALLOWED = {
    "core": [],
    "recurrence": ["core"],
    "mrope": ["core"],
    "lifecycle": ["recurrence", "core"],
    "engine_level": ["lifecycle", "recurrence", "core"],
    "fixtures": ["lifecycle", "recurrence", "mrope", "core"],
    "fuzz": ["engine_level", "fixtures", "lifecycle", "recurrence", "mrope", "core"],
    "optimized": ["core"],
    "conformance": ["fuzz", "engine_level", "fixtures", "lifecycle", "recurrence", "mrope", "optimized", "core"],
    "tools": ["conformance", "fuzz", "engine_level", "fixtures", "lifecycle", "recurrence", "mrope", "optimized",
              "core"],
}
# Include directories a quoted include may be found on (besides the including file's folder).
INCLUDE_DIRS = ["core/include", "reference/recurrence/include", "reference/lifecycle/include",
                "reference/fixtures/include", "reference/engine_level/include", "reference/mrope/include",
                "reference/fuzz", "optimized/include", "conformance/exec", "conformance"]
SOURCES = (".cpp", ".hpp", ".cu", ".cuh", ".h")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def layer_of(rel: str):
    best = None
    for layer, folders in FOLDERS.items():
        for f in folders:
            if rel == f or rel.startswith(f + "/"):
                if best is None or len(f) > len(best[1]):
                    best = (layer, f)
    return best[0] if best else None


def is_test(rel: str) -> bool:
    parts = rel.split("/")
    return "tests" in parts or "bench" in parts


def resolve(root: Path, src: Path, name: str):
    here = src.parent / name
    if here.is_file():
        return here
    for d in INCLUDE_DIRS:
        p = root / d / name
        if p.is_file():
            return p
    return None


def check(root: Path):
    """(edges {(from, to): count}, problems [text])."""
    edges, problems = {}, []
    for src in sorted(p for p in root.rglob("*") if p.suffix in SOURCES and p.is_file()):
        rel = src.relative_to(root).as_posix()
        if rel.startswith(("build", ".")) or is_test(rel):
            continue
        me = layer_of(rel)
        if me is None:
            continue
        for lineno, m in ((src.read_text(errors="replace")[:m.start()].count("\n") + 1, m)
                          for m in INCLUDE.finditer(src.read_text(errors="replace"))):
            target = resolve(root, src, m.group(1))
            if target is None:
                problems.append(f"{rel}:{lineno}: #include \"{m.group(1)}\" is not found on any layer's include path")
                continue
            other = layer_of(target.relative_to(root).as_posix())
            if other is None or other == me:
                continue
            edges[(me, other)] = edges.get((me, other), 0) + 1
            if other not in ALLOWED[me]:
                problems.append(f"{rel}:{lineno}: #include \"{m.group(1)}\" reaches layer '{other}' from layer '{me}', "
                                f"which may include only {', '.join(ALLOWED[me]) or 'nothing of the project'}")
    return edges, problems


def report(root: Path) -> int:
    edges, problems = check(root)
    print("include graph between layers (non-test sources; layer -> layer: include lines)")
    for (a, b), n in sorted(edges.items()):
        print(f"  {a:12s} -> {b:12s} {n}")
    for p in problems:
        print("LAYER VIOLATION " + p)
    print(f"layers: {'ok' if not problems else str(len(problems)) + ' violation(s)'}")
    return 1 if problems else 0


def self_test() -> int:
    """A tree with one file per layer passes; each bad edge (up, sideways, unresolvable) is reported."""
    bad_cases = {
        "up": ("reference/recurrence/src/a.cpp", '#include "replayssm/lifecycle/x.hpp"\n', "reaches layer 'lifecycle'"),
        "sideways": ("optimized/src/k.cu", '#include "replayssm/recurrence/g.hpp"\n', "reaches layer 'recurrence'"),
        "core up": ("core/src/c.cpp", '#include "replayssm/fixtures/f.hpp"\n', "reaches layer 'fixtures'"),
        "missing": ("reference/lifecycle/src/b.cpp", '#include "nowhere.hpp"\n', "is not found"),
    }
    ok = True
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        for rel, text in {"core/include/replayssm/c.hpp": "",
                          "reference/recurrence/include/replayssm/recurrence/g.hpp": '#include "replayssm/c.hpp"\n',
                          "reference/lifecycle/include/replayssm/lifecycle/x.hpp": '#include "replayssm/recurrence/g.hpp"\n',
                          "reference/fixtures/include/replayssm/fixtures/f.hpp": '#include "replayssm/lifecycle/x.hpp"\n',
                          "reference/lifecycle/tests/t.cpp": '#include "replayssm/fixtures/f.hpp"\n'}.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(text)
        edges, problems = check(root)
        if problems or edges.get(("lifecycle", "recurrence")) != 1:
            print(f"self-test: the clean tree was judged wrong: {problems} {edges}")
            ok = False
        for name, (rel, text, says) in bad_cases.items():
            p = root / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(text)
            _, problems = check(root)
            p.unlink()
            if not any(says in q for q in problems):
                print(f"self-test: the {name} include was not reported ({problems})")
                ok = False
    print("layers self-test: " + ("ok" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    if sys.argv[1:] == ["--self-test"]:
        sys.exit(self_test())
    sys.exit(report(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[2]))
