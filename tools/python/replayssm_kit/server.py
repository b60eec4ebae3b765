"""The request loop behind replayssm_kit.target.serve() (serve() is defined here): one answer frame per command frame.

Fields named in error answers are paths inside the command ("rows[2].slot", "setup.config.K", "known[3]")
or tensor names ("q.0", "o.1"); the judge reports them as target.<command>.<field>.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
import traceback

import numpy as np

from .convert import ConversionError, to_wire
from .protocol import (PROTOCOL_NAME, VERSION, Frame, ProtocolError, digest64, digest_rows, hex64, parse_hex64,
                       read_frame, write_frame)
from .interface import (CAPTURE_MINOR, CONV_FIXTURE_OPS, CONV_FIXTURE_OPS_MINOR, CONV_METHODS, CONV_STATE_MINOR,
                        GRAPH_REPLAY_MINOR, L2NORM_FORMULA_MINOR, MROPE_FIXTURE_OPS, MROPE_METHODS, MROPE_MINOR,
                        SELF_CHECK_MINOR, SELF_CHECKS, STEP_MIX_MINOR, FIXTURE_OPS, TREE_FIXTURE_MINOR,
                        TREE_FIXTURE_OPS, Target)
from .mrope import MropeCase, parse_claim
from .rows import STEP_MIX_KEYS, TargetError, step_mix_excess
from .session import Session, integer, parse_rows


MROPE_COMMANDS = MROPE_METHODS  # the protocol's MRoPE commands (1.10) are named as the Target methods that take them
COMMANDS = ("hello", "setup", "allocate", "step", "commit", "copy_slot", "committed_state", "pool", "fixture",
            "capture", "conv_step", "conv_commit", "conv_committed_state", "conv_pool") + MROPE_COMMANDS + ("shutdown",)
# Commands that need no `setup` before them: MRoPE is independent of the recurrent state.
NO_SETUP = ("hello", "setup", "fixture", "shutdown") + MROPE_COMMANDS


class _Refused(TargetError):
    """The judge speaks a protocol this kit does not: answered, then the loop ends."""


def _error(field: str, message: str) -> dict:
    return {"ok": False, "error": {"field": field, "message": message}}


class _Loop:
    def __init__(self, target: Target, out):
        self.target = target
        self.out = out
        self.greeted = False
        self.session = None
        self.fixture_ops = set()
        self.captures = False
        self.replays = False  # graph_replay claimed to a judge speaking 1.9 or later
        self.buckets = set()  # (rows, T) captured in this case: the buckets a step may replay
        self.convs = False
        self.step_mix = {}
        self.mrope = None  # the mrope claim (parse_claim) made to a judge speaking 1.10 or later
        self.mrope_case = None  # the MRoPE case of the last successful mrope_setup (mrope.MropeCase)

    # --- commands ------------------------------------------------------------------------------------------
    def hello(self, frame):
        msg = frame.msg
        if msg.get("protocol") != PROTOCOL_NAME:
            raise _Refused("protocol", f"is {msg.get('protocol')!r}, this kit speaks {PROTOCOL_NAME!r}")
        v = msg.get("version")
        if not (isinstance(v, list) and len(v) == 2 and all(type(x) is int for x in v)):
            raise _Refused("version", f"must be [major, minor], got {v!r}")
        if v[0] != VERSION[0]:
            raise _Refused("version", f"protocol major version {v[0]} is not supported (this kit speaks "
                                      f"{VERSION[0]}.{VERSION[1]})")
        caps = dict(self.target.capabilities() or {})
        copies = type(self.target).copy_slot is not Target.copy_slot
        if caps.get("copy_slot", copies) and not copies:
            raise TargetError("capabilities.copy_slot", "is claimed but the target does not override copy_slot")
        caps.setdefault("copy_slot", copies)
        captures = type(self.target).capture is not Target.capture
        if type(caps.get("capture", captures)) is not bool:
            raise TargetError("capabilities.capture", f"must be true or false, got {caps['capture']!r}")
        if caps.get("capture", captures) and not captures:
            raise TargetError("capabilities.capture", "is claimed but the target does not override capture")
        capture_claimed = caps.get("capture", captures)
        # A judge before 1.4 has no capture command: the claim is left out rather than made to it.
        caps["capture"] = caps.get("capture", captures) and v[1] >= CAPTURE_MINOR
        self.captures = caps["capture"]
        replays = caps.get("graph_replay", False)
        if type(replays) is not bool:
            raise TargetError("capabilities.graph_replay", f"must be true or false, got {replays!r}")
        if replays and not capture_claimed:
            raise TargetError("capabilities.graph_replay", "is claimed without capture: a replayed bucket is one the "
                                                           "target captured (override capture)")
        if replays and caps.get("graph_padding") is not True:
            raise TargetError("capabilities.graph_replay", "is claimed without graph_padding: a replayed bucket is a "
                                                           "captured batch with a graph tail")
        # A judge before 1.9 sends no replay and knows no graph_replay: the claim is left out.
        self.replays = replays and v[1] >= GRAPH_REPLAY_MINOR
        if v[1] < GRAPH_REPLAY_MINOR:
            caps.pop("graph_replay", None)
        overridden = [m for m in CONV_METHODS if getattr(type(self.target), m) is not getattr(Target, m)]
        convs = caps.get("conv_state", len(overridden) == len(CONV_METHODS))
        if type(convs) is not bool:
            raise TargetError("capabilities.conv_state", f"must be true or false, got {convs!r}")
        if convs and len(overridden) != len(CONV_METHODS):
            missing = [m for m in CONV_METHODS if m not in overridden]
            raise TargetError("capabilities.conv_state", f"is claimed but the target does not override {missing}")
        # A judge before 1.5 has no conv commands: the claim is left out rather than made to it.
        caps["conv_state"] = self.convs = convs and v[1] >= CONV_STATE_MINOR
        self._hello_mrope(caps, v)
        runs_fixtures = type(self.target).fixture is not Target.fixture
        claimed = caps.get("fixture_ops", list(FIXTURE_OPS) if runs_fixtures else [])
        known = FIXTURE_OPS + CONV_FIXTURE_OPS + MROPE_FIXTURE_OPS + TREE_FIXTURE_OPS
        if not isinstance(claimed, (list, tuple)) or any(op not in known for op in claimed):
            raise TargetError("capabilities.fixture_ops", f"must list fixture ops of {list(known)}, got {claimed!r}")
        if len(set(claimed)) != len(claimed):
            raise TargetError("capabilities.fixture_ops", f"lists an op twice: {claimed!r}")
        if claimed and not runs_fixtures:
            raise TargetError("capabilities.fixture_ops", "are claimed but the target does not override fixture")
        if v[1] < CONV_FIXTURE_OPS_MINOR:  # a judge before 1.3 has no conv ops and refuses names it does not know
            claimed = [op for op in claimed if op not in CONV_FIXTURE_OPS]
        if v[1] < MROPE_MINOR:  # nor does a judge before 1.10 know mrope.rotary
            claimed = [op for op in claimed if op not in MROPE_FIXTURE_OPS]
        if v[1] < TREE_FIXTURE_MINOR:  # nor does a judge before 1.11 know the tree ops
            claimed = [op for op in claimed if op not in TREE_FIXTURE_OPS]
        caps["fixture_ops"] = list(claimed)
        self.fixture_ops = set(claimed)
        mix = caps.get("step_mix", {})
        if not isinstance(mix, dict) or any(k not in STEP_MIX_KEYS or type(x) is not bool for k, x in mix.items()):
            raise TargetError("capabilities.step_mix", f"must map one_width and prefill_apart to true or false, "
                                                       f"got {mix!r}")
        # A judge before 1.7 has no step_mix and sends steps of any mix: the claim is left out, and every step
        # that mixes more than it says is refused (below), so such a judge sees the narrowing as failures.
        self.step_mix = dict(mix)
        if v[1] < STEP_MIX_MINOR:
            caps.pop("step_mix", None)
        claim = caps.get("self_check", {})
        tiers = ("fp32", "tf32", "bf16")
        if (not isinstance(claim, dict) or any(k not in ("exact", "tier") for k in claim)
                or claim.get("tier", "fp32") not in tiers
                or not isinstance(claim.get("exact", []), (list, tuple))
                or any(x not in SELF_CHECKS for x in claim.get("exact", []))
                or len(set(claim.get("exact", []))) != len(claim.get("exact", []))):
            raise TargetError("capabilities.self_check", f"must be {{\"exact\": [distinct names of {list(SELF_CHECKS)}], "
                                                         f"\"tier\": one of {list(tiers)}}}, got {claim!r}")
        if v[1] < SELF_CHECK_MINOR:  # a judge before 1.8 knows no self_check: it holds every target to the default
            caps.pop("self_check", None)
        # A judge before 1.6 knows only the named forms rsqrt_mul, div_sqrt and none: other claims are left out.
        if v[1] < L2NORM_FORMULA_MINOR and "l2norms" in caps:
            caps["l2norms"] = [n for n in caps["l2norms"] if n in ("rsqrt_mul", "div_sqrt", "none")]
        self.greeted = True
        return {"protocol": PROTOCOL_NAME, "version": list(VERSION), "capabilities": caps}, None

    def _hello_mrope(self, caps: dict, v: list) -> None:
        """The mrope claim (1.10): checked strictly, the methods it needs overridden; passed to a judge speaking
        1.10 or later (pad_positions filled in) and left out for an older one, which sends no MRoPE command."""
        self.mrope = None
        if "mrope" not in caps:
            return
        claim = parse_claim(caps["mrope"])
        missing = [m for m in MROPE_METHODS if getattr(type(self.target), m) is getattr(Target, m)]
        if missing:
            raise TargetError("capabilities.mrope", f"is claimed but the target does not override {missing}")
        if v[1] < MROPE_MINOR:
            caps.pop("mrope")
            return
        caps["mrope"] = self.mrope = claim

    def setup(self, frame):
        self.session = None  # a failed setup leaves no case behind
        session = Session.parse(frame.msg.get("setup"), frame.msg.get("poison_bits"))
        params = [session.layer_params(frame, l) for l in range(session.L)]
        setup = session.setup_for_target()
        if session.conv is not None:
            if not self.convs:
                raise TargetError("setup.conv", "the conv component is not claimed by this target (conv_state)")
            setup["conv_params"] = session.conv_params(frame)
        self.target.setup(setup, params)
        self.session = session
        self.buckets = set()
        return {}, None

    def allocate(self, frame):
        self.target.allocate(self._slot(frame.msg, "slot"))
        return {}, None

    def step(self, frame):
        s = self.session
        rows = s.index_rows(parse_rows(frame.msg.get("rows"), s.pad_sentinel, frame.msg.get("live_rows")))
        if self.step_mix and (why := step_mix_excess(rows, self.step_mix)):
            raise TargetError("rows", f"the step mixes more than the target's step_mix {self.step_mix} allows: {why}")
        n = integer(frame.msg, "total_tokens", "total_tokens", 0)
        inputs = [s.layer_inputs(frame, l, n) for l in range(s.L)]
        rows.replay = self._replay(frame.msg, rows)
        out = self.target.step(rows, inputs)
        if not isinstance(out, (list, tuple)) or len(out) != s.L:
            raise TargetError("o", f"step must return one output per layer ({s.L}), got "
                                   f"{len(out) if isinstance(out, (list, tuple)) else type(out).__name__}")
        tensors = {f"o.{l}": (to_wire(o, s.act, (n, s.HV, s.V), f"o.{l}"), s.act) for l, o in enumerate(out)}
        return {}, tensors

    def commit(self, frame):
        s = self.session
        rows = s.index_rows(parse_rows(frame.msg.get("rows"), s.pad_sentinel, frame.msg.get("live_rows")))
        rows.replay = self._replay(frame.msg, rows)
        self.target.commit(rows)
        return {}, None

    def _replay(self, msg, rows):
        """The bucket (rows, T) a step or commit replays (protocol 1.9), checked against what this case captured
        and against the rows; None without a `replay` field."""
        if "replay" not in msg:
            return None
        if not self.replays:
            raise TargetError("replay", "graph replay is not claimed by this target (capabilities.graph_replay)")
        r = msg["replay"]
        if not isinstance(r, dict) or set(r) != {"rows", "T"}:
            raise TargetError("replay", f"must be {{\"rows\": C, \"T\": W}}, got {r!r}")
        C, W = integer(r, "rows", "replay.rows", 1), integer(r, "T", "replay.T", 1)
        if (C, W) not in self.buckets:
            raise TargetError("replay", f"replays the bucket rows={C} T={W}, which this case never captured")
        if len(rows) != C:
            raise TargetError("rows", f"{len(rows)} rows replay a bucket of {C}")
        for i, row in enumerate(rows):
            if row.T != W:
                raise TargetError(f"rows[{i}].T", f"is {row.T} in a replay of a bucket {W} tokens wide")
            if not row.is_pad and row.is_prefill:
                raise TargetError(f"rows[{i}].kind", "is prefill in a replayed bucket (verify rows only)")
        return (C, W)

    def capture(self, frame):
        s, msg = self.session, frame.msg
        if not self.captures:
            raise TargetError("op", "capture is not claimed by this target (capabilities.capture)")
        rows, T = integer(msg, "rows", "rows", 1), integer(msg, "T", "T", 1)
        if rows > s.S + 8:
            raise TargetError("rows", f"is {rows}, more than a step's capacity num_slots + 8 = {s.S + 8}")
        max_T = s.setup.get("max_T")
        if type(max_T) is int and T > max_T:
            raise TargetError("T", f"is {T}, more than max_T = {max_T}")
        self.target.capture(rows, T)
        self.buckets.add((rows, T))
        return {}, None

    # --- the conv component (1.5) ---------------------------------------------------------------------------
    def _conv_session(self):
        if self.session.conv is None:
            raise TargetError("op", "the setup has no conv component (setup.conv)")
        return self.session

    def conv_step(self, frame):
        s = self._conv_session()
        rows = s.index_rows(parse_rows(frame.msg.get("rows"), s.pad_sentinel, frame.msg.get("live_rows")))
        if self.step_mix and (why := step_mix_excess(rows, self.step_mix)):
            raise TargetError("rows", f"the step mixes more than the target's step_mix {self.step_mix} allows: {why}")
        n = integer(frame.msg, "total_tokens", "total_tokens", 0)
        x = [s.conv_inputs(frame, l, n) for l in range(s.L)]
        y = self.target.conv_step(rows, x)
        if not isinstance(y, (list, tuple)) or len(y) != s.L:
            raise TargetError("y", f"conv_step must return one output per layer ({s.L}), got "
                                   f"{len(y) if isinstance(y, (list, tuple)) else type(y).__name__}")
        return {}, {f"y.{l}": (to_wire(v, s.act, (n, s.C), f"y.{l}"), s.act) for l, v in enumerate(y)}

    def conv_commit(self, frame):
        s = self._conv_session()
        self.target.conv_commit(s.index_rows(parse_rows(frame.msg.get("rows"), s.pad_sentinel,
                                                        frame.msg.get("live_rows"))))
        return {}, None

    def conv_committed_state(self, frame):
        s, msg = self._conv_session(), frame.msg
        layer, slot = self._layer(msg), self._slot(msg, "slot")
        wire = to_wire(self.target.conv_committed_state(layer, slot), s.conv_state, (s.C, s.W - 1), "state")
        return {}, {"state": (wire, s.conv_state)}

    def conv_pool(self, frame):
        s = self._conv_session()
        layer = self._layer(frame.msg)
        wire = to_wire(self.target.conv_pool(layer), s.conv_state, (s.S, s.conv_stride), "values")
        return self._digest_answer(frame.msg.get("known"), wire, s.C * (s.W - 1), s.conv_state)

    def copy_slot(self, frame):
        self.target.copy_slot(self._slot(frame.msg, "src"), self._slot(frame.msg, "dst"))
        return {}, None

    def committed_state(self, frame):
        s, msg = self.session, frame.msg
        layer, slot = self._layer(msg), self._slot(msg, "slot")
        wire = to_wire(self.target.committed_state(layer, slot), s.state, s.state_shape, "state")
        d = digest64(wire)
        known = msg.get("known")
        if known is not None and parse_hex64(known, "known") == d:
            return {"digest": hex64(d)}, None
        return {"digest": hex64(d)}, {"state": (wire, s.state)}

    def pool(self, frame):
        s, msg = self.session, frame.msg
        layer = self._layer(msg)
        wire = to_wire(self.target.pool(layer), s.state, (s.S, s.stride), "values")
        return self._digest_answer(msg.get("known"), wire, s.E, s.state)

    def _digest_answer(self, known, wire, elems: int, dtype: str):
        """The `pool` / `conv_pool` answer: per slot the digests of its first `elems` values and of its gap, and
        the values of the slots whose digests differ from `known`."""
        s = self.session
        if not isinstance(known, list) or len(known) != 2 * s.S:
            raise TargetError("known", f"must list 2 digests per slot ({2 * s.S})")
        known = [parse_hex64(k, f"known[{i}]") for i, k in enumerate(known)]
        raw = wire.view(np.uint8).reshape(s.S, -1)
        split = elems * wire.itemsize
        state_d, gap_d = digest_rows(raw[:, :split]), digest_rows(raw[:, split:])
        digests, slots = [], []
        for i in range(s.S):
            digests += [hex64(state_d[i]), hex64(gap_d[i])]
            if int(state_d[i]) != known[2 * i] or int(gap_d[i]) != known[2 * i + 1]:
                slots.append(i)
        tensors = {"values": (wire[slots], dtype)} if slots else None
        return {"digests": digests, "slots": slots}, tensors

    def fixture(self, frame):
        msg = frame.msg
        op = msg.get("fixture_op")
        if op not in self.fixture_ops:
            raise TargetError("fixture_op", f"{op!r} is not one of the claimed fixture ops {sorted(self.fixture_ops)}")
        config, outputs = msg.get("config"), msg.get("outputs")
        if not isinstance(config, dict):
            raise TargetError("config", "must be an object")
        if not isinstance(outputs, dict) or not outputs:
            raise TargetError("outputs", "must map every expected out.* tensor to its dtype and shape")
        inputs = {}
        for name, arr in frame.tensors.items():
            if not name.startswith(("in.", "param.")):
                raise TargetError(name, "is not an in.* or param.* tensor")
            inputs[name] = np.ascontiguousarray(arr, dtype=np.float32) if frame.dtypes[name] in ("F32", "BF16") else arr
        got = self.target.fixture(op, config, inputs)
        if not isinstance(got, dict):
            raise TargetError("out", f"fixture must return a dict of out.* tensors, got {type(got).__name__}")
        got = {k if k.startswith("out.") else "out." + k: v for k, v in got.items()}
        for name in sorted(set(got) - set(outputs)):
            raise TargetError(name, f"is not an output of this fixture (expected {sorted(outputs)})")
        tensors = {}
        for name, spec in sorted(outputs.items()):
            if name not in got:
                raise TargetError(name, "the target returned no such tensor")
            if not isinstance(spec, dict) or not isinstance(spec.get("shape"), list):
                raise TargetError(f"outputs.{name}", "must be {\"dtype\": ..., \"shape\": [...]}")
            value = got[name]
            shape = tuple(spec["shape"])
            tensors[name] = (to_wire(value, spec.get("dtype"), shape, name, flat_ok=False), spec.get("dtype"))
        return {}, tensors

    # --- MRoPE positions (1.10) -------------------------------------------------------------------------------
    def _claimed(self, op: str) -> None:
        if self.mrope is None:
            raise TargetError("mrope", f"'{op}': MRoPE is not claimed to this judge (capabilities.mrope, protocol "
                                       f"1.{MROPE_MINOR})")

    def _mrope(self, op: str) -> MropeCase:
        """The case an MRoPE command acts on, after the claim and the order checks."""
        self._claimed(op)
        if self.mrope_case is None:
            raise TargetError("op", f"'{op}' before a successful 'mrope_setup'")
        self.mrope_case.check_order(op)
        return self.mrope_case

    def mrope_setup(self, frame):
        self._claimed("mrope_setup")
        self.mrope_case = None  # a failed mrope_setup leaves no case behind, and a new one drops every request
        case = MropeCase(frame.msg, self.mrope)
        self.target.mrope_setup(case.config, case.q_heads, case.k_heads)
        self.mrope_case = case
        return {}, None

    def mrope_admit(self, frame):
        case = self._mrope("mrope_admit")
        req, segments, prompt_len, cached = case.admit(frame.msg)
        self.target.mrope_admit(req, segments, cached)
        case.admitted(req, prompt_len, cached)
        return {}, None

    def mrope_step(self, frame):
        case = self._mrope("mrope_step")
        rows, q, k = case.step(frame)
        got = self.target.mrope_step(rows, q, k)
        if not isinstance(got, (list, tuple)) or len(got) != 4:
            raise TargetError("positions", "mrope_step must return (positions, index, q_rot, k_rot), got "
                                           f"{type(got).__name__}")
        n, d = q.shape[0], case.head_dim
        shapes = {"positions": ("I64", (3, n)), "index": ("I64", (n,)), "q_rot": ("F32", (n, case.q_heads, d)),
                  "k_rot": ("F32", (n, case.k_heads, d))}
        tensors = {name: (to_wire(value, dtype, shape, name, flat_ok=False), dtype)
                   for value, (name, (dtype, shape)) in zip(got, shapes.items())}
        case.stepped(rows)
        return {}, tensors

    def mrope_accept(self, frame):
        case = self._mrope("mrope_accept")
        pairs = case.accept(frame.msg)
        self.target.mrope_accept(pairs)
        case.accepted(pairs)
        return {}, None

    def mrope_release(self, frame):
        case = self._mrope("mrope_release")
        req = case.release(frame.msg)
        self.target.mrope_release(req)
        case.released(req)
        return {}, None

    def shutdown(self, frame):
        return {}, None

    # --- helpers ------------------------------------------------------------------------------------------
    def _slot(self, msg, key):
        x = integer(msg, key, key)
        if not 0 <= x < self.session.S:
            raise TargetError(key, f"is {x}, outside [0, {self.session.S})")
        return x

    def _layer(self, msg):
        x = integer(msg, "layer", "layer")
        if not 0 <= x < self.session.L:
            raise TargetError("layer", f"is {x}, outside [0, {self.session.L})")
        return x

    def answer(self, frame):
        """(message, tensors, exit status or None to go on) for one command."""
        op = frame.msg.get("op")
        handler = getattr(self, op) if op in COMMANDS else None
        if handler is None:
            return _error("op", f"unknown command {op!r}"), None, None
        if op != "hello" and not self.greeted:
            return _error("op", f"'{op}' before a successful 'hello'"), None, None
        if op not in NO_SETUP and self.session is None:
            return _error("op", f"'{op}' before a successful 'setup'"), None, None
        try:
            start = time.perf_counter()
            fields, tensors = handler(frame)
            # The time the command took here, frame I/O excluded: the judge subtracts it from its round trip
            # to report transport separately (replayssm bench fuzz).
            return {"ok": True, **fields, "compute_s": time.perf_counter() - start}, tensors, \
                0 if op == "shutdown" else None
        except _Refused as e:
            return _error(e.field, e.message), None, 1
        except (TargetError, ConversionError, ProtocolError) as e:
            return _error(e.field, e.message), None, None
        except NotImplementedError as e:
            return _error("", f"'{op}' is not implemented by the target ({e})"), None, None
        except Exception as e:  # the target's own bug: a verdict, and the traceback for its author
            traceback.print_exc(file=sys.stderr)
            if self.target.is_fatal(e):
                # a sticky device fault: answer it, then end the process so that no later command is judged
                # on this one's fault (the judge starts a fresh process)
                answer = _error("", f"{type(e).__name__}: {e}")
                answer["error"]["fatal"] = True
                return answer, None, 3
            return _error("", f"{type(e).__name__}: {e}"), None, None

    def run(self, stdin) -> int:
        return run_frames(self.answer, self.out, stdin, "replayssm_kit.serve")


class InProcess:
    """The request loop of serve() without a pipe: the same command handling, checks and conversions, called
    directly (replayssm_kit.trace replays trace fixtures through it).

        loop = InProcess(my_target)
        answer, tensors = loop.call({"op": "hello", "protocol": "replayssm.target", "version": [1, 7]})

    call() takes a command message and its tensors (name -> float32 array, with their protocol dtype names in
    `dtypes`) and returns the answer message and its tensors (name -> (array in the stored form of its dtype:
    float32 for F32, uint16 bits for BF16, dtype name)), or None."""

    def __init__(self, target: Target):
        self._loop = _Loop(target, None)

    def call(self, msg: dict, tensors: dict | None = None, dtypes: dict | None = None):
        answer, wire, _ = self._loop.answer(Frame(msg, tensors or {}, dtypes or {}))
        return answer, wire


@contextlib.contextmanager
def _frames_only(stdout):
    """The stream frames go to (stdout, default sys.stdout.buffer). Python-level prints go to stderr while
    serving; when the frames go to file descriptor 1, that descriptor itself is pointed at stderr (so native
    libraries' writes cannot corrupt the stream either) and restored afterwards."""
    stream = stdout if stdout is not None else sys.stdout.buffer
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):
        fd = None
    with contextlib.redirect_stdout(sys.stderr):
        if fd != 1:
            yield stream
            return
        stream.flush()
        frames_fd = os.dup(1)
        os.dup2(sys.stderr.fileno(), 1)
        out = os.fdopen(frames_fd, "wb")
        try:
            yield out
        finally:
            out.flush()
            os.dup2(frames_fd, 1)
            out.close()


def serve(target: Target, stdin=None, stdout=None) -> int:
    """Serves `target` over the protocol until shutdown or the end of input; returns the exit status (0 after
    shutdown or a clean end of input, 1 after refusing the judge's protocol version, 2 for an unreadable
    frame, 3 after answering an error that Target.is_fatal says poisons the process). Defaults: sys.stdin.buffer
    and sys.stdout.buffer; while serving, nothing but frames reaches the real stdout (prints, and writes to file
    descriptor 1, go to stderr). Public as replayssm_kit.target.serve."""
    return run(target, stdin, stdout)


def run(target: Target, stdin=None, stdout=None) -> int:
    stdin = stdin if stdin is not None else sys.stdin.buffer
    with _frames_only(stdout) as out:
        return _Loop(target, out).run(stdin)


def run_frames(answer, out, stdin, who: str) -> int:
    """The request loop of serve() and serve_engine(): reads a command frame, writes `answer(frame)`'s message
    and tensors, until the judge closes the pipe (0), a frame cannot be read (2, the reason on stderr) or an
    answer ends the session with a status (shutdown: 0)."""
    while True:
        try:
            frame = read_frame(stdin, origin="command")
        except ProtocolError as e:
            print(f"{who}: unreadable command frame: {e}", file=sys.stderr)
            return 2
        if frame is None:
            return 0
        msg, tensors, status = answer(frame)
        try:
            write_frame(out, msg, tensors)
        except BrokenPipeError:
            if frame.msg.get("op") == "shutdown":
                return 0  # the judge does not wait for the shutdown answer
            raise
        if status is not None:
            return status
