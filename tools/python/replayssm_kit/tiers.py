"""Precision tiers: the tolerance an implementation claiming a tier is judged at (vocabulary version 1).

The same definitions as the C++ judge (core/include/replayssm/tier.hpp; derivations in docs/numerics.md,
"Precision tiers"). For one compared tensor of largest reference magnitude `scale` (m = max(1, scale)), an
output (state=False) or a committed state (state=True):

  fp32        allclose(atol = max(2e-5 m, s), rtol = 0)
  tf32, bf16  budget(rel_rms = 8u + r, atol = max(16u m, s)),   u = 2^-11 (tf32), 2^-9 (bf16)

where, if the tensor (or, for an output, the state it reads) is stored in bf16 (state_dtype BF16, an output
with act_dtype BF16, or round_beta_to_act), s = 2^-6 m and r = 2^-7, else s = r = 0. A file recording the
vocabulary version it was judged with (trace fixtures: __metadata__.tier_vocabulary) is refused by a reader
that knows another one. core/tests/data/tier_tolerances.json pins values both implementations must give.
"""

from __future__ import annotations

import math

from .compare import Tolerance

TIER_VOCABULARY = "1"
TIERS = ("fp32", "tf32", "bf16")


def unit_roundoff(tier: str) -> float:
    """fp32 2^-24, tf32 2^-11 (10 explicit mantissa bits), bf16 2^-9."""
    rounding = {"fp32": -24, "tf32": -11, "bf16": -9}
    if tier not in rounding:
        raise ValueError(f"unknown precision tier {tier!r} (known: {', '.join(TIERS)})")
    return math.ldexp(1.0, rounding[tier])


def tier_tolerance(tier: str, config: dict, scale: float, state: bool) -> Tolerance:
    """The tolerance of a tensor compared at `tier` for a model `config` (the fixture/setup config object)."""
    u = unit_roundoff(tier)
    m = max(1.0, float(scale))
    bf16_storage = (config.get("state_dtype") == "BF16" or (not state and config.get("act_dtype") == "BF16")
                    or bool(config.get("round_beta_to_act")))
    storage_atol = math.ldexp(m, -6) if bf16_storage else 0.0
    if tier == "fp32":
        return Tolerance("allclose", atol=max(2e-5 * m, storage_atol), rtol=0.0)
    storage_rms = math.ldexp(1.0, -7) if bf16_storage else 0.0
    return Tolerance("budget", ratio=8.0 * u + storage_rms, atol=max(16.0 * u * m, storage_atol))


def is_state_tensor(name: str) -> bool:
    """Whether a fixture output holds a committed state or pool (compared as a state) rather than outputs."""
    base = name.removeprefix("out.")
    return "state" in base or "pool" in base
