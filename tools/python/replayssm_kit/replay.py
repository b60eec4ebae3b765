"""Judging a kit Target with a trace fixture alone: no replayssm build, no judge process, no oracle.

    from replayssm_kit.replay import replay_trace
    result = replay_trace("fixtures/traces/tiny-gdn/tiny-gdn__trace__0.safetensors", MyKernel())
    assert result.ok, result.summary()

replay_trace makes exactly the recorded calls through the same request loop serve() runs (server.InProcess:
the same field checks, BF16 inputs as float32, answers converted to the protocol's dtypes) and, after each,
checks what the judge checks (docs/lifecycle.md):

  outputs   per real row window, compared at the judged tolerance (scale = max|ref| of the window); PAD rows
            only when the target claims pad_outputs_zero, then as exact +0 (the trace's PAD rule);
  states    the committed state of every recorded (layer, slot) (scale = max|ref| of the state);
  pools     through `pool` digests: every gap, and every slot outside the command's write set, bitwise
            unchanged; a commit's n = 0 slots unchanged since before the step (not for design "spec_ring",
            whose flush may rewrite the checkpoint with an equal state).

Judged tolerance: `tier` when given, else the target's claim: exact for bit_exact, else its claimed tier
(capabilities "tier", default fp32; replayssm_kit.tiers). A trace whose configuration or commands the target's
capabilities exclude is reported as not covered, never as passed.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np

from .compare import Report, Tolerance, compare
from .protocol import PROTOCOL_NAME, VERSION, hex64, parse_hex64
from .rows import Row, step_mix_excess
from .safetensors_io import bf16_bits_to_f32
from .server import InProcess
from .interface import Target
from .tiers import TIERS, tier_tolerance
from .trace import Trace, load_trace

PASS, FAIL, NOT_RUN = "PASS", "FAIL", "NOT RUN"


@dataclass
class CommandResult:
    """The verdict of one command. check: "error", "outputs", "pad", "state", "gap", "unchanged" or "kept";
    layer, slot, row: where; coords: the worst element (state: (hv, k, v) or (hv, v, k) in the layout; output:
    (token, hv, v)); expected, got: its values; report: the failing comparison."""

    index: int
    op: str
    description: str
    lifecycle: int = -1
    lifecycle_text: str = ""
    verdict: str = PASS
    check: str = ""
    layer: int = -1
    slot: int = -1
    row: int = -1
    coords: tuple = ()
    expected: float | None = None
    got: float | None = None
    tolerance: Tolerance | None = None
    report: Report | None = None
    message: str = ""

    @property
    def ok(self) -> bool:
        return self.verdict != FAIL

    def __str__(self) -> str:
        head = f"{self.verdict:7} command {self.index} ({self.description})"
        if self.lifecycle >= 0:
            head += f" [lifecycle {self.lifecycle}: {self.lifecycle_text}]"
        return head + (f"\n        {self.message}" if self.message else "")


@dataclass
class TraceResult:
    path: str
    judged: str = ""              # "exact" or the tier name
    claims: dict = field(default_factory=dict)
    covered: bool = True
    not_covered: str = ""
    commands: list = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.covered and all(c.ok for c in self.commands)

    @property
    def first_failure(self):
        return next((c for c in self.commands if c.verdict == FAIL), None)

    def summary(self) -> str:
        if not self.covered:
            return f"NOT COVERED {self.path}: {self.not_covered}"
        lines = [f"{'ok  ' if self.ok else 'FAIL'} {self.path} (judged: {self.judged}; "
                 f"{sum(c.verdict == PASS for c in self.commands)} of {len(self.commands)} commands passed)"]
        lines += [str(c) for c in self.commands if c.verdict == FAIL]
        return "\n".join(lines)

    __str__ = summary


class _Fail(Exception):
    """A failed check inside one command (carries the fields of its CommandResult)."""

    def __init__(self, **kw):
        super().__init__(kw.get("message", ""))
        self.kw = kw


def _values(wire: np.ndarray, dtype: str) -> np.ndarray:
    """An answer tensor (stored form) as float32 values."""
    return bf16_bits_to_f32(wire) if dtype == "BF16" else np.asarray(wire, dtype=np.float32)


def _uncovered(caps: dict, t: Trace) -> str:
    m = t.model
    checks = [("ops", m["op"]), ("act_dtypes", m["act_dtype"]), ("state_dtypes", m["state_dtype"]),
              ("layouts", m["layout"]), ("l2norms", m["l2norm"])]
    if m["op"] == "kda":
        checks.append(("kda_gates", m["kda_gate"]))
    for key, value in checks:
        if key in caps and value not in caps[key]:
            return f"{key}: {value} not supported"
    if m.get("round_beta_to_act") and caps.get("round_beta_to_act", True) is False:
        return "round_beta_to_act not supported"
    for key, value in (("gva_ratios", t.HV // t.H), ("K", t.K), ("V", t.V)):
        if caps.get(key) and value not in caps[key]:
            return f"{key}: {value} not supported"
    if t.max_T > caps.get("max_T", 64):
        return f"max_T {t.max_T} above the target's {caps.get('max_T')}"
    if t.L > caps.get("max_layers", 1 << 20):
        return f"{t.L} layers above the target's max_layers"
    if any(c.op == "copy_slot" for c in t.commands) and not caps.get("copy_slot", True):
        return "copy_slot (the trace copies slots; the target does not implement copy_slot)"
    if not caps.get("out_of_place_commit", False) and any(
            r["kind"] == "verify" and r["slot"] >= 0 and r["write_slot"] >= 0 and r["write_slot"] != r["slot"]
            for c in t.commands if c.op in ("step", "commit") for r in c.msg["rows"]):
        return "out_of_place_commit (the trace commits into another slot; the target does not claim it)"
    if not caps.get("graph_padding", False) and any(
            r.get("graph_tail") for c in t.commands if c.op in ("step", "commit") for r in c.msg["rows"]):
        return "graph_padding (the trace has captured steps with a graph tail; the target does not claim it)"
    if not caps.get("capture", False) and any(c.op == "capture" for c in t.commands):
        return "capture (the trace captures CUDA-graph buckets while requests are live; the target does not claim it)"
    if t.pad_convention not in caps.get("pad_conventions", ["minus_one"]):
        return f"pad_conventions (the trace runs under {t.pad_convention}; the target does not claim it)"
    mix = caps.get("step_mix") or {}
    for i, c in enumerate(t.commands if mix else []):
        if c.op != "step":
            continue
        rows = [Row(slot=r["slot"], write_slot=r["write_slot"], T=r["T"], token_offset=r["token_offset"],
                    accepted=r["accepted"], kind=r["kind"], fresh=r["fresh"], graph_tail=bool(r.get("graph_tail")),
                    pad_sentinel=t.pad_sentinel) for r in c.msg["rows"]]
        if why := step_mix_excess(rows, mix):
            return f"step_mix (command {i} steps a batch that mixes more than the target's step_mix {mix} allows: {why})"
    return ""


class _Replay:
    def __init__(self, t: Trace, target: Target, tier: str | None):
        self.t, self.loop = t, InProcess(target)
        self.tier = tier
        self.digests, self.values = [], []  # per layer: the pool as last answered (2 digests per slot; values)

    def call(self, msg, tensors=None, dtypes=None):
        answer, wire = self.loop.call(msg, tensors, dtypes)
        if not answer.get("ok"):
            err = answer.get("error", {})
            raise _Fail(check="error", message=f"the target refused {msg['op']!r}: {err.get('field') or '(no field)'}: "
                                               f"{err.get('message')}")
        return answer, wire or {}

    def tolerance(self, ref: np.ndarray, state: bool) -> Tolerance:
        if self.tier == "exact":
            return Tolerance("exact")
        finite = ref[np.isfinite(ref)]
        scale = float(np.abs(finite).max()) if finite.size else 0.0
        return tier_tolerance(self.tier, self.t.model, scale, state)

    def fetch_pools(self):
        """Asks every layer's pool with the digests held; returns the previous digests and values."""
        before = ([list(d) for d in self.digests], [v.copy() for v in self.values])
        for l in range(self.t.L):
            answer, wire = self.call({"op": "pool", "layer": l, "known": [hex64(d) for d in self.digests[l]]})
            for i, s in enumerate(answer["slots"]):
                self.values[l][s] = _values(wire["values"][0][i], self.t.state)
            self.digests[l] = [parse_hex64(d, "digests") for d in answer["digests"]]
        return before

    def start(self):
        t = self.t
        tensors, dtypes = {}, {}
        for l, (A, dt) in enumerate(t.params):
            tensors[f"A_log.{l}"], tensors[f"dt_bias.{l}"] = A, dt
            dtypes[f"A_log.{l}"] = dtypes[f"dt_bias.{l}"] = "F32"
        self.call({"op": "setup", "setup": t.setup, "poison_bits": t.poison_bits}, tensors, dtypes)
        self.digests = [[0] * (2 * t.S) for _ in range(t.L)]
        self.values = [np.zeros((t.S, t.stride), dtype=np.float32) for _ in range(t.L)]
        self.fetch_pools()

    def run(self, c, before_step):
        t = self.t
        tensors, dtypes = {}, {}
        for l, x in enumerate(c.inputs):
            for name, arr in x.items():
                tensors[f"{name}.{l}"], dtypes[f"{name}.{l}"] = arr, t.act
        _, wire = self.call(c.msg, tensors, dtypes)
        if c.op == "step":
            self.check_outputs(c, wire)
        for layer, slot, want in c.states:
            _, w = self.call({"op": "committed_state", "layer": layer, "slot": slot})
            got = _values(w["state"][0], t.state)
            tol = self.tolerance(want, True)
            rep = compare(want, got, tol)
            if not rep.ok:
                axes = "(hv, k, v)" if t.model["layout"] == "kv" else "(hv, v, k)"
                raise _Fail(check="state", layer=layer, slot=slot, coords=rep.worst_coords, expected=rep.worst_ref,
                            got=rep.worst_got, tolerance=tol, report=rep,
                            message=f"layer {layer}, slot {slot}: committed state differs: {rep}; worst element "
                                    f"{axes} = {rep.worst_coords}: expected {rep.worst_ref!r}, got {rep.worst_got!r}")
        before = self.fetch_pools()
        self.check_pools(c, before, before_step)

    def check_outputs(self, c, wire):
        t = self.t
        for l in range(t.L):
            got = _values(wire[f"o.{l}"][0], t.act)
            for i, r in enumerate(c.msg["rows"]):
                w = slice(r["token_offset"], r["token_offset"] + r["T"])
                want = c.outputs[l][w]
                pad = t.is_pad(r)  # the convention's sentinel or a graph tail row
                if pad and not self.claims.get("pad_outputs_zero", False):
                    continue  # don't-care unless claimed
                tol = Tolerance("exact") if pad else self.tolerance(want, False)
                rep = compare(want, got[w], tol)
                if rep.ok:
                    continue
                token, hv, v = rep.worst_coords
                what = (("(graph tail)" if r.get("graph_tail") else "(PAD)") + ": outputs are not the zeros the target claims (pad_outputs_zero)" if pad else
                        f"(slot {r['slot']}, request {c.notes[i]['request']}): outputs differ")
                at = (r["token_offset"] + token, hv, v)
                raise _Fail(check="pad" if pad else "outputs", layer=l, row=i, slot=r["slot"], coords=at,
                            expected=rep.worst_ref, got=rep.worst_got, tolerance=tol, report=rep,
                            message=f"layer {l}, row {i} {what}: {rep}; worst element (token, hv, v) = {at}: "
                                    f"expected {rep.worst_ref!r}, got {rep.worst_got!r}")

    def check_pools(self, c, before, before_step):
        t = self.t
        spec_ring = self.claims.get("design") == "spec_ring"
        for l in range(t.L):
            now = self.digests[l]
            for s in range(t.S):
                if now[2 * s + 1] != before[0][l][2 * s + 1]:
                    self.changed("gap", l, s, before[1][l], "the gap after the slot was written", t.E, t.stride)
            for s in c.unchanged:
                if now[2 * s] != before[0][l][2 * s]:
                    self.changed("unchanged", l, s, before[1][l], "changed although the command must not touch it")
            if spec_ring or before_step is None:
                continue
            for s in c.kept:
                if now[2 * s] != before_step[0][l][2 * s]:
                    self.changed("kept", l, s, before_step[1][l],
                                 "changed although its commit had n = 0 or wrote another slot")

    def changed(self, check, l, s, was, why, begin=0, end=None):
        """Raises the failure of slot s of layer l, naming its first element in [begin, end) (default: the state
        part) that differs from `was`."""
        end = self.t.E if end is None else end
        old, new = was[s][begin:end].view(np.uint32), self.values[l][s][begin:end].view(np.uint32)
        diff = np.flatnonzero(old != new)
        i = begin + (int(diff[0]) if diff.size else 0)
        a, b = float(was[s][i]), float(self.values[l][s][i])
        where = f"gap element {i - self.t.E}" if i >= self.t.E else f"state element {i}"
        raise _Fail(check=check, layer=l, slot=s, coords=(i,), expected=a, got=b,
                    message=f"layer {l}, slot {s}: {why}; first changed {where} (slot element {i}): was {a!r}, "
                            f"now {b!r}")


def replay_trace(trace, target: Target, tier: str | None = None, keep_going: bool = False) -> TraceResult:
    """Replays a trace (a path or a loaded Trace) through `target` and judges every command. tier: "fp32",
    "tf32", "bf16" or "exact" to judge at, else the target's claim. After the first failing command the rest
    are NOT RUN unless keep_going. Never raises for a failing target; a file that is not a valid trace raises
    TraceError (load_trace)."""
    t = trace if isinstance(trace, Trace) else load_trace(os.fspath(trace))
    result = TraceResult(t.path)
    r = _Replay(t, target, tier)
    answer, _ = r.loop.call({"op": "hello", "protocol": PROTOCOL_NAME, "version": list(VERSION)})
    if not answer.get("ok"):
        result.commands.append(CommandResult(-1, "hello", "hello", verdict=FAIL, check="error",
                                             message=f"the target refused hello: {answer.get('error')}"))
        return result
    r.claims = result.claims = answer["capabilities"]
    if tier is None:
        tier = "exact" if r.claims.get("bit_exact") else r.claims.get("tier", "fp32")
    if tier != "exact" and tier not in TIERS:
        raise ValueError(f"unknown tier {tier!r} (exact, {', '.join(TIERS)})")
    r.tier = result.judged = tier
    result.not_covered = _uncovered(r.claims, t)
    if result.not_covered:
        result.covered = False
        return result
    try:
        r.start()
    except _Fail as e:
        result.commands.append(CommandResult(-1, "setup", "setup", verdict=FAIL, check="error",
                                             message=e.kw.get("message", "")))
        return result
    before_step, failed = None, False
    for c in t.commands:
        res = CommandResult(c.index, c.op, c.describe(), c.lifecycle, t.lifecycle_text(c.lifecycle))
        result.commands.append(res)
        if failed and not keep_going:
            res.verdict = NOT_RUN
            continue
        if c.op == "step":
            before_step = ([list(d) for d in r.digests], [v.copy() for v in r.values])
        try:
            r.run(c, before_step if c.op == "commit" else None)
        except _Fail as e:
            for k, v in e.kw.items():
                setattr(res, k, v)
            res.verdict, failed = FAIL, True
            res.message = f"command {c.index} ({res.description}): {res.message}"
    return result
