"""Plot latency against offered load from loadgen JSON reports (open-loop poll runs) as an SVG,
with no dependencies: one line for p50 and one for p99 per target.

    python3 benches/plot_latency.py OUT.svg REPORT.json [REPORT.json ...]
"""

import json
import math
import sys

W, H, L, R, T, B = 720, 420, 70, 150, 30, 50
COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd"]


def main():
    out, paths = sys.argv[1], sys.argv[2:]
    runs = [json.load(open(p)) for p in paths]
    runs = [r for r in runs if r.get("offered_per_s")]
    by_target = {}
    for r in runs:
        by_target.setdefault(r["target"], []).append(r)
    xmax = max(r["offered_per_s"] for r in runs) * 1.05
    ymax = max(r["latency_ms"]["p99"] for r in runs)
    ytop = 10 ** math.ceil(math.log10(max(ymax, 0.1)))
    ybot = 0.1

    def x(v):
        return L + (W - L - R) * v / xmax

    def y(v):
        v = max(v, ybot)
        return T + (H - T - B) * (1 - (math.log10(v) - math.log10(ybot)) / (math.log10(ytop) - math.log10(ybot)))

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
             f'<rect width="{W}" height="{H}" fill="white"/>']
    decade = ybot
    while decade <= ytop * 1.001:
        parts.append(f'<line x1="{L}" x2="{W - R}" y1="{y(decade):.1f}" y2="{y(decade):.1f}" stroke="#ddd"/>')
        parts.append(f'<text x="{L - 6}" y="{y(decade) + 4:.1f}" text-anchor="end">{decade:g} ms</text>')
        decade *= 10
    for i in range(0, 6):
        v = xmax * i / 5
        parts.append(f'<text x="{x(v):.1f}" y="{H - B + 18}" text-anchor="middle">{v:,.0f}</text>')
    parts.append(f'<text x="{(L + W - R) / 2}" y="{H - 10}" text-anchor="middle">offered tasks/get per second (open loop)</text>')
    parts.append(f'<line x1="{L}" x2="{W - R}" y1="{H - B}" y2="{H - B}" stroke="black"/>')
    parts.append(f'<line x1="{L}" x2="{L}" y1="{T}" y2="{H - B}" stroke="black"/>')
    legend_y = T + 10
    for i, (target, rs) in enumerate(sorted(by_target.items())):
        rs.sort(key=lambda r: r["offered_per_s"])
        color = COLORS[i % len(COLORS)]
        for q, dash in (("p50", ""), ("p99", ' stroke-dasharray="6,4"')):
            pts = " ".join(f'{x(r["offered_per_s"]):.1f},{y(r["latency_ms"][q]):.1f}' for r in rs)
            parts.append(f'<polyline points="{pts}" fill="none" stroke="{color}" stroke-width="2"{dash}/>')
            for r in rs:
                parts.append(f'<circle cx="{x(r["offered_per_s"]):.1f}" cy="{y(r["latency_ms"][q]):.1f}" r="3" fill="{color}"/>')
            parts.append(f'<line x1="{W - R + 10}" x2="{W - R + 40}" y1="{legend_y}" y2="{legend_y}" stroke="{color}" stroke-width="2"{dash}/>')
            parts.append(f'<text x="{W - R + 46}" y="{legend_y + 4}">{target} {q}</text>')
            legend_y += 18
    parts.append("</svg>")
    with open(out, "w") as f:
        f.write("\n".join(parts) + "\n")


if __name__ == "__main__":
    main()
