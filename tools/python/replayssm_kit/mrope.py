"""The MRoPE commands of the target protocol (1.10; docs/target-protocol.md, "MRoPE positions (1.10)"): the `mrope`
capability, the fields of mrope_setup, mrope_admit, mrope_step, mrope_accept and mrope_release, and the order the
judge may send them in.

The kit keeps per request only the counts it needs to refuse a command the protocol does not allow: the prompt's
token count, the tokens computed, and the verify windows that wait for their mrope_accept. Positions, the delta and
the rotation are the target's own. Every check runs before the target is called; the counts move only after the
target answered (MropeCase.stepped and the other *ed methods). Errors are TargetError naming the field inside the
command ("rows[2].kind", "segments[1].grid", "config.rotary_dim", "q").
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .interface import MROPE_MODELS
from .rows import TargetError, integer

ROW_KINDS = ("prefill", "verify", "decode", "pad")
VIDEO_RULES = ("frame-index", "scaled-time", "per-frame")
PAD_POSITIONS = ("zero", "any")
CONFIG_KEYS = ("model", "head_dim", "rotary_dim", "theta", "mrope_section", "interleaved", "spatial_merge_size",
               "temporal_patch_size", "video_rule", "tokens_per_second")
MAX_PROMPT_TOKENS = 1 << 24  # the reference's bound on one request's tokens
MAX_TIME_OFFSET = 2.0 ** 40  # the reference's bound on a scaled-time temporal offset


@dataclass(frozen=True)
class MropeRow:
    """One row of an mrope_step, as the target receives it.

    kind          "prefill", "verify", "decode" or "pad";
    tokens        the row's token count (a decode row: 1);
    token_offset  where its tokens start in the packed q and k: [token_offset, token_offset + tokens);
    req           the request (an integer >= 0), None for the pad row.
    """

    kind: str
    tokens: int
    token_offset: int
    req: int | None = None

    @property
    def is_pad(self) -> bool:
        return self.kind == "pad"


_integer = integer  # the kit's integer field reader (rows.py)


def _number(obj: dict, key: str, field: str) -> float:
    x = obj[key]
    if type(x) not in (int, float) or not math.isfinite(x):
        raise TargetError(field, f"must be a finite number, got {x!r}")
    return float(x)


def _only_keys(obj, keys, field: str, what: str) -> None:
    if not isinstance(obj, dict):
        raise TargetError(field, "must be an object")
    for k in sorted(set(obj) - set(keys)):
        raise TargetError(f"{field}.{k}" if field else k, f"is not a key of {what}")


# --- the capability ----------------------------------------------------------------------------------------------
def parse_claim(claim) -> dict:
    """capabilities()["mrope"] as the hello answer carries it: {"models": [...], "pad_positions": ...}, the default
    "zero" filled in. TargetError naming capabilities.mrope or its key otherwise."""
    f = "capabilities.mrope"
    _only_keys(claim, ("models", "pad_positions"), f, "the mrope capability (models, pad_positions)")
    models = claim.get("models")
    if (not isinstance(models, (list, tuple)) or not models or any(m not in MROPE_MODELS for m in models)
            or len(set(models)) != len(models)):
        raise TargetError(f + ".models", f"must list distinct names of {list(MROPE_MODELS)} (at least one), "
                                         f"got {models!r}")
    pad = claim.get("pad_positions", "zero")
    if pad not in PAD_POSITIONS:
        raise TargetError(f + ".pad_positions", f"must be one of {list(PAD_POSITIONS)}, got {pad!r}")
    return {"models": list(models), "pad_positions": pad}


# --- mrope_setup -------------------------------------------------------------------------------------------------
def parse_config(config, models) -> dict:
    """mrope_setup's config: exactly CONFIG_KEYS, each of its type and range; the model one of the claimed ones."""
    f = "config"
    _only_keys(config, CONFIG_KEYS, f, "an MRoPE config")
    for k in CONFIG_KEYS:
        if k not in config:
            raise TargetError(f"{f}.{k}", "is missing")
    if config["model"] not in models:
        raise TargetError(f + ".model", f"{config['model']!r} is not a claimed model (capabilities.mrope.models: "
                                        f"{list(models)})")
    head_dim = _integer(config, "head_dim", f + ".head_dim", 2)
    R = _integer(config, "rotary_dim", f + ".rotary_dim", 2)
    if R % 2 or R > head_dim:
        raise TargetError(f + ".rotary_dim", f"must be even and <= head_dim = {head_dim}, got {R}")
    if _number(config, "theta", f + ".theta") <= 0:
        raise TargetError(f + ".theta", f"must be > 0, got {config['theta']!r}")
    section = config["mrope_section"]
    if (not isinstance(section, list) or len(section) != 3 or any(type(s) is not int or s < 0 for s in section)
            or sum(section) != R // 2):
        raise TargetError(f + ".mrope_section", f"must be 3 integers >= 0 summing to rotary_dim / 2 = {R // 2}, "
                                                f"got {section!r}")
    if type(config["interleaved"]) is not bool:
        raise TargetError(f + ".interleaved", f"must be true or false, got {config['interleaved']!r}")
    _integer(config, "spatial_merge_size", f + ".spatial_merge_size", 1)
    _integer(config, "temporal_patch_size", f + ".temporal_patch_size", 1)
    if config["video_rule"] not in VIDEO_RULES:
        raise TargetError(f + ".video_rule", f"must be one of {list(VIDEO_RULES)}, got {config['video_rule']!r}")
    if _number(config, "tokens_per_second", f + ".tokens_per_second") < 0:
        raise TargetError(f + ".tokens_per_second", f"must be >= 0, got {config['tokens_per_second']!r}")
    return config


# --- mrope_admit -------------------------------------------------------------------------------------------------
def _grid(seg: dict, field: str, merge: int) -> tuple:
    g = seg.get("grid")
    if not isinstance(g, list) or len(g) != 3 or any(type(x) is not int for x in g):
        raise TargetError(field, f"must be [T, H, W], 3 integers, got {g!r}")
    for name, x in zip("THW", g):
        if not 1 <= x <= MAX_PROMPT_TOKENS:
            raise TargetError(field, f"{name} must be in [1, {MAX_PROMPT_TOKENS}], got {x}")
    for name, x in zip("HW", g[1:]):
        if x % merge:
            raise TargetError(field, f"{name} = {x} is not a multiple of the spatial merge size {merge}")
    return g[0], g[1] // merge, g[2] // merge


def _video_tokens(seg: dict, f: str, config: dict, T: int, hw: int) -> int:
    """A video's tokens (frames and, per-frame, the text before each), its timing and frame_text checked."""
    for key in ("second_per_grid", "fps"):
        if key in seg:
            x = _number(seg, key, f"{f}.{key}")
            if x < 0 or (key == "fps" and x == 0):
                raise TargetError(f"{f}.{key}", f"must be {'> 0' if key == 'fps' else '>= 0'}, got {seg[key]!r}")
    if "second_per_grid" in seg and "fps" in seg:
        raise TargetError(f + ".fps", "give second_per_grid or fps, not both")
    rule = config["video_rule"]
    if rule == "scaled-time":
        if "second_per_grid" not in seg and "fps" not in seg:
            raise TargetError(f + ".second_per_grid", "a scaled-time video needs second_per_grid or fps")
        spg = seg["second_per_grid"] if "second_per_grid" in seg else config["temporal_patch_size"] / seg["fps"]
        with np.errstate(over="ignore"):
            last = np.float32(T - 1) * np.float32(spg) * np.float32(config["tokens_per_second"])
        if not np.isfinite(last) or last >= MAX_TIME_OFFSET:
            raise TargetError(f"{f}.{'second_per_grid' if 'second_per_grid' in seg else 'fps'}",
                              "temporal offsets exceed 2^40 position units")
    text = 0
    if "frame_text" in seg:
        ft = seg["frame_text"]
        if rule != "per-frame":
            raise TargetError(f + ".frame_text", f"is only for per-frame models (video_rule {rule!r})")
        if not isinstance(ft, list) or len(ft) != T:
            raise TargetError(f + ".frame_text", f"must list one count per frame (T = {T}), got {ft!r}")
        for i, n in enumerate(ft):
            if type(n) is not int or not 0 <= n <= MAX_PROMPT_TOKENS:
                raise TargetError(f"{f}.frame_text[{i}]", f"must be an integer in [0, {MAX_PROMPT_TOKENS}], got {n!r}")
        text = sum(ft)
    return T * hw + text


def prompt_tokens(segments, config: dict) -> int:
    """The prompt length of mrope_admit's segments under the case's config, every segment checked (the format of
    docs/mrope.md section 7); TargetError naming segments[i] and its key."""
    if not isinstance(segments, list) or not segments:
        raise TargetError("segments", "must be a non-empty array of segments")
    merge = config["spatial_merge_size"]
    total = 0
    for i, seg in enumerate(segments):
        f = f"segments[{i}]"
        if not isinstance(seg, dict):
            raise TargetError(f, "must be an object")
        kind = seg.get("type")
        if kind == "text":
            _only_keys(seg, ("type", "length"), f, "a text segment (type, length)")
            total += _integer(seg, "length", f + ".length", 0)
        elif kind == "image":
            for k in ("second_per_grid", "fps", "frame_text"):
                if k in seg:
                    raise TargetError(f"{f}.{k}", f"only videos take {'frame_text' if k == 'frame_text' else 'timing'}")
            _only_keys(seg, ("type", "grid"), f, "an image segment (type, grid)")
            T, h, w = _grid(seg, f + ".grid", merge)
            total += T * h * w
        elif kind == "video":
            _only_keys(seg, ("type", "grid", "second_per_grid", "fps", "frame_text"), f,
                       "a video segment (type, grid, second_per_grid or fps, frame_text)")
            T, h, w = _grid(seg, f + ".grid", merge)
            total += _video_tokens(seg, f, config, T, h * w)
        else:
            raise TargetError(f + ".type", f"must be 'text', 'image' or 'video', got {kind!r}")
        if total > MAX_PROMPT_TOKENS:
            raise TargetError(f, f"the prompt exceeds {MAX_PROMPT_TOKENS} tokens")
    if total == 0:
        raise TargetError("segments", "the prompt has no token (at least one is needed)")
    return total


# --- the case ----------------------------------------------------------------------------------------------------
@dataclass
class _Request:
    prompt_len: int
    computed: int = 0  # tokens whose KV the judge's steps computed (C)


class MropeCase:
    """One MRoPE case of the kit's: the sizes mrope_setup fixed, the live requests' counts, and the verify windows
    of the last step while they wait for mrope_accept ({req: T}, None when nothing waits)."""

    def __init__(self, msg: dict, claim: dict):
        self.config = parse_config(msg.get("config"), claim["models"])
        self.q_heads = _integer(msg, "q_heads", "q_heads", 1)
        self.k_heads = _integer(msg, "k_heads", "k_heads", 1)
        self.head_dim = self.config["head_dim"]
        self.live: dict[int, _Request] = {}
        self.pending: dict[int, int] | None = None

    def check_order(self, op: str) -> None:
        """Nothing but mrope_accept (and a new mrope_setup, which drops the case) follows a step with verify rows."""
        if self.pending is not None and op != "mrope_accept":
            raise TargetError("op", f"'{op}' while the verify rows of requests {sorted(self.pending)} wait for "
                                    f"mrope_accept")

    def _live(self, req: int, field: str) -> _Request:
        if req not in self.live:
            raise TargetError(field, f"request {req} is not live (never admitted, or released)")
        return self.live[req]

    # mrope_admit
    def admit(self, msg: dict) -> tuple:
        """(req, segments, prompt_len, cached): `cached` (optional, default 0) prompt tokens are computed already,
        as after a prefix-cache hit: 0 <= cached < prompt_len."""
        req = _integer(msg, "req", "req", 0)
        if req in self.live:
            raise TargetError("req", f"request {req} is live already (admitted and not released)")
        segments = msg.get("segments")
        prompt_len = prompt_tokens(segments, self.config)
        cached = _integer(msg, "cached", "cached", 0) if "cached" in msg else 0
        if cached >= prompt_len:
            raise TargetError("cached", f"is {cached}: at least one of the {prompt_len} prompt tokens is left to "
                                        f"prefill")
        return req, segments, prompt_len, cached

    def admitted(self, req: int, prompt_len: int, cached: int = 0) -> None:
        self.live[req] = _Request(prompt_len, cached)

    # mrope_step
    def step(self, frame) -> tuple:
        """(rows, q, k) of an mrope_step, every row checked against the requests' counts."""
        msg = frame.msg
        n = _integer(msg, "tokens", "tokens", 0)
        raw = msg.get("rows")
        if not isinstance(raw, list):
            raise TargetError("rows", "must be an array of rows")
        if not raw:
            raise TargetError("rows", "a step needs at least one row")
        rows, seen, offset = [], {}, 0
        for i, r in enumerate(raw):
            f = f"rows[{i}]"
            if not isinstance(r, dict):
                raise TargetError(f, "must be an object")
            kind = r.get("kind")
            if kind not in ROW_KINDS:
                raise TargetError(f + ".kind", f"must be one of {list(ROW_KINDS)}, got {kind!r}")
            if kind == "pad":
                if "req" in r:
                    raise TargetError(f + ".req", "a pad row has no request")
                _only_keys(r, ("kind", "tokens"), f, "a pad row (kind, tokens)")
                if i != len(raw) - 1:
                    raise TargetError(f + ".kind", f"is pad before the last row (rows[{len(raw) - 1}]): the padding "
                                                   f"comes last, once")
                tokens = _integer(r, "tokens", f + ".tokens", 1)
                rows.append(MropeRow("pad", tokens, offset))
                offset += tokens
                continue
            _only_keys(r, ("req", "kind", "tokens"), f, "an MRoPE row (req, kind, tokens)")
            req = _integer(r, "req", f + ".req", 0)
            state = self._live(req, f + ".req")
            if req in seen:
                raise TargetError(f + ".req", f"request {req} is in rows[{seen[req]}] already (once per step)")
            seen[req] = i
            tokens = _integer(r, "tokens", f + ".tokens", 1)
            left = state.prompt_len - state.computed
            if kind == "prefill":
                if left == 0:
                    raise TargetError(f + ".kind", f"is prefill, but request {req}'s prompt is computed")
                if tokens > left:
                    raise TargetError(f + ".tokens", f"is {tokens}, more than the {left} prompt tokens request {req} "
                                                     f"has not computed")
            elif left > 0:
                raise TargetError(f + ".kind", f"is {kind}, but request {req} has {left} prompt tokens to compute")
            elif kind == "decode" and tokens != 1:
                raise TargetError(f + ".tokens", f"is {tokens}: a decode row is the pending token alone (1)")
            rows.append(MropeRow(kind, tokens, offset, req))
            offset += tokens
        if offset != n:
            raise TargetError("tokens", f"is {n}, but the rows hold {offset} tokens")
        q = self._tensor(frame, "q", (n, self.q_heads, self.head_dim))
        k = self._tensor(frame, "k", (n, self.k_heads, self.head_dim))
        return rows, q, k

    @staticmethod
    def _tensor(frame, name: str, shape: tuple) -> np.ndarray:
        if name not in frame.tensors:
            raise TargetError(name, "is missing from the command")
        if frame.dtypes[name] != "F32":
            raise TargetError(name, f"has dtype {frame.dtypes[name]}, expected F32")
        arr = frame.tensors[name]
        if tuple(arr.shape) != tuple(shape):
            raise TargetError(name, f"has shape {list(arr.shape)}, expected {list(shape)}")
        return np.ascontiguousarray(arr, dtype=np.float32)

    def stepped(self, rows: list) -> None:
        verify = {}
        for r in rows:
            if r.kind == "verify":
                verify[r.req] = r.tokens
            elif not r.is_pad:
                self.live[r.req].computed += r.tokens  # a prefill chunk, or a decode token (accepted as computed)
        self.pending = verify or None

    # mrope_accept
    def accept(self, msg: dict) -> list:
        """(req, accepted) per entry of mrope_accept's rows: exactly the last step's verify rows, each once."""
        if self.pending is None:
            raise TargetError("op", "'mrope_accept' without a step with verify rows before it")
        raw = msg.get("rows")
        if not isinstance(raw, list):
            raise TargetError("rows", "must be an array of {\"req\", \"accepted\"}")
        out, seen = [], set()
        for i, r in enumerate(raw):
            f = f"rows[{i}]"
            _only_keys(r, ("req", "accepted"), f, "an accept row (req, accepted)")
            req = _integer(r, "req", f + ".req", 0)
            if req not in self.pending:
                raise TargetError(f + ".req", f"request {req} had no verify row in the last step (verify rows: "
                                              f"{sorted(self.pending)})")
            if req in seen:
                raise TargetError(f + ".req", f"request {req} is accepted twice")
            seen.add(req)
            T = self.pending[req]
            n = _integer(r, "accepted", f + ".accepted")
            if not 1 <= n <= T:
                raise TargetError(f + ".accepted", f"must be in [1, T = {T}], got {n}")
            out.append((req, n))
        missing = sorted(set(self.pending) - seen)
        if missing:
            raise TargetError("rows", f"have no entry for the verify rows of requests {missing}")
        return out

    def accepted(self, pairs: list) -> None:
        for req, n in pairs:
            self.live[req].computed += n
        self.pending = None

    # mrope_release
    def release(self, msg: dict) -> int:
        req = _integer(msg, "req", "req", 0)
        self._live(req, "req")
        return req

    def released(self, req: int) -> None:
        del self.live[req]
