"""The implementation side of the target protocol: subclass `Target`, call `serve()`.

    from replayssm_kit.target import Target, TargetError, serve

    class MyKernel(Target):
        def capabilities(self): return {"name": "my-kernel", "tier": "tf32", "design": "replay"}
        def setup(self, setup, params): ...
        def step(self, rows, inputs): ...     # -> one o array per layer
        def commit(self, rows): ...
        def committed_state(self, layer, slot): ...
        def pool(self, layer): ...
        def capture(self, rows, T): ...       # optional (protocol 1.4): claims the `capture` capability
                                              # (capabilities()["step_mix"], 1.7: one width per step, or
                                              # prefill apart, for a kernel that cannot group rows itself)
        def conv_step(self, rows, x): ...     # optional (protocol 1.5, with conv_commit, conv_committed_state,
                                              # conv_pool): claims the `conv_state` capability
        def mrope_step(self, rows, q, k): ... # optional (protocol 1.10, with mrope_setup, mrope_admit,
                                              # mrope_accept, mrope_release and capabilities()["mrope"]):
                                              # -> positions, index, q_rot, k_rot

    if __name__ == "__main__":
        raise SystemExit(serve(MyKernel()))

and judge it: `replayssm fuzz --target exec:'python3 my_kernel.py' --preset tiny-gdn`.

The methods mirror the protocol's commands (docs/target-protocol.md) and the judge's Target interface
(reference/lifecycle/include/replayssm/lifecycle/target.hpp). serve() does the rest: frames, the version check,
BF16 inputs as float32 arrays, answers converted to the protocol's dtypes (replayssm_kit.convert), the
digests behind `pool` and `committed_state` (only what changed crosses the pipe), and exceptions turned
into error answers. Notation: L layers, N packed tokens of a step, S slots, E = HV*K*V, stride >= E;
act = config["act_dtype"], state = config["state_dtype"] ("F32" or "BF16").
"""

from __future__ import annotations

# The public entry point of the implementation side: the names below are the kit's API for targets. The module
# sits on top of the kit (rows -> interface -> session -> server -> target), so nothing inside the kit imports it.
from .interface import (CAPTURE_MINOR, CONV_FIXTURE_OPS, CONV_FIXTURE_OPS_MINOR, CONV_METHODS, CONV_STATE_MINOR,  # noqa: F401
                        FIXTURE_OPS, MROPE_FIXTURE_OPS, MROPE_METHODS, MROPE_MINOR, MROPE_MODELS, STEP_MIX_MINOR,
                        TREE_FIXTURE_MINOR, TREE_FIXTURE_OPS, Target, is_device_fault)
from .mrope import MropeRow  # noqa: F401
from .rows import INDEX_FIELDS, PAD_SLOT, Row, RowIndex, Rows, TargetError, step_mix_excess  # noqa: F401
from .server import serve  # noqa: F401

__all__ = ["CAPTURE_MINOR", "CONV_FIXTURE_OPS", "CONV_FIXTURE_OPS_MINOR", "CONV_METHODS", "CONV_STATE_MINOR",
           "FIXTURE_OPS", "INDEX_FIELDS", "MROPE_FIXTURE_OPS", "MROPE_METHODS", "MROPE_MINOR", "MROPE_MODELS",
           "MropeRow", "PAD_SLOT", "Row", "RowIndex", "Rows", "STEP_MIX_MINOR", "TREE_FIXTURE_MINOR", "TREE_FIXTURE_OPS",
           "Target", "TargetError",
           "is_device_fault", "serve", "step_mix_excess"]
