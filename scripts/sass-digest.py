"""The machine code of every CUDA kernel, as digests: compiles each .cu of optimized/ to one cubin per
architecture with the exact flags of a configured build (its compile_commands.json), and prints, per
architecture and kernel, the SHA-256 of the kernel's SASS (the ELF section .text.<kernel>) and of its resource
record (.nv.info.<kernel>: registers, shared memory, launch bounds). Two trees whose digests are equal have
byte-identical SASS for every kernel; -lineinfo's path-dependent sections are not hashed, and the anonymous
namespace tag nvcc puts in a mangled name (a hash of the file's path) is replaced by "<anon>".

    python3 scripts/sass-digest.py BUILD_DIR [OUT.txt]      # e.g. build (the default preset) or build-sm90
    diff before.txt after.txt                               # empty: the SASS did not change

Needs nvcc and readelf (binutils); no GPU. Exit 2 when the build has no CUDA sources.
"""

import hashlib
import json
import re
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

ANON = re.compile(r"_GLOBAL__N__[0-9a-f]{8}_[0-9]+_[A-Za-z0-9_]+?_cu_[0-9a-f]{8}")


def sections(cubin: Path):
    """{section name: bytes} of the cubin's .text.* and .nv.info.* sections."""
    out = subprocess.run(["readelf", "-S", "-W", str(cubin)], capture_output=True, text=True, check=True).stdout
    data = cubin.read_bytes()
    found = {}
    for line in out.splitlines():
        m = re.match(r"\s*\[\s*\d+\]\s+(\S+)\s+\S+\s+[0-9a-f]+\s+([0-9a-f]+)\s+([0-9a-f]+)", line)
        if not m:
            continue
        name, off, size = m.group(1), int(m.group(2), 16), int(m.group(3), 16)
        if name.startswith(".text.") or name.startswith(".nv.info."):
            found[name] = data[off:off + size]
    return found


def main() -> int:
    build = Path(sys.argv[1])
    commands = [e for e in json.loads((build / "compile_commands.json").read_text()) if e["file"].endswith(".cu")]
    if not commands:
        print(f"{build}: no CUDA sources in compile_commands.json", file=sys.stderr)
        return 2
    lines = []
    with tempfile.TemporaryDirectory() as tmp:
        for e in sorted(commands, key=lambda e: e["file"]):
            argv = shlex.split(e["command"])
            archs = [m.group(1) for a in argv for m in [re.match(r"--generate-code=arch=compute_(\d+)", a)] if m]
            keep, skip = [], False
            for a in argv[1:]:
                if skip:
                    skip = False
                    continue
                if a == "-o":
                    skip = True
                    continue
                if a.startswith("--generate-code") or a == "-c" or a == e["file"]:
                    continue
                keep.append(a)
            src = Path(e["file"]).name
            for arch in archs:
                cubin = Path(tmp) / f"{src}.sm_{arch}.cubin"
                subprocess.run([argv[0], *keep, "-cubin", f"-arch=sm_{arch}", e["file"], "-o", str(cubin)],
                               cwd=e["directory"], check=True)
                for name, blob in sorted(sections(cubin).items()):
                    lines.append(f"sm_{arch} {src} {ANON.sub('<anon>', name)} {hashlib.sha256(blob).hexdigest()}")
    text = "\n".join(lines) + "\n"
    if len(sys.argv) > 2:
        Path(sys.argv[2]).write_text(text)
    sys.stdout.write(text)
    kernels = sum(1 for l in lines if " .text." in l)
    print(f"{kernels} kernel SASS sections over {len(commands)} sources", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
