"""Judging a kit Target with an MRoPE trace alone (op "mrope.session", docs/fixture-format.md section 13): no
replayssm build, no judge process, no oracle: the trace's stored expectations are the reference tracker's.

    from replayssm_kit.mrope_replay import replay_mrope_trace
    result = replay_mrope_trace("fixtures/traces/mrope/qwen3.5__session__0.safetensors", MyEngine())
    assert result.ok, result.summary()

The recorded commands go through the same request loop serve() runs (server.InProcess: the same field checks),
after an mrope_setup from the trace's config, and every mrope_step's answer is judged as the C++ judge judges it
(docs/target-protocol.md, "MRoPE positions (1.10)"): `index` exact on every token; `positions` exact on real
tokens and, under pad_positions "zero", 0 on padding; `q_rot` and `k_rot` of real tokens at the trace's stored
tolerance (the rotary bound of the step) and, under "zero", padding bitwise the inputs. A target that does not
claim mrope with the trace's model is reported as not covered, never as passed.
"""

from __future__ import annotations

import os

import numpy as np

from .compare import compare
from .fixture import load_fixture
from .protocol import PROTOCOL_NAME, VERSION
from .replay import FAIL, NOT_RUN, CommandResult, TraceResult
from .server import InProcess

SESSION_OP = "mrope.session"


def _describe(msg: dict) -> str:
    op = msg.get("op", "?")
    if op == "mrope_step":
        rows = ", ".join(("pad" if r["kind"] == "pad" else f"req {r['req']} {r['kind']}") + f" {r['tokens']}"
                         for r in msg.get("rows", []))
        return f"step of {msg.get('tokens')} tokens [{rows}]"
    if op == "mrope_accept":
        return "accept [" + ", ".join(f"req {r['req']} n={r['accepted']}" for r in msg.get("rows", [])) + "]"
    return f"{op[len('mrope_'):]} req {msg.get('req')}"


def _judge_step(fx, c: int, msg: dict, wire: dict, pad_zero: bool) -> str:
    """'' when the answer of the step at command c is right, else the first failing check and where."""
    rows = msg["rows"]
    pad = np.concatenate([np.full(r["tokens"], r["kind"] == "pad") for r in rows])
    want = {n: fx.tensors[f"out.{c}.{n}"] for n in ("positions", "index", "q_rot", "k_rot")}
    got = {}
    for name, ref in want.items():
        if name not in wire:
            return f"{name}: missing from the answer"
        got[name] = np.asarray(wire[name][0])
        if got[name].shape != ref.shape:
            return f"{name}: shape {list(got[name].shape)}, expected {list(ref.shape)}"
    bad = np.flatnonzero(got["index"] != want["index"])
    if bad.size:
        t = int(bad[0])
        return f"index (exact) of token {t}: expected {int(want['index'][t])}, got {int(got['index'][t])}"
    judged = ~pad | pad_zero
    diff = (got["positions"] != want["positions"]) & judged[None, :]
    if diff.any():
        ax, t = (int(x) for x in np.argwhere(diff)[0])
        check = "pad" if pad[t] else "positions"
        return (f"{check}: positions[{'thw'[ax]}] (exact) of token {t}: expected {int(want['positions'][ax, t])}, "
                f"got {int(got['positions'][ax, t])}")
    for name, x in (("q_rot", "q"), ("k_rot", "k")):
        if pad_zero and pad.any():
            inputs = fx.tensors[f"in.{c}.{x}"]
            if not np.array_equal(got[name][pad].view(np.uint32), inputs[pad].view(np.uint32)):
                return f"pad: {name} of padding must be the input bit for bit (position 0)"
        rep = compare(want[name][~pad], got[name][~pad], fx.tolerance[f"out.{c}.{name}"])
        if not rep.ok:
            return f"{name} ({fx.tolerance[f'out.{c}.{name}']}) of the real tokens: {rep}"
    return ""


def replay_mrope_trace(path, target, keep_going: bool = False) -> TraceResult:
    """Replays an MRoPE trace through `target` and judges every step. After the first failing command the rest
    are NOT RUN unless keep_going. Never raises for a failing target; a file that is not an mrope.session fixture
    raises ValueError."""
    fx = load_fixture(os.fspath(path))
    if fx.op != SESSION_OP:
        raise ValueError(f"{path}: op is {fx.op!r}, not {SESSION_OP!r}")
    result = TraceResult(fx.path, judged="rotary bound")
    loop = InProcess(target)
    answer, _ = loop.call({"op": "hello", "protocol": PROTOCOL_NAME, "version": list(VERSION)})
    if not answer.get("ok"):
        result.commands.append(CommandResult(-1, "hello", "hello", verdict=FAIL, check="error",
                                             message=f"the target refused hello: {answer.get('error')}"))
        return result
    result.claims = answer["capabilities"]
    setup = fx.config["mrope"]
    model = setup["config"]["model"]
    claim = result.claims.get("mrope")
    if not claim or model not in claim.get("models", []):
        result.covered = False
        result.not_covered = f"mrope: the target does not claim model {model}"
        return result
    pad_zero = claim.get("pad_positions", "zero") == "zero"
    answer, _ = loop.call({"op": "mrope_setup", **setup})
    if not answer.get("ok"):
        result.commands.append(CommandResult(-1, "mrope_setup", "mrope_setup", verdict=FAIL, check="error",
                                             message=f"the target refused mrope_setup: {answer.get('error')}"))
        return result
    failed = False
    for c, msg in enumerate(fx.config["commands"]):
        res = CommandResult(c, msg["op"], _describe(msg))
        result.commands.append(res)
        if failed and not keep_going:
            res.verdict = NOT_RUN
            continue
        tensors = dtypes = None
        if msg["op"] == "mrope_step":
            tensors = {x: fx.tensors[f"in.{c}.{x}"] for x in ("q", "k")}
            dtypes = {"q": "F32", "k": "F32"}
        answer, wire = loop.call(msg, tensors, dtypes)
        if not answer.get("ok"):
            err = answer.get("error", {})
            why = f"the target refused it: {err.get('field') or '(no field)'}: {err.get('message')}"
            res.check = "error"
        else:
            why = _judge_step(fx, c, msg, wire or {}, pad_zero) if msg["op"] == "mrope_step" else ""
            res.check = why.split(":", 1)[0].split(" ", 1)[0] if why else ""
        if why:
            res.verdict, failed = FAIL, True
            res.message = f"command {c} ({res.description}): {why}"
    return result
