"""Every PNG the reports draw (matplotlib, Agg backend: no display needed).

- `success_plot` (`sera report`): success by difficulty (and overall, headline) of one table, one
  bar per method, error bars the std over seeds.
- `curves_plot` (`sera report`): learning curves of the training runs of one environment: root
  success and loss per step, one line per run; skipped steps (no update) are marked with crosses.
- `curve_plot` (the pipeline's `curve.png`): RL's per-step training success, with the fixed-set
  evaluations as points with their Wilson 95% intervals.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # before pyplot: headless, deterministic, no window

import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from sera.reports.aggregate import EvalTable  # noqa: E402
from sera.reports.train_stats import Curve  # noqa: E402
from sera.stats import Rate, Stat  # noqa: E402


def success_plot(table: EvalTable, path: Path) -> Path:
    """Grouped bars of success (%) per band for each row of `table`; returns `path`."""
    rules = sorted({r.headline_rule for r in table.rows if r.headline_rule})
    groups = [*table.bands, "overall"] + ([f"headline ({'/'.join(rules)})"] if rules else [])
    width = 0.8 / max(1, len(table.rows))
    fig, ax = plt.subplots(figsize=(max(6.0, 1.2 * len(groups) + 0.4 * len(table.rows)), 4.0))
    for i, row in enumerate(table.rows):
        stats: list[Stat | None] = [row.bands.get(b) for b in table.bands] + [row.overall]
        if rules:
            stats.append(row.headline)
        means = [100 * s.mean if s and s.mean is not None else 0.0 for s in stats]
        errors = [100 * s.std if s and s.std is not None else 0.0 for s in stats]
        xs = [g + (i - (len(table.rows) - 1) / 2) * width for g in range(len(groups))]
        ax.bar(xs, means, width, yerr=errors, capsize=3, label=_short(row.label))
    ax.set_xticks(range(len(groups)), groups)
    ax.set_ylim(0, 105)
    ax.set_ylabel("success (%)")
    ax.set_title(f"{table.env} / {table.source}")
    # Below the axes: a legend inside would hide bars that reach 100%.
    ax.legend(fontsize="small", loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=1, frameon=False)
    return _save(fig, path)


def curves_plot(curves: list[Curve], path: Path) -> Path:
    """Root success and loss per step of each curve (one environment); returns `path`."""
    fig, (top, bottom) = plt.subplots(2, 1, sharex=True, figsize=(7.0, 6.0))
    for c in curves:
        (line,) = top.plot(c.steps, [float("nan") if v is None else 100 * v for v in c.success], marker=".", label=_short(c.label))
        skipped = [(s, 100 * v) for s, v, t in zip(c.steps, c.success, c.trained) if not t and v is not None]
        if skipped:
            top.scatter([s for s, _ in skipped], [v for _, v in skipped], marker="x", s=40, color=line.get_color(), zorder=3)
        bottom.plot(c.steps, [float("nan") if v is None else v for v in c.loss], marker=".", color=line.get_color(), label=_short(c.label))
    if all(v is None for c in curves for v in c.loss):
        bottom.text(0.5, 0.5, "no update yet (every step skipped)", ha="center", va="center", transform=bottom.transAxes)
    bottom.xaxis.set_major_locator(MaxNLocator(integer=True))
    top.set_ylim(-5, 105)
    top.set_ylabel("root success (%)")
    top.set_title(f"{curves[0].env}: learning curves (× = skipped step, no update)")
    top.legend(fontsize="small")
    bottom.set_ylabel("loss")
    bottom.set_xlabel("step")
    return _save(fig, path)


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
    return _save(fig, path)


def _save(fig: plt.Figure, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=100, format="png")
    plt.close(fig)
    return path


def _short(label: str, limit: int = 48) -> str:
    return label if len(label) <= limit else label[: limit - 1] + "…"
