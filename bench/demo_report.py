#!/usr/bin/env python3
"""The demo's report: plots of `demo.json` (weft-bench demo) and one
self-contained report.html with the PNGs inline.

Usage: demo_report.py <demo.json> <out_dir>

Writes <out_dir>/speed.png, throughput.png, node_delay.png and
report.html, and prints their paths.
"""

import base64
import html
import json
import math
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

COLORS = {"tor": "#7d4698", "weft-1": "#2a9d8f", "weft-2": "#e76f51"}


CAPTIONS = {
    "speed.png": "Throughput and CPU cost at the same CPU cap",
    "throughput.png": "Throughput over the run",
    "node_delay.png": "How long cells waited inside weft (its own histogram, "
                      "from socket in to socket out)",
}


def color(label):
    return COLORS.get(label, "#555555")


def per_bucket(buckets):
    """Cumulative (le_ms, count) pairs -> [(lower, upper, count)] per bucket."""
    out = []
    prev_le, prev_c = 0.0, 0.0
    for le, c in buckets:
        le = math.inf if le is None else le
        n = max(0.0, (c or 0.0) - prev_c)
        out.append((prev_le, le, n))
        prev_le, prev_c = le, (c or 0.0)
    return out


def speed_plot(d, path):
    rows = d["speed"]
    labels = [r["label"] for r in rows]
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, key, title in [
        (axes[0], "mib_s", "MiB/s relayed (higher is better)"),
        (axes[1], "cpu_s_per_gib", "CPU-seconds per GiB (lower is better)"),
    ]:
        vals = [r[key] for r in rows]
        bars = ax.bar(labels, vals, color=[color(label) for label in labels])
        tor = next((r[key] for r in rows if r["label"] == "tor"), None)
        for b, v in zip(bars, vals):
            note = f"{v:.1f}" if key == "mib_s" else f"{v:.2f}"
            if tor:
                note += f"\n({v / tor:.2f}x tor)"
            ax.annotate(note, (b.get_x() + b.get_width() / 2, v), ha="center",
                        va="bottom", fontsize=9)
        ax.set_title(title, fontsize=10)
        ax.set_ylim(0, max(vals + [1e-9]) * 1.3)
    fig.suptitle(f"Same bulk load, each relay capped at {d['cpu_quota']} CPU")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def throughput_plot(d, path):
    fig, ax = plt.subplots(figsize=(10, 3.5))
    for r in d["speed"]:
        s = r["samples"]
        if s:
            ax.plot([x[0] for x in s], [x[1] for x in s], label=r["label"],
                    color=color(r["label"]))
    ax.set_xlabel("seconds since the load started (warm-up included)")
    ax.set_ylabel("MiB/s (both directions)")
    ax.set_title("Throughput over time")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def delay_plot(d, path):
    series = []
    roles = d.get("roles")
    if roles and roles.get("node_delay_buckets_ms"):
        series.append(("weft-2, roles network (light traffic)", "#264653",
                       roles["node_delay_buckets_ms"]))
    for r in d["speed"]:
        if r["node_delay_buckets_ms"]:
            series.append((f"{r['label']}, bulk load at the cap", color(r["label"]),
                           r["node_delay_buckets_ms"]))
    fig, ax = plt.subplots(figsize=(10, 4))
    width = 0.8 / max(1, len(series))
    per = [per_bucket(b) for _, _, b in series]
    # Only the buckets from the first to the last that any series used.
    used = [j for pb in per for j, (_, _, n) in enumerate(pb) if n > 0]
    lo_j, hi_j = (min(used), max(used)) if used else (0, -1)
    names = None
    for i, ((label, c, _), pb) in enumerate(zip(series, per)):
        total = sum(n for _, _, n in pb) or 1.0
        pb = pb[lo_j:hi_j + 1]
        if names is None:
            names = [f"≤{when(u)}" if u != math.inf else f">{when(lo)}" for lo, u, _ in pb]
        xs = [j + i * width for j in range(len(pb))]
        ax.bar(xs, [100.0 * n / total for _, _, n in pb], width=width, label=label,
               color=c)
    if names:
        ax.set_xticks([j + width * (len(series) - 1) / 2 for j in range(len(names))])
        ax.set_xticklabels(names, rotation=45, fontsize=8)
    ax.set_xlabel("node delay (socket in to socket out, measured by weft)")
    ax.set_ylabel("% of cells")
    ax.set_title("weft's node-delay histogram (its MetricsPort)")
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def when(ms):
    """A bucket bound in ms, as a person reads it."""
    if ms < 1.0:
        return f"{ms * 1000:.0f} µs"
    if ms < 1000.0:
        return f"{ms:.3g} ms"
    return f"{ms / 1000:.3g} s"


def img(path):
    with open(path, "rb") as f:
        b = base64.b64encode(f.read()).decode("ascii")
    return f'<img alt="{html.escape(os.path.basename(path))}" src="data:image/png;base64,{b}">'


def report(d, pngs, path):
    e = html.escape
    rows = []
    roles = d.get("roles")
    if roles:
        for c in roles["checks"]:
            mark = "ok" if c["ok"] else "FAIL"
            rows.append(f'<tr class="{mark}"><td>{mark}</td><td>{e(c["role"])}</td>'
                        f'<td>{e(c["checked"])}</td></tr>')
    tor = next((r for r in d["speed"] if r["label"] == "tor"), None)
    speed = []
    for r in d["speed"]:
        x = f"{r['mib_s'] / tor['mib_s']:.2f}x" if tor and tor["mib_s"] else "-"
        c = (f"{r['cpu_s_per_gib'] / tor['cpu_s_per_gib']:.2f}"
             if tor and tor["cpu_s_per_gib"] else "-")
        up, down = r["delay_up_ms"], r["delay_down_ms"]
        speed.append(
            f"<tr><td>{e(r['label'])}</td><td>{r['mib_s']:.1f}</td><td>{x}</td>"
            f"<td>{r['cpu_s_per_gib']:.2f}</td><td>{c}</td>"
            f"<td>{up[0]:.1f} / {up[1]:.1f}</td><td>{down[0]:.1f} / {down[1]:.1f}</td>"
            f"<td>{r['corrupt_cells']}</td></tr>")
    m = d["machine"]
    roles_html = ""
    if roles:
        roles_html = (
            f"<h2>weft in each of its roles</h2><p>One private network on loopback: "
            f"3 stock authorities, 4 stock relays, 1 stock exit, 2 stock clients, a stock "
            f"onion service, and weft with 2 workers (ready after {roles['ready_s']:.0f} s, "
            f"roles done after {roles['total_s']:.0f} s).</p>"
            f"<table><tr><th></th><th>role</th><th>what was checked</th></tr>"
            f"{''.join(rows)}</table>")
    doc = f"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>weft demo {e(d['date'])}</title>
<style>
body {{ font-family: sans-serif; max-width: 1050px; margin: 2em auto; color: #222; }}
table {{ border-collapse: collapse; margin: 1em 0; }}
td, th {{ border: 1px solid #ccc; padding: 4px 8px; text-align: left; vertical-align: top; }}
tr.ok td:first-child {{ color: #2a7d2a; font-weight: bold; }}
tr.FAIL td:first-child {{ color: #b00020; font-weight: bold; }}
img {{ max-width: 100%; display: block; margin: 1em 0; }}
</style></head><body>
<h1>weft demo</h1>
<p>{e(d['date'])}; {m['cpus']} CPUs ({e(m['model'])}), Linux {e(m['kernel'])}; {e(d['tor_version'])}.</p>
{roles_html}
<h2>Speed beside stock tor</h2>
<p>The same bulk load (weft-bench's generators and sinks: 4 connections &times; 8 circuits,
both directions, every cell checked) through stock tor, weft with 1 worker and weft with 2,
each relay capped at {d['cpu_quota']} CPU by a cgroup, so the relay and not the load is the
bottleneck. CPU-seconds per GiB come from /proc. Node delay here is measured by the load
(stamp to arrival, the loopback floor included).</p>
<table><tr><th>relay</th><th>MiB/s</th><th>&times; tor</th><th>CPU-s/GiB</th><th>&divide; tor</th>
<th>delay p50 / p99 up (ms)</th><th>down (ms)</th><th>damaged cells</th></tr>
{''.join(speed)}</table>
{''.join(f"<h3>{e(CAPTIONS.get(os.path.basename(p), ''))}</h3>{img(p)}" for p in pngs)}
<p>Reproduce: <code>bash scripts/demo.sh</code>; longer, paired runs:
<code>target/release/weft-bench compare</code> (docs/perf.md).</p>
</body></html>
"""
    with open(path, "w") as f:
        f.write(doc)


def main():
    src, out = sys.argv[1], sys.argv[2]
    with open(src) as f:
        d = json.load(f)
    os.makedirs(out, exist_ok=True)
    pngs = []
    for name, fn in [("speed.png", speed_plot), ("throughput.png", throughput_plot),
                     ("node_delay.png", delay_plot)]:
        p = os.path.join(out, name)
        fn(d, p)
        pngs.append(p)
    page = os.path.join(out, "report.html")
    report(d, pngs, page)
    for p in pngs + [page]:
        print(p)


if __name__ == "__main__":
    main()
