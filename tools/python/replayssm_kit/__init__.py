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

See docs/peer-conformance.md for the engine-side recipes, tools/python/examples/numpy_replay.py for a complete
target, and pytest_helper for parametrized tests.
"""

from .compare import Report, Tolerance, compare
from .fixture import (CheckResult, Fixture, FixtureError, find_fixtures, load_fixture, read_op, save_fixture)
from .protocol import Frame, ProtocolError, digest64, read_frame, write_frame
from .safetensors_io import bf16_bits_to_f32, f32_to_bf16_bits, read_safetensors, write_safetensors
from .target import Row, Target, TargetError, serve

__all__ = [
    "CheckResult", "Fixture", "FixtureError", "Frame", "ProtocolError", "Report", "Row", "Target", "TargetError",
    "Tolerance", "bf16_bits_to_f32", "compare", "digest64", "f32_to_bf16_bits", "find_fixtures", "load_fixture",
    "read_frame", "read_op", "read_safetensors", "save_fixture", "serve", "write_frame", "write_safetensors",
]
__version__ = "0.2.0"
