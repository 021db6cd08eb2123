"""`curve.png`: RL's per-step training success, with the three evaluations of the fixed set as
points with their Wilson 95% intervals (matplotlib, Agg, as `sera report`'s plots)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # before pyplot: headless

import matplotlib.pyplot as plt  # noqa: E402

from sera.pipeline.stats import Rate  # noqa: E402
from sera.reports.train_stats import Curve  # noqa: E402


def eval_positions(labels: list[str], steps: tuple[int, ...]) -> dict[str, float]:
    """Where each evaluation sits on the step axis: those before RL to the left of step 0, the
    one after RL right of the last step."""
    last = max(steps) + 1 if steps else 0
    before = [label for label in labels if label != "after RL"]
    positions = {label: float(i - len(before)) for i, label in enumerate(before)}
    if "after RL" in labels:
        positions["after RL"] = float(last)
    return positions


def curve_plot(curve: Curve | None, evals: dict[str, Rate], path: Path, *, temperature: float) -> Path:
    """Training success per RL step at sampling `temperature` (× = a skipped step, no update) and
    the evaluations, each a point with its interval, labelled on the x axis; returns `path`."""
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    steps = curve.steps if curve is not None else ()
    if curve is not None and steps:
        ys = [float("nan") if v is None else 100 * v for v in curve.success]
        (line,) = ax.plot(steps, ys, marker=".", label=f"RL step: training trees solved (temperature {temperature:g})")
        skipped = [(s, y) for s, y, t in zip(steps, ys, curve.trained) if not t]
        if skipped:
            ax.scatter([s for s, _ in skipped], [y for _, y in skipped], marker="x", s=40, color=line.get_color(),
                       zorder=3, label="skipped step (no update)")
    positions = eval_positions(list(evals), steps)
    shown = False
    for label, rate in evals.items():
        if rate.n == 0 or rate.low is None or rate.high is None:
            continue
        share = 100 * rate.k / rate.n
        ax.errorbar([positions[label]], [share], yerr=[[share - 100 * rate.low], [100 * rate.high - share]],
                    fmt="o", capsize=4, color="black", label=None if shown else "fixed-set evaluation (greedy), Wilson 95%")
        shown = True
    ticks = {float(s): str(s) for s in steps}
    ticks.update({positions[label]: f"{label}\n{rate.k}/{rate.n}" for label, rate in evals.items()})
    ax.set_xticks(list(ticks), list(ticks.values()), fontsize="small")
    ax.set_ylim(-5, 105)
    ax.set_xlabel("RL step")
    ax.set_ylabel("success (%)")
    ax.set_title("training success per RL step and the fixed-set evaluations", fontsize="medium")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize="small", loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=1, frameon=False)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=100, format="png")
    plt.close(fig)
    return path
