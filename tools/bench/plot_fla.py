#!/usr/bin/env python3
"""Chart of tools/bench/fla_side_by_side.py CSVs: this project's ReplaySSM step against FLA's full-state spec
path, per layer, measured in one call on one GPU.

One row of two panels per CSV (e.g. the qwen3.5 GDN run and the kimi-linear KDA run):
  1. per-layer time against the batch size, one colour per draft window T: the ReplaySSM step (verify +
     commit, solid), FLA's full-state spec path (dashed) and, when the CSV has a `fused_step_us` column, the
     fused commit-into-verify step (dotted);
  2. FLA time / ReplaySSM step time against the batch size (above 1: ReplaySSM faster), with the targets of
     --targets marked as short horizontal ticks at batch 128 (default: 1.05 at T = 2, 1.8 at T = 4, 2.8 at
     T = 8) and the line 1.0 (never slower).

Usage: plot_fla.py OUT.png CSV[:LABEL] [CSV[:LABEL] ...] [--title TEXT] [--targets 2=1.05,4=1.8,8=2.8]
Needs matplotlib (e.g. in a virtual environment outside the repository). It draws what the CSVs hold and
nothing else: a missing column or an empty file is an error naming it.
"""
import argparse
import csv
import sys
from collections import defaultdict

NEEDED = ("batch", "T", "replayssm_step_us", "fla_spec_us")


def load(spec):
    path, _, label = spec.partition(":")
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        sys.exit(f"{path}: no rows")
    missing = [c for c in NEEDED if c not in rows[0]]
    if missing:
        sys.exit(f"{path}: missing column(s) {', '.join(missing)} (a fla_side_by_side.py --csv file is expected)")
    series = defaultdict(list)  # T -> [(batch, step, fla, fused or None)]
    for r in rows:
        fused = r.get("fused_step_us")
        series[int(r["T"])].append((int(r["batch"]), float(r["replayssm_step_us"]), float(r["fla_spec_us"]),
                                    float(fused) if fused not in (None, "") else None))
    for T in series:
        series[T].sort()
    return label or path, series


def parse_targets(text):
    out = {}
    for item in filter(None, text.split(",")):
        t, _, r = item.partition("=")
        out[int(t)] = float(r)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("png")
    ap.add_argument("csvs", nargs="+", metavar="CSV[:LABEL]")
    ap.add_argument("--title", default=None)
    ap.add_argument("--targets", default="2=1.05,4=1.8,8=2.8", help="T=ratio pairs marked at batch 128")
    args = ap.parse_args()

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    targets = parse_targets(args.targets)
    runs = [load(s) for s in args.csvs]
    fig, axes = plt.subplots(len(runs), 2, figsize=(12, 4.2 * len(runs)), squeeze=False)
    colours = {}
    for row, (label, series) in enumerate(runs):
        ax_t, ax_r = axes[row]
        for T in sorted(series):
            c = colours.setdefault(T, f"C{len(colours)}")
            pts = series[T]
            b = [p[0] for p in pts]
            ax_t.plot(b, [p[1] for p in pts], "-o", color=c, label=f"ReplaySSM step, T={T}")
            ax_t.plot(b, [p[2] for p in pts], "--s", color=c, alpha=0.7, label=f"FLA full-state, T={T}")
            ax_r.plot(b, [p[2] / p[1] for p in pts], "-o", color=c, label=f"separate, T={T}")
            fused = [(p[0], p[3], p[2]) for p in pts if p[3] is not None]
            if fused:
                ax_t.plot([f[0] for f in fused], [f[1] for f in fused], ":^", color=c, label=f"fused step, T={T}")
                ax_r.plot([f[0] for f in fused], [f[2] / f[1] for f in fused], ":^", color=c, label=f"fused, T={T}")
            if T in targets:
                ax_r.plot([110, 150], [targets[T]] * 2, "-", color=c, linewidth=3, alpha=0.5)
        for ax in (ax_t, ax_r):
            ax.set_xscale("log", base=2)
            ax.set_xlabel("batch (requests)")
            ax.grid(True, which="both", alpha=0.3)
        ax_t.set_ylabel("us per layer")
        ax_t.set_title(f"{label}: time per layer")
        ax_r.axhline(1.0, color="k", linewidth=0.8)
        ax_r.set_ylabel("FLA time / ReplaySSM time")
        ax_r.set_title(f"{label}: speedup over FLA (ticks at batch 128: targets)")
        ax_t.legend(fontsize=7, ncol=2)
        ax_r.legend(fontsize=7)
    if args.title:
        fig.suptitle(args.title)
    fig.tight_layout()
    fig.savefig(args.png, dpi=110)
    print(f"wrote {args.png}")


if __name__ == "__main__":
    main()
