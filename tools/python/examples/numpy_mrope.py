"""MRoPE positions and rotary in NumPy (protocol 1.10): what examples/numpy_replay.py answers to mrope_setup,
mrope_admit, mrope_step, mrope_accept, mrope_release and to the fixture op mrope.rotary. Written from the rules of
docs/mrope.md; nothing here is shared with the C++ reference.

Per request (MropeRequest): the prompt's position table [3, P], walked once at admission from the segments
(prompt_table), its delta = max(table) + 1 - P, and a cursor C of computed tokens. A row's tokens sit at absolute
indices [C, C + tokens): an index n < P reads the table, an index n >= P gets n + delta on all three axes.

  prefill n   the next n prompt tokens; C += n (the chunk that reaches P leaves a sampled token pending)
  verify T    the pending token and T - 1 drafts at [C, C + T); C waits for the accept
  accept n    C += n (the pending token and n - 1 drafts); the rejected drafts leave nothing behind
  decode      the pending token alone at C; C += 1
  pad         positions 0, index -1, q and k copied unrotated (pad_positions "zero")

Rotary (rotate): R = rotary_dim dims rotate in split-half (NeoX) pairs (x[j], x[j + R/2]) by the angle
pos[axis(j)] * theta^(-2j/R), axis(j) chunked (s0 t, s1 h, s2 w) or interleaved (h where j % 3 == 1 and j < 3*s1,
w where j % 3 == 2 and j < 3*s2, t otherwise); evaluated in float64 and rounded once to float32; dims >= R copied.

Seeded faults (numpy_replay.py --fault F), each modelled on a public engine bug and each changing only what it says:

  mrope_delta_from_chunk      the delta is computed from the prompt tokens computed by the end of the request's
                              first prefill chunk (max of the table so far + 1 - the chunk's end), the delta an
                              engine gets when it slices the position table to the chunk before taking the delta
                              and keeps the first one (vLLM PRs 10388 / 10403: the delta of a non-last chunk): wrong
                              for the rows after the prompt when that chunk ended before the last vision item did.
  mrope_verify_advances_T     after a verify the cursor advances by the window T instead of the accepted count: the
                              next rows' positions and indices carry the rejected drafts forward (a rewind that does
                              not reach the multimodal position state, as reviewed in onnxruntime-genai PR 2441;
                              docs/mrope.md section 6, position tables that outlive a rollback).
  mrope_pad_takes_last_delta  padding tokens get the last real token's position + 1 + i on every axis, as if the
                              bucket's tail continued the last row, instead of 0 (the padding of a captured bucket
                              handed a real request's delta instead of a neutral one, TensorRT-LLM PR 7235).
  mrope_delta_by_batch_row    the deltas sit in a per-batch-row array filled in admission order and are read by
                              the row's place in the step, not by its request (the mlx-vlm PR 1095 family: a row
                              inherits another row's delta): wrong when the step's rows are permuted or a live
                              request sits out.
  mrope_index_from_rope       a token's index (its KV slot) is taken from its rope coordinate positions[0] instead
                              of its absolute index (vLLM issue 54498): wrong after a vision item (delta < 0).
"""

from __future__ import annotations

import numpy as np

from replayssm_kit.target import TargetError

MROPE_FAULTS = ("mrope_delta_from_chunk", "mrope_verify_advances_T", "mrope_pad_takes_last_delta",
                "mrope_delta_by_batch_row", "mrope_index_from_rope")
# The temporal rule of each preset (docs/mrope.md section 1), for the fixture op, whose tensors do not carry it.
VIDEO_RULES = {"qwen2-vl": "frame-index", "qwen2.5-vl": "scaled-time", "qwen3-vl": "per-frame", "qwen3.5": "per-frame"}
TEMPORAL_PATCH_SIZE = 2  # every preset's


# --- positions of a prompt -----------------------------------------------------------------------------------------
def _scaled_times(T: int, second_per_grid: float, tokens_per_second: float) -> np.ndarray:
    """trunc(tt * second_per_grid * tokens_per_second), the product formed in binary32 left to right."""
    tt = np.arange(T, dtype=np.float32)
    return ((tt * np.float32(second_per_grid)) * np.float32(tokens_per_second)).astype(np.int64)


def _vision_item(cur: int, times: np.ndarray, h: int, w: int) -> tuple:
    """(positions [3, T*h*w], span) of a vision item whose temporal group tt sits at times[tt]."""
    k = np.arange(len(times) * h * w, dtype=np.int64)
    pos = np.stack([cur + times[k // (h * w)], cur + (k // w) % h, cur + k % w])
    return pos, 1 + max(int(times[-1]), h - 1, w - 1)


def _text(cur: int, length: int) -> np.ndarray:
    return np.tile(cur + np.arange(length, dtype=np.int64), (3, 1))


def prompt_table(segments: list, cfg: dict) -> np.ndarray:
    """The positions [3, P] (rows t, h, w) of a prompt's segments (the protocol's segment dicts) under the config's
    temporal rule, walking a cursor `cur` from 0: a text run at cur + i; a vision item's placeholder k at
    (cur + time(tt), cur + hh, cur + ww), then cur += span."""
    S, rule = cfg["spatial_merge_size"], cfg["video_rule"]
    cur, parts = 0, []
    for seg in segments:
        if seg["type"] == "text":
            parts.append(_text(cur, seg["length"]))
            cur += seg["length"]
            continue
        T, h, w = seg["grid"][0], seg["grid"][1] // S, seg["grid"][2] // S
        if seg["type"] == "video" and rule == "per-frame":
            frame_text = seg.get("frame_text") or [0] * T
            for f in range(T):  # one (1, H, W) item per frame, after its text
                parts.append(_text(cur, frame_text[f]))
                cur += frame_text[f]
                pos, span = _vision_item(cur, np.zeros(1, dtype=np.int64), h, w)
                parts.append(pos)
                cur += span
            continue
        if rule == "scaled-time" and seg["type"] == "video":
            spg = seg["second_per_grid"] if "second_per_grid" in seg else cfg["temporal_patch_size"] / seg["fps"]
            times = _scaled_times(T, spg, cfg["tokens_per_second"])
        elif rule == "scaled-time":
            times = np.zeros(T, dtype=np.int64)  # images carry a zero time step
        else:
            times = np.arange(T, dtype=np.int64)
        pos, span = _vision_item(cur, times, h, w)
        parts.append(pos)
        cur += span
    return np.concatenate(parts, axis=1) if parts else np.zeros((3, 0), dtype=np.int64)


def delta_of(table: np.ndarray) -> int:
    """max(all prompt positions) + 1 - prompt_len."""
    return int(table.max()) + 1 - table.shape[1]


# --- rotary ------------------------------------------------------------------------------------------------------
def frequency_axes(cfg: dict) -> np.ndarray:
    """The axis (0 t, 1 h, 2 w) each of the R/2 frequencies reads."""
    s0, s1, s2 = cfg["mrope_section"]
    j = np.arange(cfg["rotary_dim"] // 2)
    if not cfg["interleaved"]:
        return np.where(j < s0, 0, np.where(j < s0 + s1, 1, 2))
    return np.where((j % 3 == 1) & (j < 3 * s1), 1, np.where((j % 3 == 2) & (j < 3 * s2), 2, 0))


def rotate(x: np.ndarray, positions: np.ndarray, cfg: dict) -> np.ndarray:
    """x float32 [N, heads, head_dim] rotated by positions [3, N]: float64 arithmetic, one rounding to float32."""
    R = cfg["rotary_dim"]
    half = R // 2
    inv_freq = float(cfg["theta"]) ** (-2.0 * np.arange(half, dtype=np.float64) / R)
    angle = positions[frequency_axes(cfg)].T.astype(np.float64) * inv_freq  # [N, R/2]
    c, s = np.cos(angle)[:, None, :], np.sin(angle)[:, None, :]
    a, b = x[..., :half].astype(np.float64), x[..., half:R].astype(np.float64)
    out = np.array(x, dtype=np.float32, copy=True)  # dims >= R stay as they are
    out[..., :half] = a * c - b * s
    out[..., half:R] = b * c + a * s
    return out


# --- the bookkeeping ---------------------------------------------------------------------------------------------
class MropeRequest:
    """One request: its prompt's position table [3, P] and delta, and the cursor C."""

    def __init__(self, table: np.ndarray):
        self.table = table
        self.prompt_len = self.table.shape[1]
        self.delta = delta_of(self.table)
        self.computed = 0  # C: tokens whose KV is written
        self.chunks = 0    # prefill chunks computed

    def positions(self, begin: int, count: int, delta: int) -> np.ndarray:
        """Positions [3, count] of absolute indices [begin, begin + count): the table, then n + delta."""
        n = np.arange(begin, begin + count, dtype=np.int64)
        out = np.tile(n + delta, (3, 1))
        inside = n < self.prompt_len
        out[:, inside] = self.table[:, n[inside]]
        return out


class NumpyMrope:
    """The MRoPE side of the NumPy example: one MropeRequest per live request."""

    def __init__(self, fault: str | None = None):
        self.fault = fault
        self.cfg = None

    def setup(self, config: dict, q_heads: int, k_heads: int) -> None:
        self.cfg = dict(config)
        self.requests = {}
        self.verifying = {}       # req -> T of the last step's verify rows
        self.batch_deltas = []    # mrope_delta_by_batch_row: the live requests' deltas in admission order
        self.batch_reqs = []

    def admit(self, req: int, segments: list, cached: int = 0) -> None:
        r = self.requests[req] = MropeRequest(prompt_table(segments, self.cfg))
        r.computed = cached  # a prefix-cache hit: those tokens' KV exists
        self.batch_reqs.append(req)
        self.batch_deltas.append(r.delta)

    def release(self, req: int) -> None:
        del self.requests[req]
        i = self.batch_reqs.index(req)
        del self.batch_reqs[i], self.batch_deltas[i]

    def _delta(self, place: int, r: MropeRequest) -> int:
        """The delta a row reads: its request's, or under mrope_delta_by_batch_row the array entry of its place."""
        if self.fault == "mrope_delta_by_batch_row":
            return self.batch_deltas[place] if place < len(self.batch_deltas) else 0
        return r.delta

    def step(self, rows: list, q: np.ndarray, k: np.ndarray) -> tuple:
        N = q.shape[0]
        positions = np.zeros((3, N), dtype=np.int64)
        index = np.full(N, -1, dtype=np.int64)
        real = np.zeros(N, dtype=bool)
        for place, row in enumerate(rows):
            w = slice(row.token_offset, row.token_offset + row.tokens)
            if row.is_pad:
                if self.fault == "mrope_pad_takes_last_delta" and row.token_offset > 0:
                    last = positions[:, row.token_offset - 1]
                    positions[:, w] = last[:, None] + 1 + np.arange(row.tokens)
                continue
            r = self.requests[row.req]
            if row.kind == "prefill" and r.chunks == 0 and self.fault == "mrope_delta_from_chunk":
                end = r.computed + row.tokens
                r.delta = int(r.table[:, :end].max()) + 1 - end
            positions[:, w] = r.positions(r.computed, row.tokens, self._delta(place, r))
            index[w] = np.arange(r.computed, r.computed + row.tokens)
            real[w] = True
            if row.kind == "verify":
                self.verifying[row.req] = row.tokens
            else:  # prefill and decode tokens are computed (a decode token is accepted as it is computed)
                r.computed += row.tokens
                r.chunks += row.kind == "prefill"
        if self.fault == "mrope_index_from_rope":
            index[real] = positions[0, real]
        q_rot, k_rot = np.array(q, copy=True), np.array(k, copy=True)
        q_rot[real] = rotate(q[real], positions[:, real], self.cfg)
        k_rot[real] = rotate(k[real], positions[:, real], self.cfg)
        return positions, index, q_rot, k_rot

    def accept(self, pairs: list) -> None:
        for req, n in pairs:
            T = self.verifying.pop(req)
            self.requests[req].computed += T if self.fault == "mrope_verify_advances_T" else n
        self.verifying = {}


# --- the fixture op mrope.rotary ---------------------------------------------------------------------------------
def _scalar(inputs: dict, name: str):
    if name not in inputs:
        raise TargetError(name, "is missing from the command")
    return np.asarray(inputs[name]).reshape(()).item()


def _segments(inputs: dict, rule: str) -> list:
    """The protocol's segment dicts from in.segments [S, 4] (kind, a, b, c), in.second_per_grid [S] (-1: none) and
    in.frame_text (per-frame models: the text before each frame, videos in order)."""
    for name in ("in.segments", "in.second_per_grid", "in.frame_text"):
        if name not in inputs:
            raise TargetError(name, "is missing from the command")
    seg = np.asarray(inputs["in.segments"])
    spg = np.asarray(inputs["in.second_per_grid"]).reshape(-1)
    frame_text = [int(x) for x in np.asarray(inputs["in.frame_text"]).reshape(-1)]
    if seg.ndim != 2 or seg.shape[1] != 4 or spg.shape != (seg.shape[0],):
        raise TargetError("in.segments", f"must be [S, 4] beside in.second_per_grid [S], got {list(seg.shape)}")
    out, used = [], 0
    for i, (kind, a, b, c) in enumerate(seg.tolist()):
        if kind == 0:
            out.append({"type": "text", "length": a})
        elif kind in (1, 2):
            item = {"type": "image" if kind == 1 else "video", "grid": [a, b, c]}
            if kind == 2 and spg[i] >= 0:
                item["second_per_grid"] = float(spg[i])
            if kind == 2 and rule == "per-frame" and frame_text:
                item["frame_text"] = frame_text[used:used + a]
                used += a
            out.append(item)
        else:
            raise TargetError(f"in.segments[{i}]", f"unknown segment kind {kind} (0 text, 1 image, 2 video)")
    if used != len(frame_text):
        raise TargetError("in.frame_text", f"has {len(frame_text)} entries, the videos' frames take {used}")
    return out


def run_rotary_fixture(config: dict, inputs: dict) -> dict:
    """out.positions, out.delta, out.prompt_len, out.q_rot and out.k_rot of an mrope.rotary fixture (the prompt and
    in.generated tokens after it, all positions from scratch) from its in.* tensors."""
    model = config.get("model")
    if model not in VIDEO_RULES:
        raise TargetError("config.model", f"must be one of {sorted(VIDEO_RULES)}, got {model!r}")
    section = [int(x) for x in np.asarray(inputs.get("in.mrope_section", [])).reshape(-1)]
    if len(section) != 3:
        raise TargetError("in.mrope_section", "must be [3]")
    cfg = {"spatial_merge_size": int(_scalar(inputs, "in.spatial_merge_size")), "video_rule": VIDEO_RULES[model],
           "temporal_patch_size": TEMPORAL_PATCH_SIZE,
           "tokens_per_second": float(_scalar(inputs, "in.tokens_per_second")),
           "rotary_dim": int(_scalar(inputs, "in.rotary_dim")), "theta": float(_scalar(inputs, "in.rope_theta")),
           "mrope_section": section, "interleaved": bool(_scalar(inputs, "in.interleaved"))}
    request = MropeRequest(prompt_table(_segments(inputs, cfg["video_rule"]), cfg))
    N = request.prompt_len + int(_scalar(inputs, "in.generated"))
    positions = request.positions(0, N, request.delta)
    out = {"out.positions": positions, "out.delta": np.int64(request.delta),
           "out.prompt_len": np.int64(request.prompt_len)}
    for name in ("q", "k"):
        x = inputs.get("in." + name)
        if x is None:
            raise TargetError("in." + name, "is missing from the command")
        if x.ndim != 3 or x.shape[0] != N or x.shape[2] != int(_scalar(inputs, "in.head_dim")):
            raise TargetError("in." + name, f"has shape {list(x.shape)}, expected [{N}, heads, head_dim]")
        out[f"out.{name}_rot"] = rotate(np.asarray(x, dtype=np.float32), positions, cfg)
    return out
