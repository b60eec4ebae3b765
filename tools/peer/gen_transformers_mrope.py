"""Peer "mrope.rotary" fixtures from HF transformers' multimodal rope code for Qwen2-VL, Qwen2.5-VL, Qwen3-VL and
Qwen3.5.

For each model one request (text, an image, a video, text) becomes a token sequence with mm_token_type_ids
(0 text, 1 image, 2 video; Qwen3-VL / Qwen3.5 videos are laid out per frame with timestamp text before each
frame, as their processors do). Positions come from <Model>Model.get_rope_index (prompt) and
<Model>Model.compute_3d_position_ids (decode tokens, from the cached rope_deltas); cos/sin from the model's
text rotary embedding class (released rope_theta / mrope_section / partial rotary) and the rotation from the
module's apply_rotary_pos_emb, all in fp32. The methods are called on a small stand-in object that carries
the model config (no weights are built).

The requests avoid the two places where transformers 5.x departs from the canonical rule (a video with more
temporal groups than max(h, w), and fractional seconds per grid on Qwen2.5-VL): known_differences.py measures
those and docs/peer-conformance.md gives the verdict.

Run: HF_HUB_OFFLINE=1 python tools/peer/gen_transformers_mrope.py
"""

from __future__ import annotations

import math
import types

import numpy as np
import torch

import peer_common as pc
from transformers import Qwen2_5_VLConfig, Qwen2VLConfig, Qwen3_5Config, Qwen3VLConfig
from transformers.models.qwen2_5_vl import modeling_qwen2_5_vl as m25
from transformers.models.qwen2_vl import modeling_qwen2_vl as m2
from transformers.models.qwen3_5 import modeling_qwen3_5 as m35
from transformers.models.qwen3_vl import modeling_qwen3_vl as m3

# preset -> (config class, model class, rotary class, module, rope parameters, per-frame videos)
MODELS = {
    "qwen2-vl": (Qwen2VLConfig, m2.Qwen2VLModel, m2.Qwen2VLRotaryEmbedding, m2,
                 {"rope_type": "default", "rope_theta": 1e6, "mrope_section": [16, 24, 24]}, False),
    "qwen2.5-vl": (Qwen2_5_VLConfig, m25.Qwen2_5_VLModel, m25.Qwen2_5_VLRotaryEmbedding, m25,
                   {"rope_type": "default", "rope_theta": 1e6, "mrope_section": [16, 24, 24]}, False),
    "qwen3-vl": (Qwen3VLConfig, m3.Qwen3VLModel, m3.Qwen3VLTextRotaryEmbedding, m3,
                 {"rope_type": "default", "rope_theta": 5e6, "mrope_section": [24, 20, 20], "mrope_interleaved": True},
                 True),
    "qwen3.5": (Qwen3_5Config, m35.Qwen3_5Model, m35.Qwen3_5TextRotaryEmbedding, m35,
                {"rope_type": "default", "rope_theta": 1e7, "mrope_section": [11, 11, 10], "mrope_interleaved": True,
                 "partial_rotary_factor": 0.25}, True),
}

# Requests: segments in the CLI request format (docs/mrope.md); grids in patches before the 2x2 merge.
REQUESTS = {
    "qwen2-vl": [{"type": "text", "length": 5}, {"type": "image", "grid": [1, 4, 6]}, {"type": "text", "length": 3},
                 {"type": "video", "grid": [2, 4, 4]}, {"type": "text", "length": 4}],
    "qwen2.5-vl": [{"type": "text", "length": 4}, {"type": "image", "grid": [1, 6, 4]}, {"type": "text", "length": 2},
                   {"type": "video", "grid": [2, 8, 8], "second_per_grid": 1.0}, {"type": "text", "length": 3}],
    "qwen3-vl": [{"type": "text", "length": 3}, {"type": "image", "grid": [1, 4, 4]}, {"type": "text", "length": 2},
                 {"type": "video", "grid": [3, 4, 6], "frame_text": [4, 5, 5]}, {"type": "text", "length": 2}],
    "qwen3.5": [{"type": "text", "length": 6}, {"type": "video", "grid": [2, 6, 4], "frame_text": [3, 6]},
                {"type": "text", "length": 1}, {"type": "image", "grid": [1, 2, 8]}, {"type": "text", "length": 3}],
}
GENERATED = 3
S = 2  # spatial merge size of every Qwen VL model


def build_config(preset):
    cfg_cls, _, _, _, rope, _ = MODELS[preset]
    cfg = cfg_cls()
    cfg.text_config.rope_parameters = dict(rope)
    if preset == "qwen2.5-vl":
        cfg.vision_config.tokens_per_second = 2  # released configs
    assert cfg.vision_config.spatial_merge_size == S
    return cfg


def token_types(segments, per_frame):
    """mm_token_type_ids of the request, the image/video grid lists and the per-video seconds per grid."""
    types_, images, videos, spg = [], [], [], []
    for s in segments:
        if s["type"] == "text":
            types_ += [0] * s["length"]
        elif s["type"] == "image":
            t, h, w = s["grid"]
            images.append(s["grid"])
            types_ += [1] * (t * (h // S) * (w // S))
        else:
            t, h, w = s["grid"]
            videos.append(s["grid"])
            spg.append(s.get("second_per_grid", 1.0))
            if per_frame:
                for f in range(t):
                    types_ += [0] * s["frame_text"][f] + [2] * ((h // S) * (w // S))
            else:
                types_ += [2] * (t * (h // S) * (w // S))
    return types_, images, videos, spg


def positions(preset, cfg, segments):
    _, model_cls, _, _, _, per_frame = MODELS[preset]
    types_, images, videos, spg = token_types(segments, per_frame)
    n = len(types_)
    me = types.SimpleNamespace(config=cfg, rope_deltas=None)
    me.get_vision_position_ids = types.MethodType(model_cls.get_vision_position_ids, me)
    me.get_rope_index = types.MethodType(model_cls.get_rope_index, me)
    kw = dict(input_ids=torch.zeros(1, n, dtype=torch.long),
              mm_token_type_ids=torch.tensor([types_], dtype=torch.int32),
              image_grid_thw=torch.tensor(images, dtype=torch.long) if images else None,
              video_grid_thw=torch.tensor(videos, dtype=torch.long) if videos else None)
    if preset == "qwen2.5-vl":
        kw["second_per_grid_ts"] = torch.tensor(spg, dtype=torch.float32) if videos else None
    pos, delta = me.get_rope_index(**kw)
    me.rope_deltas = delta
    # Decode tokens: the model's own continuation rule with the cached rope_deltas.
    past = types.SimpleNamespace(get_seq_length=lambda: n)
    ckw = dict(input_ids=torch.zeros(1, GENERATED, dtype=torch.long), inputs_embeds=torch.zeros(1, GENERATED, 1),
               image_grid_thw=None, video_grid_thw=None, attention_mask=None, past_key_values=past)
    if preset == "qwen2.5-vl":
        ckw["second_per_grid_ts"] = None
    dec = model_cls.compute_3d_position_ids(me, **ckw)
    if dec.dim() == 3 and dec.shape[0] == 4:  # a leading text row, if a model adds one
        dec = dec[1:]
    allpos = torch.cat([pos[:, 0], dec[:, 0]], dim=1)  # [3, N]
    return allpos, int(delta.reshape(-1)[0]), n


def main():
    torch.set_num_threads(2)
    for i, preset in enumerate(MODELS):
        _, model_cls, rot_cls, module, rope, per_frame = MODELS[preset]
        cfg = build_config(preset)
        segments = REQUESTS[preset]
        pos, delta, prompt_len = positions(preset, cfg, segments)
        N = pos.shape[1]
        rot = rot_cls(cfg.text_config)
        R = rot.inv_freq.shape[0] * 2
        head_dim = int(round(R / rope.get("partial_rotary_factor", 1.0)))
        seed = 501 + i
        g = pc.torch_generator(seed)
        q = torch.randn(N, 2, head_dim, generator=g)
        k = torch.randn(N, 1, head_dim, generator=g)
        with torch.no_grad():
            cos, sin = rot(q, pos[:, None, :])  # position_ids [3, batch=1, N]
            q_rot, k_rot = module.apply_rotary_pos_emb(q.transpose(0, 1)[None], k.transpose(0, 1)[None], cos, sin)
        q_rot = q_rot[0].transpose(0, 1).contiguous()
        k_rot = k_rot[0].transpose(0, 1).contiguous()
        seg_rows, spg, frame_text = [], [], []
        for s in segments:
            kind = {"text": 0, "image": 1, "video": 2}[s["type"]]
            seg_rows.append([0, s["length"], 0, 0] if kind == 0 else [kind] + list(s["grid"]))
            spg.append(float(s["second_per_grid"]) if "second_per_grid" in s else -1.0)
            frame_text += s.get("frame_text", [])
        i64 = lambda x: (np.asarray(x, dtype=np.int64), "I64")
        f64 = lambda x: (np.asarray(x, dtype=np.float64), "F64")
        tensors = {
            "in.segments": i64(seg_rows), "in.second_per_grid": f64(spg), "in.frame_text": i64(frame_text),
            "in.generated": i64(GENERATED), "in.head_dim": i64(head_dim), "in.rotary_dim": i64(R),
            "in.spatial_merge_size": i64(S), "in.interleaved": i64(1 if rope.get("mrope_interleaved") else 0),
            "in.mrope_section": i64(rope["mrope_section"]), "in.rope_theta": f64(rope["rope_theta"]),
            "in.tokens_per_second": f64(getattr(cfg.vision_config, "tokens_per_second", 0.0) or 0.0),
            "in.q": (q, "F32"), "in.k": (k, "F32"),
            "out.positions": i64(pos.numpy()), "out.delta": i64(delta), "out.prompt_len": i64(prompt_len),
            "out.q_rot": (q_rot, "F32"), "out.k_rot": (k_rot, "F32"),
        }
        P = int(pos.abs().max())
        xmax = max(float(q.abs().max()), float(k.abs().max()))
        atol = math.sqrt(2) * xmax * (2.0 ** -22 * (P + 1) + 2.0 ** -21)
        tol = {"out.positions": "exact", "out.delta": "exact", "out.prompt_len": "exact",
               "out.q_rot": pc.rk.Tolerance("allclose", atol=atol, rtol=0.0),
               "out.k_rot": pc.rk.Tolerance("allclose", atol=atol, rtol=0.0)}
        config = {"model": preset, "request": {"segments": segments, "generated": GENERATED}}
        fns = [f"{model_cls.__module__}.{model_cls.__name__}.get_rope_index",
               f"{model_cls.__module__}.{model_cls.__name__}.compute_3d_position_ids",
               f"{rot_cls.__module__}.{rot_cls.__name__}.forward", f"{module.__name__}.apply_rotary_pos_emb"]
        note = ("positions, delta and prompt_len exact (integers). q_rot / k_rot: the project's binary32 rotary bound "
                "(reference/include/replayssm/reference/mrope_fixture.hpp, rotary_tolerance): allclose(atol = "
                "sqrt(2) max|x| (2^-22 (P + 1) + 2^-21), rtol 0) with P the largest position; transformers computes "
                "inv_freq, the angles and cos/sin in fp32, which that bound is made for.")
        notes = (f"{model_cls.__name__} methods called on a stand-in carrying {type(cfg).__name__}() with the released "
                 f"rope parameters {rope}" + (", vision tokens_per_second 2" if preset == "qwen2.5-vl" else "")
                 + "; decode positions from compute_3d_position_ids with past length = prompt length; "
                 + ("videos laid out per frame (frame_text text tokens, then the frame's h*w tokens); "
                    if per_frame else "")
                 + "q [N, 2, head_dim], k [N, 1, head_dim] standard normal.")
        pc.write(f"hf-mrope__{preset}", "mrope.rotary", config, tensors, tol, seed=seed, generator=pc.GENERATOR,
                 functions=fns, notes=notes, tolerance_note=note, subdir="transformers")


if __name__ == "__main__":
    main()
