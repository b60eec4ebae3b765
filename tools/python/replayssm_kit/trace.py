"""Trace fixtures (op "lifecycle.trace", docs/fixture-format.md section 9): reading and validating them.

A trace is a fixture file holding a command sequence as a target sees it (setup, allocate, step, commit,
copy_slot) and, after every command, what the judge checks: the step's outputs, the committed state of every
resident slot, the slots that must stay bitwise unchanged. replayssm_kit.replay.replay_trace drives a Target
through it; this module only reads.

    trace = load_trace("fixtures/traces/tiny-gdn/tiny-gdn__trace__0.safetensors")
    for c in trace.commands: print(c.index, c.describe())

Versions 1.0 and 1.1 are read. 1.1 adds captured steps (a step's and commit's `live_rows`; rows from it on carry
`graph_tail` and are PAD rows whatever their slot says) and the null_block / pad_slot PAD conventions
(__metadata__.pad_convention, equal to the setup's); Trace.pad_sentinel is the slot PAD rows carry and
Trace.is_pad(row) says whether a row is a PAD row. 1.2 adds `capture` commands (msg {"op": "capture", "rows": R,
"T": W}: a CUDA-graph bucket captured while requests are live, protocol 1.4); it writes nothing, so its
`unchanged` lists every slot (under pad_slot all but the pad slot). Only a trace holding a capture says 1.2.

load_trace refuses (TraceError naming the field) a file that is not a valid fixture, another op, an unknown
major or minor __metadata__.trace_version (a 1.0 file with 1.1 content, a capture in a file before 1.2 too), tier vocabulary or PAD rule, a
live_rows that does not match the graph_tail rows, a stale tail slot missing from `unchanged`, a capture whose rows
or T is out of range or whose `unchanged` misses a slot, a missing or misshapen tensor, an expectation
that is not finite, a tolerance other than exact, an out.* tensor no command refers to, PAD outputs that are
not zeros.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

import numpy as np

from .fixture import Fixture, FixtureError, load_fixture
from .tiers import TIER_VOCABULARY

TRACE_OP = "lifecycle.trace"
TRACE_MAJOR, TRACE_MINOR = 1, 2
PAD_CONVENTIONS = {"minus_one": lambda S: -1, "null_block": lambda S: 0, "pad_slot": lambda S: S - 1}
PAD_RULES = ("zeros_if_claimed",)
OPS = ("allocate", "step", "commit", "copy_slot", "capture")
ROW_KEYS = ("slot", "write_slot", "T", "token_offset", "accepted", "kind", "fresh")  # the protocol's row


class TraceError(FixtureError):
    """A file that is not a valid trace; `field` names what is wrong."""

    def __init__(self, path: str, field: str, message: str):
        super().__init__(f"{path}: {field}: {message}")
        self.path = path
        self.field = field
        self.message = message


@dataclass
class Command:
    """One command of a trace and what must hold after it.

    msg       the protocol command message ({"op": "step", "rows": [...], "total_tokens": N}, ...), rows without
              the trace's annotations;
    notes     per row of a step or commit: {"request": id (-1 for PAD), "stop_at": s (verify rows)};
    inputs    step: per layer {"q", "k", "v", "a", "b"} float32 arrays (act values);
    outputs   step: float32 [L, N, HV, V] (act values);
    states    [(layer, slot, float32 values of the state shape)] after the command;
    unchanged slots whose state part the command leaves bitwise unchanged (every gap stays unchanged too);
    kept      commit: slots whose n = 0 leaves them unchanged since before the step;
    lifecycle the lifecycle command (Trace.lifecycle) it belongs to, or -1.
    """

    index: int
    op: str
    msg: dict
    lifecycle: int = -1
    notes: list = field(default_factory=list)
    inputs: list = field(default_factory=list)
    outputs: np.ndarray | None = None
    states: list = field(default_factory=list)
    unchanged: list = field(default_factory=list)
    kept: list = field(default_factory=list)

    def describe(self) -> str:
        m = self.msg
        if self.op == "allocate":
            return f"allocate slot {m['slot']}"
        if self.op == "copy_slot":
            return f"copy_slot {m['src']} -> {m['dst']}"
        if self.op == "capture":
            return f"capture rows={m['rows']} T={m['T']}"
        parts = []
        for r in m["rows"]:
            if r.get("graph_tail"):
                parts.append(f"TAIL slot {r['slot']} T={r['T']}")
                continue
            if r["slot"] == -1:
                parts.append(f"PAD T={r['T']}")
                continue
            kind = ("prefill(fresh)" if r["fresh"] else "prefill") if r["kind"] == "prefill" else "verify"
            n = f" n={r['accepted']}" if self.op == "commit" and r["kind"] == "verify" else ""
            parts.append(f"{kind} slot {r['slot']} T={r['T']}{n}")
        return f"{self.op} [{', '.join(parts)}]"


def describe_lifecycle(c: dict) -> str:
    """One line for a lifecycle command (the fuzz dump's JSON form): "step [req0 T=4 n=2 stop@1] pads=1"."""
    kind = c.get("kind", "?")
    if kind == "step":
        rows = ", ".join(f"req{r['req']} T={r['T']} n={r['accepted']}" + (f" stop@{r['stop_at']}" if r.get("stop_at") else "")
                         for r in c.get("rows", []))
        pads = f" pads={len(c['pad_at'])}" if c.get("pad_at") else ""
        return f"step [{rows}]{pads}"
    if kind == "capture":  # protocol 1.4: no target call of its own in a trace
        return f"capture rows={c.get('graph')} T={c.get('T')}"
    text = f"{kind} req{c.get('req')}"
    if kind == "copy":
        text += f" -> req{c.get('req2')}"
    if kind in ("admit", "continue", "copy", "resume"):
        text += f" slot={c.get('slot')}"
    if kind in ("admit", "continue"):
        text += f" prompt={c.get('prompt')}"
    return text


class Trace:
    """A loaded trace. setup: the protocol's setup object; poison_bits: hex of the poison value; model: the
    model config; L, S, E, stride, state_shape; params: [(A_log [HV], dt_bias [HV, a_width])] per layer;
    commands: [Command]; lifecycle: the lifecycle commands (JSON form); version, seed, source."""

    def __init__(self, fx: Fixture):
        self.fixture = fx
        self.path = fx.path
        self.name = fx.name
        self.seed = fx.seed
        self.lifecycle = []
        self.commands = []

    def __repr__(self):
        return f"Trace({self.path!r}, {len(self.commands)} commands)"

    def is_pad(self, row: dict) -> bool:
        """A PAD row: the convention's sentinel slot, or any graph tail row."""
        return bool(row.get("graph_tail")) or row["slot"] == self.pad_sentinel

    def lifecycle_text(self, i: int) -> str:
        return describe_lifecycle(self.lifecycle[i]) if 0 <= i < len(self.lifecycle) else ""


def _meta(fx: Fixture, key: str) -> str:
    if key not in fx.metadata:
        raise TraceError(fx.path, f"__metadata__.{key}", "is missing (a trace records it)")
    return fx.metadata[key]


def _json(fx: Fixture, key: str):
    try:
        return json.loads(_meta(fx, key))
    except json.JSONDecodeError as e:
        raise TraceError(fx.path, f"__metadata__.{key}", f"is not JSON text: {e}") from None


def _check_version(path: str, v: str) -> int:
    """Returns the minor of a version this reader knows (1.0 to 1.2); a minor may change what rows mean (1.1 made
    graph tail rows PAD rows) or add a command (1.2: capture), so an unknown one is refused like an unknown major."""
    parts = v.split(".")
    if len(parts) != 2 or not all(p.isdigit() for p in parts):
        raise TraceError(path, "__metadata__.trace_version", f"{v!r} is not MAJOR.MINOR")
    if int(parts[0]) != TRACE_MAJOR or int(parts[1]) > TRACE_MINOR:
        raise TraceError(path, "__metadata__.trace_version",
                         f"version {v} is not supported (this reader knows {TRACE_MAJOR}.0 to {TRACE_MAJOR}.{TRACE_MINOR})")
    return int(parts[1])


def _tensor(fx: Fixture, name: str, dtype: str, shape: tuple) -> np.ndarray:
    if name not in fx.tensors:
        raise TraceError(fx.path, f"tensor '{name}'", "is missing")
    if fx.dtypes[name] != dtype:
        raise TraceError(fx.path, f"tensor '{name}'", f"has dtype {fx.dtypes[name]}, expected {dtype}")
    arr = fx.tensors[name]
    if tuple(arr.shape) != tuple(shape):
        raise TraceError(fx.path, f"tensor '{name}'", f"has shape {list(arr.shape)}, expected {list(shape)}")
    return np.ascontiguousarray(arr, dtype=np.float32)


def _int(obj, key: str, path: str, f: str, lo: int | None = None, hi: int | None = None) -> int:
    if not isinstance(obj, dict) or type(obj.get(key)) is not int:
        raise TraceError(path, f"{f}.{key}", "must be an integer")
    x = obj[key]
    if (lo is not None and x < lo) or (hi is not None and x >= hi):
        raise TraceError(path, f"{f}.{key}", f"is {x}, outside [{lo}, {hi})")
    return x


def _slots(obj, key: str, path: str, f: str, S: int) -> list:
    v = obj.get(key) if isinstance(obj, dict) else None
    if not isinstance(v, list) or not all(type(x) is int and 0 <= x < S for x in v):
        raise TraceError(path, f"{f}.{key}", f"must be an array of slots in [0, {S})")
    return list(v)


def _rows(c: dict, path: str, f: str, t: Trace, n_tokens: int | None) -> tuple:
    rows = c.get("rows")
    if not isinstance(rows, list):
        raise TraceError(path, f"{f}.rows", "must be an array of rows")
    plain, notes = [], []
    tail_seen = False
    for i, r in enumerate(rows):
        rf = f"{f}.rows[{i}]"
        if not isinstance(r, dict):
            raise TraceError(path, rf, "must be an object")
        slot = _int(r, "slot", path, rf, -1, t.S)
        _int(r, "write_slot", path, rf, -1, t.S)
        T = _int(r, "T", path, rf, 0, t.max_T + 1)
        off = _int(r, "token_offset", path, rf, 0)
        _int(r, "accepted", path, rf, 0, T + 1)
        if r.get("kind") not in ("verify", "prefill") or type(r.get("fresh")) is not bool:
            raise TraceError(path, rf, "needs kind (verify or prefill) and fresh (true or false)")
        if n_tokens is not None and off + T > n_tokens:
            raise TraceError(path, f"{rf}.token_offset", f"window [{off}, {off + T}) runs past {n_tokens} tokens")
        notes.append({"request": _int(r, "request", path, rf), "stop_at": r.get("stop_at", 0)})
        plain.append({k: r[k] for k in ROW_KEYS})
        tail = r.get("graph_tail", False)
        if type(tail) is not bool:
            raise TraceError(path, f"{rf}.graph_tail", "must be true or false")
        if tail:
            if t.minor < 1:
                raise TraceError(path, f"{rf}.graph_tail",
                                 "needs __metadata__.trace_version 1.1 (this file says 1.0, whose readers take every row as live)")
            plain[-1]["graph_tail"] = True
        elif tail_seen:
            raise TraceError(path, f"{rf}.graph_tail", "a live row follows a graph tail row")
        tail_seen = tail_seen or tail
        if t.is_pad(r) and r.get("request") != -1:
            raise TraceError(path, f"{rf}.request", "a PAD row belongs to no request (-1)")
    live = sum(not r.get("graph_tail", False) for r in plain)
    if "live_rows" in c or live != len(plain):
        if t.minor < 1:
            raise TraceError(path, f"{f}.live_rows", "needs __metadata__.trace_version 1.1 (this file says 1.0)")
        if c.get("live_rows") != live:
            raise TraceError(path, f"{f}.live_rows", f"is {c.get('live_rows')!r}, but {live} rows are not graph_tail rows")
    return plain, notes


def load_trace(path: str) -> Trace:
    """Reads and validates a trace file (see the module docstring for what is refused)."""
    try:
        fx = load_fixture(path)
    except TraceError:
        raise
    except (FixtureError, ValueError, OSError) as e:
        raise TraceError(path, "file", f"is not a valid fixture: {e}") from None
    if fx.op != TRACE_OP:
        raise TraceError(path, "__metadata__.op", f"is {fx.op!r}, expected {TRACE_OP!r}")
    minor = _check_version(path, _meta(fx, "trace_version"))
    if _meta(fx, "tier_vocabulary") != TIER_VOCABULARY:
        raise TraceError(path, "__metadata__.tier_vocabulary",
                         f"version {fx.metadata['tier_vocabulary']!r} is not supported (this kit knows {TIER_VOCABULARY})")
    if _meta(fx, "pad_rule") not in PAD_RULES:
        raise TraceError(path, "__metadata__.pad_rule", f"{fx.metadata['pad_rule']!r} is not a PAD rule this kit knows")
    for name, tol in fx.tolerance.items():
        if tol.kind != "exact":
            raise TraceError(path, f"__metadata__.tolerance['{name}']", f"is {tol}, a trace stores exact expectations")
    t = Trace(fx)
    t.version, t.minor = fx.metadata["trace_version"], minor
    t.source = fx.metadata.get("source", "")
    cfg = fx.config if isinstance(fx.config, dict) else {}
    setup, t.poison_bits = cfg.get("setup"), cfg.get("poison_bits")
    if not isinstance(setup, dict) or not isinstance(setup.get("config"), dict):
        raise TraceError(path, "__metadata__.config.setup", "must be the protocol's setup object")
    if not isinstance(t.poison_bits, str):
        raise TraceError(path, "__metadata__.config.poison_bits", "must be a hexadecimal string")
    t.setup, m = setup, setup["config"]
    t.model = m
    try:
        t.L, t.H, t.HV, t.K, t.V = (int(m[k]) for k in ("num_layers", "H", "HV", "K", "V"))
        t.S, t.max_T = int(setup["num_slots"]), int(setup["max_T"])
        t.act, t.state = m["act_dtype"], m["state_dtype"]
        t.E = t.HV * t.K * t.V
        t.stride = int(setup["slot_stride"]) or t.E
        t.a_width = 1 if m["op"] == "gdn" else t.K
        t.state_shape = (t.HV, t.K, t.V) if m["layout"] == "kv" else (t.HV, t.V, t.K)
    except (KeyError, TypeError, ValueError) as e:
        raise TraceError(path, "__metadata__.config.setup", f"is incomplete: {e!r}") from None
    t.pad_convention = setup.get("pad_convention", "minus_one")
    if t.pad_convention not in PAD_CONVENTIONS:
        raise TraceError(path, "__metadata__.config.setup.pad_convention",
                         f"{t.pad_convention!r} is not one of {', '.join(PAD_CONVENTIONS)}")
    if minor >= 1 and fx.metadata.get("pad_convention") != t.pad_convention:
        raise TraceError(path, "__metadata__.pad_convention",
                         f"is {fx.metadata.get('pad_convention')!r}, the setup's is {t.pad_convention!r}")
    if minor < 1 and t.pad_convention != "minus_one":
        raise TraceError(path, "__metadata__.config.setup.pad_convention",
                         f"is {t.pad_convention!r}, which needs __metadata__.trace_version 1.1 (this file says 1.0)")
    t.pad_sentinel = PAD_CONVENTIONS[t.pad_convention](t.S)
    A = _tensor(fx, "param.A_log", "F32", (t.L, t.HV))
    dt = _tensor(fx, "param.dt_bias", "F32", (t.L, t.HV, t.a_width))
    t.params = [(A[l], dt[l]) for l in range(t.L)]
    t.lifecycle = _json(fx, "lifecycle")
    if not isinstance(t.lifecycle, list):
        raise TraceError(path, "__metadata__.lifecycle", "must be an array")
    cmds = _json(fx, "commands")
    if not isinstance(cmds, list):
        raise TraceError(path, "__metadata__.commands", "must be an array")
    used = set()
    for i, c in enumerate(cmds):
        t.commands.append(_command(fx, t, i, c, used))
    for name in sorted(n for n in fx.tensors if n.startswith("out.")):
        if name not in used:
            raise TraceError(path, f"tensor '{name}'", "no command refers to it (an expectation nobody checks)")
    return t


def _command(fx: Fixture, t: Trace, i: int, c, used: set) -> Command:
    path, f = fx.path, f"__metadata__.commands[{i}]"
    if not isinstance(c, dict) or c.get("op") not in OPS:
        raise TraceError(path, f"{f}.op", f"must be one of {', '.join(OPS)}")
    op = c["op"]
    cmd = Command(i, op, {"op": op}, lifecycle=_int(c, "lifecycle", path, f, -1, len(t.lifecycle)))
    if op == "allocate":
        cmd.msg["slot"] = _int(c, "slot", path, f, 0, t.S)
    elif op == "copy_slot":
        cmd.msg["src"], cmd.msg["dst"] = _int(c, "src", path, f, 0, t.S), _int(c, "dst", path, f, 0, t.S)
    elif op == "capture":
        if t.minor < 2:
            raise TraceError(path, f"{f}.op", f"capture needs __metadata__.trace_version 1.2 (this file says {t.version}, "
                                              "whose readers know no capture command)")
        cmd.msg["rows"] = _int(c, "rows", path, f, 1, t.S + 8 + 1)  # a step's capacity: num_slots + 8 rows
        cmd.msg["T"] = _int(c, "T", path, f, 1, t.max_T + 1)
    elif op == "commit":
        cmd.msg["rows"], cmd.notes = _rows(c, path, f, t, None)
    else:
        n = _int(c, "total_tokens", path, f, 0)
        cmd.msg["rows"], cmd.notes = _rows(c, path, f, t, n)
        cmd.msg["total_tokens"] = n
        shapes = {"q": (t.H, t.K), "k": (t.H, t.K), "v": (t.HV, t.V), "a": (t.HV, t.a_width), "b": (t.HV,)}
        stacked = {x: _tensor(fx, f"in.{i}.{x}", t.act, (t.L, n) + s) for x, s in shapes.items()}
        cmd.inputs = [{x: stacked[x][l] for x in shapes} for l in range(t.L)]
        o_name = f"out.{i}.o"
        cmd.outputs = _tensor(fx, o_name, t.act, (t.L, n, t.HV, t.V))
        used.add(o_name)
        if not np.isfinite(cmd.outputs).all():
            raise TraceError(path, f"tensor '{o_name}'", "holds a value that is not finite")
        for r_i, r in enumerate(cmd.msg["rows"]):
            window = cmd.outputs[:, r["token_offset"]:r["token_offset"] + r["T"]]
            if t.is_pad(r) and window.view(np.uint32).any():
                raise TraceError(path, f"tensor '{o_name}'",
                                 f"PAD row {r_i} is not +0 (the PAD rule says the oracle wrote zeros)")
    states = c.get("states")
    if not isinstance(states, list):
        raise TraceError(path, f"{f}.states", "must be an array")
    for k, e in enumerate(states):
        ef = f"{f}.states[{k}]"
        if not (isinstance(e, list) and len(e) == 4 and all(type(x) is int for x in e)):
            raise TraceError(path, ef, "must be [layer, slot, command, index]")
        layer, slot, at, idx = e
        if not (0 <= layer < t.L and 0 <= slot < t.S and 0 <= at <= i):
            raise TraceError(path, ef, f"layer {layer}, slot {slot} or command {at} is out of range")
        name = f"out.{at}.states"
        if name not in fx.tensors:
            raise TraceError(path, ef, f"refers to tensor '{name}', which is missing")
        arr = fx.tensors[name]
        if fx.dtypes[name] != t.state or tuple(arr.shape[1:]) != t.state_shape or arr.ndim != 4:
            raise TraceError(path, f"tensor '{name}'", f"must be {t.state} [n, {', '.join(map(str, t.state_shape))}]")
        if not 0 <= idx < arr.shape[0]:
            raise TraceError(path, ef, f"index {idx} outside [0, {arr.shape[0]})")
        values = np.ascontiguousarray(arr[idx], dtype=np.float32)
        if not np.isfinite(values).all():
            raise TraceError(path, f"tensor '{name}'", "holds a value that is not finite")
        used.add(name)
        cmd.states.append((layer, slot, values))
    cmd.unchanged = _slots(c, "unchanged", path, f, t.S)
    if op in ("step", "commit"):
        if any(r.get("graph_tail") for r in cmd.msg["rows"]):  # sent as the protocol (1.2) sends a captured batch
            cmd.msg["live_rows"] = sum(not r.get("graph_tail") for r in cmd.msg["rows"])
        # A tail row writes nothing: its stale slot is expected unchanged unless a live row writes it (or it is
        # the dedicated pad slot, which PAD rows may write).
        written = {s for r in cmd.msg["rows"] if not t.is_pad(r) for s in (r["slot"], r["write_slot"])}
        if t.pad_convention == "pad_slot":
            written.add(t.pad_sentinel)
        for r_i, r in enumerate(cmd.msg["rows"]):
            if r.get("graph_tail") and 0 <= r["slot"] < t.S and r["slot"] not in written and r["slot"] not in cmd.unchanged:
                raise TraceError(path, f"{f}.unchanged",
                                 f"does not list slot {r['slot']} of graph tail row {r_i} (a tail row must leave it untouched)")
    if op == "capture":  # a capture writes nothing: every slot but a dedicated pad slot stays unchanged
        for s in range(t.S):
            if s not in cmd.unchanged and not (t.pad_convention == "pad_slot" and s == t.pad_sentinel):
                raise TraceError(path, f"{f}.unchanged", f"does not list slot {s} (a capture must leave every slot untouched)")
    if op == "commit":
        cmd.kept = _slots(c, "kept", path, f, t.S)
    return cmd


def find_traces(root: str) -> list:
    """Sorted trace files under root (a file or a directory, searched recursively; other fixtures skipped)."""
    from .fixture import find_fixtures

    return find_fixtures(root, {TRACE_OP}) if os.path.exists(root) else []
