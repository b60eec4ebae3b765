"""replayssm_kit — check any implementation against replayssm fixtures from Python (NumPy + safetensors).

    import replayssm_kit as rk
    fx = rk.load_fixture("fixtures/golden/tiny-gdn/tiny-gdn__recurrent__T12.safetensors")
    result = fx.check(lambda fx: {"out.o": ..., "out.state": ...})
    print(result.summary())          # one line per tensor, worst element named

See docs/peer-conformance.md for the engine-side recipe and pytest_helper for parametrized tests.
"""

from .compare import Report, Tolerance, compare
from .fixture import (CheckResult, Fixture, FixtureError, find_fixtures, load_fixture, read_op, save_fixture)
from .safetensors_io import bf16_bits_to_f32, f32_to_bf16_bits, read_safetensors, write_safetensors

__all__ = [
    "CheckResult", "Fixture", "FixtureError", "Report", "Tolerance", "bf16_bits_to_f32", "compare",
    "f32_to_bf16_bits", "find_fixtures", "load_fixture", "read_op", "read_safetensors", "save_fixture",
    "write_safetensors",
]
__version__ = "0.1.0"
