"""`report.md`, `report.json` and `curve.png` of a job directory, every number read from its files.

Sources: `pipeline.json` (phases, invocations: command, config hash, git commit, machine,
budget), `config.yaml`, each evaluation folder (`summary.json` and trees, `sera.pipeline.evalstats`),
`sft/metrics.jsonl` and `sft/demos/`, `rl/metrics.jsonl` and `rl/init_from.json` (read with
`sera report`'s loader, `sera.reports.load_train`). The statistics come from `sera.stats`, the
tables and plot from `sera.reports.tables` / `sera.reports.plots`, and the summary sentences from
`sera.pipeline.summary`, worded by the one rule in `sera.reports.wording`.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sera.envs.registry import get_env
from sera.eval.store import write_atomically
from sera.pipeline.evalset import eval_split
from sera.pipeline.evalstats import EvalReadError, EvalStats, eval_stats
from sera.pipeline.phases import EVAL_PHASES, LABELS, PHASES, output_present
from sera.pipeline.record import JobRecord
from sera.pipeline.summary import Facts, eval_sampling, summary_sentences
from sera.reports.load_train import load_train
from sera.reports.plots import curve_plot
from sera.reports.tables import count, fixed, markdown_table, num, paired, share, share_value, table7_train
from sera.reports.train_stats import curve, stage_times
from sera.reports.wording import bounds
from sera.stats import PairedChange, Rate
from sera.train.config import TrainConfig, load_config
from sera.types import RolloutTree

REPORT_VERSION = 1
"""Version of `report.json`'s layout."""


@dataclass
class SftSummary:
    """The SFT phase as the report shows it."""

    epochs: list[dict[str, Any]]
    """Per evaluation line of `metrics.jsonl`: `epoch` (0 = before training), `train_loss`, `heldout_nll`, `heldout_tokens`."""
    train_datums: int | None
    """Demonstration datums trained on."""
    demos: dict[str, dict[str, int]]
    """Demonstration counts (`train`, `val`: trees, successful trees, agents, ...)."""
    trees: int
    """Demonstration trees (each root outcome checked by the verifier to keep or drop it)."""
    verifier_calls: int
    """Verifier label calls recorded in the demonstration trees."""
    judge_calls: int
    """Judge calls recorded in the demonstration trees."""


@dataclass
class RlSummary:
    """The RL phase as the report shows it."""

    rows: list[dict[str, Any]]
    """Per step: step, stage, trained, skip reason, loss, grad norm, ratio statistics, success."""
    steps: int
    """Rounds recorded in `metrics.jsonl`."""
    updates: int
    """Rounds that made an optimizer update."""
    trees: int
    """Training trees sampled (each root outcome checked by the verifier: the reward)."""
    verifier_calls: int
    """Verifier label calls (counterfactual branches)."""
    judge_calls: int
    """External judge calls."""
    init_from: str | None
    """The checkpoint RL started from (`init_from.json`), None for the base model."""
    stage_table: str
    """Markdown: seconds per stage and per part (`sera report`'s Table 7 for one run)."""


@dataclass
class ReportData:
    """Everything the report shows."""

    out: str
    """The job directory."""
    config: dict[str, Any]
    """Method, environment, model, the fixed evaluation set's settings."""
    invocations: list[dict[str, Any]]
    """Every run of the job (command, config hash, git, machine, budget, time used)."""
    phases: list[dict[str, Any]]
    """`pipeline.json`'s phase records."""
    evaluations: dict[str, EvalStats] = field(default_factory=dict)
    """By phase name, for the evaluations whose output exists."""
    sft: SftSummary | None = None
    """The SFT phase, when its folder holds a run."""
    rl: RlSummary | None = None
    """The RL phase, when its folder holds a run."""
    summary: list[str] = field(default_factory=list)
    """The generated sentences."""
    problems: list[str] = field(default_factory=list)
    """Outputs that could not be read, one line each."""


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) else None


def sft_summary(folder: Path) -> SftSummary:
    """The SFT run in `folder`: NLL per epoch, demonstrations and their supervision."""
    run, problems = load_train(folder)
    if run is None:
        raise EvalReadError(f"{folder}: no readable SFT run ({'; '.join(p.line() for p in problems)})")
    evals = [s for s in run.steps if s.get("kind") == "eval"]
    epochs = [{"epoch": s.get("epoch"), "train_loss": _number(s.get("loss")), "heldout_nll": _number(s.get("heldout_nll")),
               "heldout_tokens": s.get("heldout_tokens")} for s in evals]
    first = evals[0] if evals else {}
    trees, verifier, judge = 0, 0, 0
    for path in sorted((folder / "demos").glob("*/*.json")):
        counters = RolloutTree.from_json(path.read_bytes()).counters
        trees += 1
        verifier += counters.get("verifier_calls", 0)
        judge += counters.get("judge_calls", 0)
    return SftSummary(epochs=epochs, train_datums=first.get("train_datums"),
                      demos={"train": dict(first.get("demos/train") or {}), "val": dict(first.get("demos/val") or {})},
                      trees=trees, verifier_calls=verifier, judge_calls=judge)


def rl_summary(folder: Path) -> RlSummary:
    """The RL run in `folder`: one row per step, totals, stage wall clock."""
    run, problems = load_train(folder)
    if run is None:
        raise EvalReadError(f"{folder}: no readable RL run ({'; '.join(p.line() for p in problems)})")
    rows = []
    for s in sorted(run.steps, key=lambda r: r["step"]):
        trees = int(s.get("trees") or 0)
        success = _number(s.get("root_success"))
        rows.append({
            "step": s["step"], "stage": s.get("stage"), "trained": bool(s.get("trained")), "skip_reason": s.get("skip_reason"),
            "loss": _number(s.get("loss")), "grad_norm": _number(s.get("grad_norm")),
            "ratio_mean": _number(s.get("learner/ratio_mean")), "ratio_max": _number(s.get("learner/ratio_max")),
            "ratio_outside": _number(s.get("learner/ratio_outside")),
            "success": Rate.of(round(success * trees), trees) if success is not None and trees else Rate.of(0, 0),
        })
    init = folder / "init_from.json"
    init_from = json.loads(init.read_text(encoding="utf-8")).get("identity") if init.is_file() else None
    return RlSummary(rows=rows, steps=len(rows), updates=sum(r["trained"] for r in rows),
                     trees=sum(r["success"].n for r in rows), verifier_calls=run.counters.get("verifier_calls", 0),
                     judge_calls=run.counters.get("judge_calls", 0), init_from=init_from,
                     stage_table=table7_train(stage_times(run)) if run.steps else "")


def collect(out: Path) -> ReportData:
    """Read the job directory."""
    record = JobRecord.load(out / "pipeline.json")
    cfg: TrainConfig = load_config(out / "config.yaml")
    p = cfg.pipeline
    data = ReportData(
        out=str(out),
        config={"method": cfg.method.name, "environment": cfg.environment.name, "model": cfg.model.name,
                "dtype": cfg.model.dtype, "train_difficulty": cfg.environment.difficulty,
                "eval_split": eval_split(cfg, get_env(cfg.environment.name)),
                "eval_difficulty": p.eval_difficulty, "eval_tasks": p.eval_tasks,
                "eval_samples": p.eval_samples, "eval_temperature": p.eval_temperature,
                "eval_base_samples": p.eval_base_samples,
                "eval_max_calls": p.eval_max_calls or cfg.rollout.max_calls_per_agent,
                "max_tokens": cfg.rollout.max_tokens, "max_depth": cfg.rollout.max_depth,
                "repetition_stop": cfg.rollout.repetition_stop,
                "sft": p.sft, "rl": p.rl, "max_steps": cfg.steps.max_steps,
                "batch": f"{cfg.rollout.batch_tasks} tasks x K={cfg.rollout.trees_per_task}",
                "train_temperature": cfg.rollout.agent_temperature, "train_split": cfg.environment.split,
                "sft_expert": cfg.sft.expert, "sft_tasks": cfg.sft.train_tasks, "sft_epochs": cfg.sft.epochs,
                "sft_split": cfg.sft.split or cfg.environment.split,
                "sft_difficulty": cfg.sft.difficulty or cfg.environment.difficulty,
                "trees_per_task": cfg.rollout.trees_per_task,
                "max_offpolicy_versions": cfg.steps.max_offpolicy_versions},
        invocations=record.invocations,
        phases=[dataclasses.asdict(record.phase(name)) for name in PHASES],
    )
    for name in PHASES:
        if not (out / name).is_dir():
            continue
        try:
            if name in EVAL_PHASES and output_present(out, name):
                data.evaluations[name] = eval_stats(out / name)
            elif name == "sft" and (out / name / "metrics.jsonl").is_file():
                data.sft = sft_summary(out / name)
            elif name == "rl" and (out / name / "metrics.jsonl").is_file():
                data.rl = rl_summary(out / name)
        except (EvalReadError, ValueError, OSError) as exc:
            data.problems.append(f"{out / name}: {str(exc).splitlines()[0]}")
    data.summary = summary_sentences(facts(data, record))
    return data


def facts(data: ReportData, record: JobRecord) -> Facts:
    """What the summary sentences are made of: only evaluations recorded done."""
    done = [n for n in PHASES if n in data.evaluations and record.phase(n).status == "done"]
    nll = [e["heldout_nll"] for e in data.sft.epochs if e["heldout_nll"] is not None] if data.sft else []
    rl = record.phase("rl")
    return Facts(
        success={LABELS[n]: data.evaluations[n].success for n in done},
        paired={(LABELS[a], LABELS[b]): PairedChange.of(data.evaluations[a].outcomes, data.evaluations[b].outcomes)
                for a, b in zip(done, done[1:])},
        valid_replies={LABELS[n]: data.evaluations[n].replies for n in done},
        nll=nll,
        rl_status=rl.status if rl.status != "pending" else None,
        rl_note=rl.error or rl.detail.get("reason"),
        rl_steps=data.rl.steps if data.rl else None, rl_updates=data.rl.updates if data.rl else None,
        rl_stopped_by=rl.detail.get("stopped_by") if rl.status == "done" else None,
        infra_failures=sum(e.infra_failures for e in data.evaluations.values()),
        tasks=data.config["eval_tasks"] if done else None,
        samples=data.config.get("eval_samples", 1), temperature=data.config.get("eval_temperature", 0.0),
        base_samples=data.config.get("eval_base_samples"),
        trees_per_task=data.config.get("trees_per_task") if data.config.get("rl") else None,
    )


def ahead_note(versions: int | None) -> str:
    """How RL's rounds were sampled, when not strictly on-policy (`steps.max_offpolicy_versions`)."""
    if not versions:
        return ""
    return ("; the round after an update is sampled during it and trains one policy version behind "
            f"(steps.max_offpolicy_versions {versions}; the paper's SERA samples on-policy)")


def expert_version(name: str | None) -> str:
    """` (short-v1)` for an expert whose replies are versioned, else empty."""
    if name == "short":
        from sera.envs.textcraft.short_expert import EXPERT_VERSION

        return f" ({EXPERT_VERSION})"
    return ""


# -- Markdown ----------------------------------------------------------------------------------------


def render(data: ReportData) -> str:
    """The Markdown page."""
    c = data.config
    lines = [f"# Main job report: `{data.out}`", "", "## Summary", ""]
    lines += [f"- {s}" for s in data.summary] or ["- No evaluation has completed yet."]
    if data.problems:
        lines += ["", "**Outputs that could not be read:**", *(f"- {p}" for p in data.problems)]
    lines += ["", "## Run", ""]
    last = data.invocations[-1] if data.invocations else {}
    m = last.get("machine") or {}
    git = last.get("git") or {}
    used = last.get("used_s")
    deadline = last.get("rl_deadline_s")
    run_rows = [
        ["command", f"`{last.get('command', '?')}`"],
        ["config hash", f"`{last.get('config_hash', '?')}`"],
        ["git commit", f"`{git.get('commit')}`" + (" (uncommitted changes)" if git.get("dirty") else "")],
        ["machine", f"{m.get('cpu', '?')}; native bf16: {'yes' if m.get('native_bf16') else 'no'}; "
                    f"{m.get('cores', '?')} cores ({m.get('usable_cores', '?')} usable), torch threads "
                    f"{m.get('torch_threads', '?')}" + (f"; GPU {m['gpu']}" if m.get("gpu") else "")],
        ["method / environment / model", f"{c['method']} / {c['environment']} ({c['train_difficulty'] or 'all'} training tasks) "
                                         f"/ {c['model']} ({c['dtype']})"],
        ["fixed evaluation set", f"the first {c['eval_tasks']} tasks of split {c['eval_split']}, band "
                                 f"{c['eval_difficulty'] or 'all'}; {eval_sampling(c.get('eval_samples', 1), c.get('eval_temperature', 0.0), c.get('eval_base_samples'))}; at most {c['eval_max_calls']} "
                                 f"policy calls per agent, {c['max_tokens']} tokens per call, depth ≤ {c['max_depth']}"
                                 + (f"; a reply ends once its last {c['repetition_stop']} tokens loop"
                                    if c.get("repetition_stop") else "")],
        ["training tasks / SFT", f"RL on split {c.get('train_split', '?')}, band {c['train_difficulty'] or 'all'}; SFT on "
                                 f"{c.get('sft_tasks', '?')} tasks of split {c.get('sft_split', c.get('train_split', '?'))}, "
                                 f"band {c.get('sft_difficulty', c['train_difficulty']) or 'all'}, demonstrated by the "
                                 f"{c.get('sft_expert', 'default')} expert"
                                 f"{expert_version(c.get('sft_expert'))}, {c.get('sft_epochs', '?')} epoch(s)"
                                 if c["sft"] else "SFT off (pipeline.sft false)"],
        ["RL", f"{c['batch']} per step, at most {c['max_steps']} updates{ahead_note(c.get('max_offpolicy_versions'))}"
               if c["rl"] else "off (pipeline.rl false)"],
        ["budget (this run)", f"{last.get('budget_minutes', '?')} min; used {num(used / 60, 1) if used is not None else '?'} "
                              f"min before the report" + (f"; RL deadline at {deadline / 60:.1f} min" if deadline is not None else "")],
    ]
    lines.append(markdown_table(["", ""], run_rows))
    if len(data.invocations) > 1:
        lines += ["", f"The job ran {len(data.invocations)} times (resumed):", ""]
        lines.append(markdown_table(["started (UTC)", "command", "config hash", "commit"], [
            [i.get("started_at", "?"), f"`{i.get('command', '?')}`", f"`{str(i.get('config_hash', '?'))[:12]}`",
             f"`{str((i.get('git') or {}).get('commit'))[:12]}`"] for i in data.invocations]))
    lines += ["", "## Phases", "", markdown_table(["phase", "status", "started (UTC)", "ended (UTC)", "wall", "note"], [
        [p["name"], p["status"], p["started_at"] or "—", p["ended_at"] or "—",
         f"{p['wall_s']:.1f} s" if p["wall_s"] is not None else "—", _phase_note(p)] for p in data.phases])]
    lines += ["", "## Success on the fixed held-out set", ""]
    if data.evaluations:
        names = list(data.evaluations)
        lines.append(markdown_table(
            ["evaluation", "solved", "share", "Wilson 95% CI", "vs the previous, same tasks (paired exact test)",
             "infrastructure failures (not counted)", "other errors (counted as failures)"],
            [[f"{n} ({LABELS[n]})", f"{e.success.k}/{e.success.n}", share(e.success), bounds(e.success) if e.success.n else "—",
              paired(PairedChange.of(data.evaluations[names[i - 1]].outcomes, e.outcomes)) if i else "—", str(e.infra_failures), str(e.errors)]
             for i, (n, e) in enumerate(data.evaluations.items())]))
        lines += ["", "## Behaviour in the evaluations", "",
                  "Shares are k/n with Wilson 95% intervals. Tool errors are over parsed replies; rubric validity is over "
                  "children a frozen rubric was written for (— when none was).", ""]
        lines.append(markdown_table(
            ["evaluation", "parseable replies", "tool errors", "agents per tree", "trees delegating", "valid rubrics"],
            [[n, count(e.replies), count(e.tool_errors), fixed(e.agents_per_tree, 2), count(e.delegation), count(e.rubrics)]
             for n, e in data.evaluations.items()]))
    else:
        lines.append("No evaluation has output yet.")
    if data.sft is not None:
        s = data.sft
        lines += ["", "## SFT", "", f"{s.train_datums} demonstration datums; demonstrations: train {_counts(s.demos['train'])}; "
                  f"held-out {_counts(s.demos['val'])}. Held-out NLL is teacher-forced on the held-out tasks' "
                  f"expert demonstrations (nats per trained token).", ""]
        lines.append(markdown_table(["epoch", "train loss", "held-out NLL", "held-out tokens"], [
            [str(e["epoch"]), fixed(e["train_loss"], 4), fixed(e["heldout_nll"], 4), str(e["heldout_tokens"])] for e in s.epochs]))
    if data.rl is not None:
        r = data.rl
        lines += ["", "## RL steps", "", f"From {r.init_from or 'the base model'}; {r.updates} updates in {r.steps} steps. "
                  f"Success is over the step's training trees (temperature {c['train_temperature']:g}), not the fixed set. "
                  f"Ratios are the learner's importance ratios against the sampler's log-probabilities.", ""]
        lines.append(markdown_table(
            ["step", "stage", "update", "loss", "grad norm", "ratio mean", "ratio max", "outside [0.9, 1.1]", "success"],
            [[str(w["step"]), str(w["stage"]), "trained" if w["trained"] else f"skipped: {w['skip_reason']}",
              fixed(w["loss"], 4), fixed(w["grad_norm"], 3), fixed(w["ratio_mean"], 4), fixed(w["ratio_max"], 3),
              share_value(w["ratio_outside"]), f"{w['success'].k}/{w['success'].n}"] for w in r.rows]))
        if r.stage_table:
            lines += ["", "Wall seconds per RL stage:", "", r.stage_table]
    lines += ["", "## Supervision spent", "", "Trees verified: root outcomes the programmatic verifier checked (the "
              "evaluation's score, SFT's keep-or-drop, RL's reward). Verifier label calls: labels of counterfactual "
              "branches (rubric training). Judge calls: an external model's verdicts.", ""]
    lines.append(markdown_table(["phase", "trees verified", "verifier label calls", "judge calls"], _supervision(data)))
    lines += ["", "## Learning curve", "", "![training success per RL step and the fixed-set evaluations](curve.png)", ""]
    return "\n".join(lines)


def _counts(counts: dict[str, int]) -> str:
    return f"{counts.get('successful_trees', 0)}/{counts.get('trees', 0)} solved by the expert" if counts else "—"


def _phase_note(p: dict[str, Any]) -> str:
    if p["error"]:
        return ("infrastructure: " if p["infra"] else "") + p["error"]
    d = p["detail"] or {}
    if p["status"] == "skipped":
        return str(d.get("reason", ""))
    if p["name"] == "rl" and d:
        return f"{d.get('updates')} updates in {d.get('steps')} steps" + (f", stopped by {d['stopped_by']}" if d.get("stopped_by") else "") \
            + (", resumed" if d.get("resumed") else "")
    if p["name"] == "sft" and d:
        return f"{d.get('steps')} steps"
    if d.get("backend"):  # an evaluation: what sampled it (pipeline.eval_backend)
        return {"vllm": "sampled by a vLLM server", "inprocess": "sampled in process"}.get(d["backend"], d["backend"])
    return ""


def _supervision(data: ReportData) -> list[list[str]]:
    rows = []
    for name in PHASES:
        if name in data.evaluations:
            e = data.evaluations[name]
            rows.append([name, str(e.trees), str(e.verifier_calls), str(e.judge_calls)])
        elif name == "sft" and data.sft is not None:
            rows.append([name, str(data.sft.trees), str(data.sft.verifier_calls), str(data.sft.judge_calls)])
        elif name == "rl" and data.rl is not None:
            rows.append([name, str(data.rl.trees), str(data.rl.verifier_calls), str(data.rl.judge_calls)])
    return rows


def write_report(out: Path) -> tuple[Path, Path, Path]:
    """Write `report.md`, `report.json` and `curve.png` into `out`; returns their paths."""
    data = collect(out)
    curve_path = curve_plot(curve(load_train(out / "rl")[0], "rl") if data.rl is not None else None,  # type: ignore[arg-type]
                            {LABELS[n]: e.success for n, e in data.evaluations.items()}, out / "curve.png",
                            temperature=data.config["train_temperature"])
    json_path = out / "report.json"
    write_atomically(json_path, json.dumps({"version": REPORT_VERSION, **dataclasses.asdict(data)}, indent=1, default=str))
    md_path = out / "report.md"
    write_atomically(md_path, render(data))
    return md_path, json_path, curve_path
