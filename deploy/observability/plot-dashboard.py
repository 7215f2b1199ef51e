"""Plots every panel of the qim Grafana dashboard from a Prometheus, over a time range.

    plot-dashboard.py PROMETHEUS_URL START END OUT.png

Each panel's targets are run with /api/v1/query_range (step: the range / 200, at least 2 s) and
drawn as lines, legends from the targets' legendFormat ({{label}} filled in), one chart per
panel in the dashboard's order and rows.
"""
import json
import re
import sys
import urllib.parse
import urllib.request
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

DASHBOARD = Path(__file__).parent / "grafana" / "dashboards" / "qim.json"


def query_range(base, expr, start, end, step):
    q = urllib.parse.urlencode({"query": expr, "start": start, "end": end, "step": step})
    with urllib.request.urlopen(f"{base}/api/v1/query_range?{q}", timeout=30) as r:
        answer = json.load(r)
    if answer.get("status") != "success":
        raise SystemExit(f"query failed: {expr}: {answer}")
    return answer["data"]["result"]


def legend(fmt, labels):
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), fmt or "") or json.dumps(labels)


def main():
    base, start, end, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    step = max(2, (end - start) // 200)
    panels = [p for p in json.loads(DASHBOARD.read_text())["panels"] if p["type"] == "timeseries"]
    cols = 3
    rows = (len(panels) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(6 * cols, 3.2 * rows), squeeze=False)
    for ax, panel in zip(axes.flat, panels):
        drawn = 0
        for target in panel["targets"]:
            for series in query_range(base, target["expr"], start, end, step):
                points = [(float(t) - start, float(v)) for t, v in series["values"] if v not in ("NaN", "+Inf", "-Inf")]
                if points:
                    xs, ys = zip(*points)
                    ax.plot(xs, ys, linewidth=1, label=legend(target.get("legendFormat"), series["metric"]))
                    drawn += 1
        unit = panel.get("fieldConfig", {}).get("defaults", {}).get("unit", "")
        ax.set_title(f"{panel['title']}" + (f" ({unit})" if unit in ("s", "reqps") else ""), fontsize=10)
        ax.set_xlabel("s into the demo", fontsize=8)
        ax.tick_params(labelsize=7)
        if drawn:
            ax.legend(fontsize=6, loc="upper left")
        else:
            ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes, fontsize=9)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    fig.suptitle("qim dashboard over a demo run (panel queries against Prometheus)", fontsize=12)
    fig.tight_layout()
    fig.savefig(out, dpi=80)


if __name__ == "__main__":
    main()
