"""The engine level of the protocol (docs/target-protocol.md, "Engine level"): an engine that owns its
bookkeeping — slots, batch order, trimming at the stop token and the max_new cap, commit timing, copy-on-write —
is judged from request events. Subclass EngineTarget and end the script with
`raise SystemExit(serve_engine(MyEngine()))`, then run

    replayssm fuzz --level engine --target exec:'python3 my_engine.py' --preset tiny-gdn

Token inputs arrive as dicts of float32 arrays per layer: {"q": [n, H, K], "k": [n, H, K], "v": [n, HV, V],
"a": [n, HV, a_width], "b": [n, HV]}. Errors raised as TargetError(field, message) are answered as error
verdicts; the process keeps serving.

Version 0.2 adds prefix snapshots (the track step rule, `snapshot_hit`, the `snapshot` query) and `migrate`.
An engine takes part by claiming `"prefix_snapshots": True` / `"migrates": True` in capabilities() and
overriding snapshot_hit() and snapshot() / migrate(); by default it claims neither, is never sent them, and the
campaign reports them as not covered. To a judge speaking 0.1 the kit answers 0.1 and claims neither.
"""

from __future__ import annotations

import sys
import time
import traceback

import numpy as np

from .convert import ConversionError, to_wire
from .protocol import ProtocolError
from .server import _frames_only, run_frames
from .session import Session, integer
from .rows import TargetError

PROTOCOL_NAME = "replayssm.engine"
VERSION = (0, 2)
# Capabilities a judge older than 0.2 does not know: never claimed to one.
CAPABILITIES_0_2 = ("prefix_snapshots", "migrates")
STATUSES = ("running", "finished", "preempted")


class EngineTarget:
    """An engine under test. Every method but capabilities() must be overridden."""

    def capabilities(self) -> dict:
        """{"name": ..., "tier": "fp32" | "tf32" | "bf16", "bit_exact": bool}."""
        return {}

    def setup(self, setup: dict, options: dict, params: list) -> None:
        """A new case: setup as in the target protocol (config, num_slots, slot_stride, max_T, ...; poison as a
        float), options {"max_live", "commit", "buffers"} (conventions the engine may ignore) and, only for an
        engine claiming prefix_snapshots, "block" (> 0: keep prefix snapshots of that block; absent: none),
        params[l] = (A_log [HV], dt_bias [HV, a_width])."""
        raise NotImplementedError("setup")

    def admit(self, req: int, prompt: list, max_new: int) -> None:
        raise NotImplementedError("admit")

    def prefix_hit(self, req: int, source: int, prompt: list, max_new: int) -> None:
        raise NotImplementedError("prefix_hit")

    def fork(self, req: int, source: int) -> None:
        raise NotImplementedError("fork")

    # --- version 0.2, each behind a capability (declined unless claimed and overridden) -----------------------
    def snapshot_hit(self, req: int, source: int, prompt: list, max_new: int) -> None:
        """A new request whose prompt starts with the first X tokens `source` committed, X the block boundary of
        `source`'s latest prefix snapshot, restored from that snapshot into a slot of its own (copy-on-write),
        then `prompt` new tokens to prefill; generated starts at 0, it has no snapshot of its own yet.
        Capability `prefix_snapshots` (setup option `block` > 0)."""
        raise TargetError("op", "snapshot_hit: this engine keeps no prefix snapshots")

    def snapshot(self, req: int, layer) -> tuple:
        """(X, state): the block boundary X of a running request's latest prefix snapshot (0: none) and, when
        layer is not None and X > 0, the snapshot's state in that layer ([HV, K, V] or [HV, V, K]), else None.
        A query: it must not change the engine. Capability `prefix_snapshots`."""
        raise TargetError("op", "snapshot: this engine keeps no prefix snapshots")

    def migrate(self, req: int) -> None:
        """Move a running request to other slots (defragmentation): every persistent part of its state goes
        along (state, snapshot, ring records and cursors), nothing observable changes. Capability `migrates`."""
        raise TargetError("op", "migrate: this engine does not migrate")

    def step(self, entries: list, windows: list) -> list:
        """entries[i] = {"req", "T", "accepted", "eog_at"} in sampler order; windows[i][l] the verify window's
        inputs (T tokens), or inputs of 0 tokens for a request that still prefills. Returns, per entry, per
        layer, the outputs [n, HV, V] of the n tokens it processed."""
        raise NotImplementedError("step")

    def finish(self, req: int) -> None:
        raise NotImplementedError("finish")

    def preempt(self, req: int) -> None:
        raise NotImplementedError("preempt")

    def resume(self, req: int) -> None:
        raise NotImplementedError("resume")

    def requests(self) -> dict:
        """{req: {"status": "running" | "finished" | "preempted", "committed", "to_prefill", "generated"}}."""
        raise NotImplementedError("requests")

    def committed_state(self, req: int, layer: int) -> np.ndarray:
        """The logical committed state of a running request ([HV, K, V] or [HV, V, K] per the layout)."""
        raise NotImplementedError("committed_state")

    def slot_map(self) -> dict:
        """{req: [slots]} for every running request."""
        raise NotImplementedError("slot_map")

    def pool(self, layer: int) -> np.ndarray:
        """[num_slots, stride] (gaps included)."""
        raise NotImplementedError("pool")


def _error(field: str, message: str) -> dict:
    return {"ok": False, "error": {"field": field, "message": message}}


class _Loop:
    def __init__(self, engine: EngineTarget, out):
        self.engine, self.out, self.session, self.greeted = engine, out, None, False
        self.claims = {}

    def _tokens(self, frame, counts: list) -> list:
        """Per entry, per layer, input dicts cut from the packed q.l, k.l, ... tensors."""
        s = self.session
        total = sum(counts)
        layers = [s.layer_inputs(frame, l, total) for l in range(s.L)]
        out, at = [], 0
        for n in counts:
            out.append([{k: v[at:at + n] for k, v in layer.items()} for layer in layers])
            at += n
        return out

    def hello(self, frame):
        msg = frame.msg
        if msg.get("protocol") != PROTOCOL_NAME:
            raise TargetError("protocol", f"is {msg.get('protocol')!r}, this kit speaks {PROTOCOL_NAME!r}")
        v = msg.get("version")
        if not (isinstance(v, list) and len(v) == 2 and v[0] == VERSION[0]):
            raise TargetError("version", f"{v!r} is not supported (this kit speaks {VERSION[0]}.{VERSION[1]})")
        caps = dict(self.engine.capabilities() or {})
        for key in CAPABILITIES_0_2:
            if key in caps and type(caps[key]) is not bool:
                raise TargetError(f"capabilities.{key}", f"must be True or False, got {caps[key]!r}")
        # Answer the judge's minor when it is older, and claim nothing it would not know.
        minor = v[1] if type(v[1]) is int and 0 <= v[1] < VERSION[1] else VERSION[1]
        if minor < 2:
            caps = {k: x for k, x in caps.items() if k not in CAPABILITIES_0_2}
        self.claims = {k: caps.get(k, False) for k in CAPABILITIES_0_2}
        self.greeted = True
        return {"protocol": PROTOCOL_NAME, "version": [VERSION[0], minor], "capabilities": caps}, None

    def setup(self, frame):
        self.session = None
        s = Session.parse(frame.msg.get("setup"), frame.msg.get("poison_bits"))
        options = frame.msg.get("options")
        if not isinstance(options, dict):
            raise TargetError("options", "must be an object")
        self.engine.setup(s.setup_for_target(), options, [s.layer_params(frame, l) for l in range(s.L)])
        self.session = s
        return {}, None

    def admit(self, frame):
        m = frame.msg
        n = integer(m, "tokens", "tokens", 1)
        self.engine.admit(integer(m, "req", "req", 0), self._tokens(frame, [n])[0], integer(m, "max_new", "max_new", 1))
        return {}, None

    def prefix_hit(self, frame):
        m = frame.msg
        n = integer(m, "tokens", "tokens", 1)
        self.engine.prefix_hit(integer(m, "req", "req", 0), integer(m, "from", "from", 0), self._tokens(frame, [n])[0],
                               integer(m, "max_new", "max_new", 1))
        return {}, None

    def _claimed(self, key: str, op: str):
        if not self.claims.get(key):
            raise TargetError("op", f"'{op}' needs the {key} capability, which this engine did not claim")

    def snapshot_hit(self, frame):
        self._claimed("prefix_snapshots", "snapshot_hit")
        m = frame.msg
        n = integer(m, "tokens", "tokens", 1)
        self.engine.snapshot_hit(integer(m, "req", "req", 0), integer(m, "from", "from", 0),
                                 self._tokens(frame, [n])[0], integer(m, "max_new", "max_new", 1))
        return {}, None

    def snapshot(self, frame):
        self._claimed("prefix_snapshots", "snapshot")
        s, m = self.session, frame.msg
        layer = integer(m, "layer", "layer", 0) if "layer" in m else None
        if layer is not None and layer >= s.L:
            raise TargetError("layer", f"is {layer}, the model has {s.L} layers")
        answer = self.engine.snapshot(integer(m, "req", "req", 0), layer)
        if not (isinstance(answer, tuple) and len(answer) == 2):
            raise TargetError("snapshot", "snapshot() must return (tokens, state)")
        tokens, state = answer
        if type(tokens) is not int or tokens < 0:
            raise TargetError("tokens", f"the snapshot boundary must be a non-negative int, got {tokens!r}")
        if layer is None or tokens == 0:
            return {"tokens": tokens}, None
        if state is None:
            raise TargetError("state", f"snapshot at {tokens} tokens but no state for layer {layer}")
        return {"tokens": tokens}, {"state": (to_wire(state, s.state, s.state_shape, "state"), s.state)}

    def migrate(self, frame):
        self._claimed("migrates", "migrate")
        self.engine.migrate(integer(frame.msg, "req", "req", 0))
        return {}, None

    def fork(self, frame):
        self.engine.fork(integer(frame.msg, "req", "req", 0), integer(frame.msg, "from", "from", 0))
        return {}, None

    def finish(self, frame):
        self.engine.finish(integer(frame.msg, "req", "req", 0))
        return {}, None

    def preempt(self, frame):
        self.engine.preempt(integer(frame.msg, "req", "req", 0))
        return {}, None

    def resume(self, frame):
        self.engine.resume(integer(frame.msg, "req", "req", 0))
        return {}, None

    def step(self, frame):
        s, m = self.session, frame.msg
        entries, counts = m.get("entries"), m.get("window_tokens")
        if not isinstance(entries, list) or not isinstance(counts, list) or len(entries) != len(counts):
            raise TargetError("entries", "entries and window_tokens must be arrays of one length")
        es = [{k: integer(e, k, f"entries[{i}].{k}", 0) for k in ("req", "T", "accepted", "eog_at")}
              for i, e in enumerate(entries)]
        for i, n in enumerate(counts):
            if type(n) is not int or n < 0:
                raise TargetError(f"window_tokens[{i}]", f"must be a non-negative integer, got {n!r}")
        out = self.engine.step(es, self._tokens(frame, counts))
        if not isinstance(out, (list, tuple)) or len(out) != len(es):
            raise TargetError("o", f"step must return outputs for each of the {len(es)} entries")
        tokens, tensors = [], {}
        for i, per_layer in enumerate(out):
            if len(per_layer) != s.L:
                raise TargetError(f"o[{i}]", f"must hold {s.L} layers")
            tokens.append(int(np.asarray(per_layer[0]).size // (s.HV * s.V)))
        for l in range(s.L):
            parts = [to_wire(out[i][l], s.act, (tokens[i], s.HV, s.V), f"o.{l}") for i in range(len(es))]
            wire = np.concatenate(parts) if parts else to_wire(np.zeros((0, s.HV, s.V), np.float32), s.act,
                                                                (0, s.HV, s.V), f"o.{l}")
            tensors[f"o.{l}"] = (wire, s.act)
        return {"tokens": tokens}, tensors

    def requests(self, frame):
        rs = []
        for req, r in sorted(self.engine.requests().items()):
            if r.get("status") not in STATUSES:
                raise TargetError("requests", f"request {req}: status {r.get('status')!r} is not one of {STATUSES}")
            rs.append({"req": int(req), "status": r["status"], "committed": int(r["committed"]),
                       "to_prefill": int(r["to_prefill"]), "generated": int(r["generated"])})
        return {"requests": rs}, None

    def committed_state(self, frame):
        s = self.session
        state = self.engine.committed_state(integer(frame.msg, "req", "req", 0), integer(frame.msg, "layer", "layer", 0))
        return {}, {"state": (to_wire(state, s.state, s.state_shape, "state"), s.state)}

    def slot_map(self, frame):
        return {"slot_map": [{"req": int(r), "slots": [int(x) for x in v]}
                             for r, v in sorted(self.engine.slot_map().items())]}, None

    def pool(self, frame):
        s = self.session
        values = self.engine.pool(integer(frame.msg, "layer", "layer", 0))
        return {}, {"values": (to_wire(values, s.state, (s.S, s.stride), "values"), s.state)}

    def shutdown(self, frame):
        return {}, None

    COMMANDS = ("hello", "setup", "admit", "prefix_hit", "fork", "step", "finish", "preempt", "resume", "requests",
                "committed_state", "slot_map", "pool", "shutdown", "snapshot_hit", "snapshot", "migrate")

    def answer(self, frame):
        op = frame.msg.get("op")
        if op not in self.COMMANDS:
            return _error("op", f"unknown command {op!r}"), None, None
        if op != "hello" and not self.greeted:
            return _error("op", f"'{op}' before a successful 'hello'"), None, None
        if op not in ("hello", "setup", "shutdown") and self.session is None:
            return _error("op", f"'{op}' before a successful 'setup'"), None, None
        try:
            start = time.perf_counter()
            fields, tensors = getattr(self, op)(frame)
            return {"ok": True, **fields, "compute_s": time.perf_counter() - start}, tensors, \
                0 if op == "shutdown" else None
        except (TargetError, ConversionError, ProtocolError) as e:
            return _error(e.field, e.message), None, (1 if op == "hello" else None)
        except NotImplementedError as e:
            return _error("", f"'{op}' is not implemented by the engine ({e})"), None, None
        except Exception as e:  # the engine's own bug: a verdict, and the traceback for its author
            traceback.print_exc(file=sys.stderr)
            return _error("", f"{type(e).__name__}: {e}"), None, None

    def run(self, stdin) -> int:
        return run_frames(self.answer, self.out, stdin, "replayssm_kit.serve_engine")


def serve_engine(engine: EngineTarget, stdin=None, stdout=None) -> int:
    """Answers engine-protocol commands on stdin/stdout until shutdown or end of input; returns the exit status."""
    stdin = stdin if stdin is not None else sys.stdin.buffer
    with _frames_only(stdout) as out:
        return _Loop(engine, out).run(stdin)
