"""replayssm_kit — judge any GDN/KDA implementation against replayssm from Python (NumPy + safetensors).

Fixtures, one operation at a time:

    import replayssm_kit as rk
    fx = rk.load_fixture("fixtures/golden/tiny-gdn/tiny-gdn__recurrent__T12.safetensors")
    result = fx.check(lambda fx: {"out.o": ..., "out.state": ...})
    print(result.summary())          # one line per tensor, worst element named

The serving lifecycle, through the target protocol (docs/target-protocol.md): subclass rk.Target, end the
script with `raise SystemExit(rk.serve(MyTarget()))`, and run
`replayssm fuzz --target exec:'python3 my_target.py' --preset tiny-gdn` (or pytest_helper.fuzz_target).
rk.read_frame / rk.write_frame / rk.digest64 are the protocol's frames and digest for other tools.

An engine that owns its bookkeeping (slots, batch order, trimming, commit timing, prefix snapshots), through
the engine level of the protocol (docs/target-protocol.md, "Engine level", version 0.2): subclass
replayssm_kit.engine.EngineTarget, end the script with `raise SystemExit(serve_engine(MyEngine()))`, and run
`replayssm fuzz --level engine --target exec:'python3 my_engine.py' --preset tiny-gdn`. Prefix snapshots
(snapshot_hit, snapshot) and migrate are declined unless capabilities() claims "prefix_snapshots" /
"migrates"; tools/python/examples/numpy_engine.py is a complete engine that claims both.

Trace fixtures, the lifecycle without the CLI: replay_trace(path, MyTarget()) makes the recorded calls and checks
outputs, committed states and untouched slots at the tier the target claims (replayssm_kit.replay); MRoPE
traces the same way with replay_mrope_trace(path, MyTarget()) (replayssm_kit.mrope_replay, protocol 1.10).

See docs/peer-conformance.md for the engine-side recipes, tools/python/examples/numpy_replay.py for a complete
target, and pytest_helper for parametrized tests.
"""

from .compare import Report, Tolerance, compare
from .fixture import (CheckResult, Fixture, FixtureError, find_fixtures, load_fixture, read_op, save_fixture)
from .protocol import Frame, ProtocolError, digest64, read_frame, write_frame
from .replay import CommandResult, TraceResult, replay_trace
from .mrope_replay import replay_mrope_trace
from .safetensors_io import bf16_bits_to_f32, f32_to_bf16_bits, read_safetensors, write_safetensors
from .target import Row, Target, TargetError, serve
from .tiers import TIER_VOCABULARY, tier_tolerance
from .trace import Trace, TraceError, find_traces, load_trace

__all__ = [
    "CheckResult", "CommandResult", "Fixture", "FixtureError", "Frame", "ProtocolError", "Report", "Row",
    "TIER_VOCABULARY", "Target", "TargetError", "Tolerance", "Trace", "TraceError", "TraceResult",
    "bf16_bits_to_f32", "compare", "digest64", "f32_to_bf16_bits", "find_fixtures", "find_traces", "load_fixture",
    "load_trace", "read_frame", "read_op", "read_safetensors", "replay_mrope_trace", "replay_trace", "save_fixture",
    "serve",
    "tier_tolerance", "write_frame", "write_safetensors",
]

from pathlib import Path as _Path

# The project's one version: the repository's VERSION file (replayssm_kit/VERSION is a copy of it, checked equal
# by tests/test_version.py),
# the same that `replayssm --version` prints.
__version__ = (_Path(__file__).with_name("VERSION")).read_text(encoding="utf-8").strip()
