"""CPU experiment: RAO, SERA w/o D and SERA trained from one shared SFT checkpoint, compared.

    python scripts/cpu_experiment.py --out runs/cpu_experiment [--seeds 0,1] [--updates 4] ...

Every run is the main job's config (`--config`, default `configs/main/textcraft-cpu.yaml`: the
starter tier, the short expert, sampled evaluations on held-out starter tasks) with its method
swapped (`method.name`) and a shortened schedule. Steps, each recorded in OUT/experiment.json by
`sera.pipeline.record.run_phase` (a rerun skips what is done, resumes an unfinished SFT or RL from
its checkpoint and keeps an evaluation's finished trees):

1. `sft`: one SFT warm start (the config's `sft` section), shared by every run.
2. `eval/sft`: that checkpoint on the pipeline's fixed held-out set (`pipeline.eval_*`): where
   every run starts.
3. For each method and seed: `rl/<method>-s<seed>`, at most `--updates` RL updates from the SFT
   weights (`--rl-minutes` caps the wall time), and `eval/<method>-s<seed>`, its final checkpoint
   on the same set. The seed seeds RL only: every evaluation uses the config's seed, so sample k
   of a task has the same sampling seed in all of them and each run pairs with the SFT start
   (exact McNemar test, `sera.stats.PairedChange`).
4. The table (success per seed with intervals and the paired test, mean ± std over seeds,
   updates, verifier and judge calls, wall time per part) into `--doc`
   (default docs/cpu_experiment.md), with this command and the machine.

The methods' paper schedules (16 execution updates per cycle) would never leave the execution
stage in a few updates, so each method's schedule is shortened (`--schedule METHOD=SCHEDULE`,
defaults in `SCHEDULES`), keeping its stages. Validate with `--preset tiny` (the random test model).
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))  # run from a checkout without installing

from sera.pipeline.evalstats import eval_stats  # noqa: E402
from sera.pipeline.machine import git_state, machine  # noqa: E402
from sera.pipeline.phases import eval_work, finished, rl_work, sft_work  # noqa: E402
from sera.pipeline.record import JobRecord, run_phase  # noqa: E402
from sera.pipeline.report import rl_summary  # noqa: E402
from sera.pipeline.summary import eval_sampling  # noqa: E402
from sera.reports.wording import describe_count, describe_nll  # noqa: E402
from sera.reports.load_train import load_train  # noqa: E402
from sera.reports.tables import markdown_table, paired  # noqa: E402
from sera.reports.train_stats import stage_times  # noqa: E402
from sera.stats import PairedChange, Rate  # noqa: E402
from sera.train.config import ConfigError, TrainConfig, config_hash, load_config  # noqa: E402

METHODS = ("rao", "sera-no-d", "sera")
"""The methods compared (`method.name` values)."""
SCHEDULES = {
    "rao": "execution:1",
    "sera-no-d": "execution:2,rubric_generation:1",
    "sera": "execution:1,delegation:1,rubric_generation:1",
}
"""Shortened schedules with each method's stages (the paper: 16:2 and 16:2:2)."""
STAGE_PARTS = ("sampling", "update", "sync")
"""`time/<part>` metrics of the RL loop shown per run (the evaluation's wall is the fourth)."""
SFT_METHOD = "sera"
"""The method whose config makes the shared SFT checkpoint and its evaluation."""
MAIN_CONFIG = REPO / "configs" / "main" / "textcraft-cpu.yaml"


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, required=True, help="experiment folder (rerun to resume)")
    p.add_argument("--doc", type=Path, default=REPO / "docs" / "cpu_experiment.md", help="Markdown file the table is written to")
    p.add_argument("--config", type=Path, default=MAIN_CONFIG, help="the config every run starts from (default: the main job's)")
    p.add_argument("--preset", default=None, help="scale preset beneath the config (default: the config's; tiny: the random test model)")
    p.add_argument("--methods", default=",".join(METHODS), help="comma-separated methods")
    p.add_argument("--seeds", default="0,1", help="comma-separated RL seeds (at least 2 for a std)")
    p.add_argument("--updates", type=int, default=4, help="RL updates per run (a step without variance makes none; steps.max_consecutive_skips stops a run that never updates)")
    p.add_argument("--rl-minutes", type=float, default=None, help="optional wall-clock cap per RL run (then steps may differ; the table says how many)")
    p.add_argument("--schedule", action="append", default=[], metavar="METHOD=SCHEDULE",
                   help="a method's stage schedule (repeatable), e.g. sera=execution:2,delegation:1,rubric_generation:1")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="another config override for every run (repeatable)")
    return p.parse_args(argv)


def settings(args: argparse.Namespace) -> dict[str, Any]:
    """What the experiment's results depend on (a rerun with other settings is refused)."""
    keep = {k: v for k, v in vars(args).items() if k not in ("out", "doc")}
    return json.loads(json.dumps(keep, default=str))


def schedules(args: argparse.Namespace) -> dict[str, str]:
    out = dict(SCHEDULES)
    for item in args.schedule:
        method, eq, schedule = item.partition("=")
        if not eq or not schedule:
            raise SystemExit(f"error: --schedule {item!r} is not METHOD=SCHEDULE")
        out[method] = schedule
    return out


def config(args: argparse.Namespace, method: str, seed: int | None) -> TrainConfig:
    """The run's config: `--config` with the method, its schedule, `--updates` and `--set`; `seed`
    None keeps the file's seed (the evaluations' seed)."""
    keys = [f"method.name={method}", f"steps.max_steps={args.updates}", f"checkpoint.every={args.updates}"]
    schedule = schedules(args).get(method)
    if schedule:
        keys.append(f"method.overrides.schedule={schedule}")
    keys += [*args.set, *([f"seed={seed}"] if seed is not None else [])]
    return load_config(args.config, preset=args.preset, overrides=keys, host=True)


@dataclass
class RunRow:
    """One method and seed, as the table shows it."""

    method: str
    """The method's name."""
    seed: int
    """The RL seed."""
    status: str
    """The run's status: its evaluation's when RL finished, else RL's."""
    updates: int | None
    """Optimizer updates RL made (None before RL wrote metrics)."""
    success: Rate | None
    """Success on the fixed set after RL (None until evaluated)."""
    change: PairedChange | None
    """That evaluation against the shared SFT start, rollout by rollout."""
    verifier_calls: int
    """Verifier label calls RL spent."""
    judge_calls: int
    """Judge (rubric-scoring) calls RL spent."""
    trees: int
    """Training trees RL sampled."""
    parts: dict[str, float]
    """Seconds of each `STAGE_PARTS` part, summed over RL's stages."""
    eval_s: float | None
    """Wall seconds of the final evaluation."""
    rl_s: float | None
    """Wall seconds of RL."""
    steps: int | None = None
    """RL steps taken (updates plus skipped steps)."""
    train_success: Rate | None = None
    """Training trees solved during RL."""


def run_row(out: Path, record: JobRecord, method: str, seed: int, start: dict[str, bool] | None) -> RunRow:
    name = f"{method}-s{seed}"
    rl, ev = record.phase(f"rl/{name}"), record.phase(f"eval/{name}")
    status = ev.status if rl.status == "done" else rl.status
    row = RunRow(method, seed, status, None, None, None, 0, 0, 0, {}, ev.wall_s, rl.wall_s)
    if (out / "rl" / name / "metrics.jsonl").is_file():
        summary = rl_summary(out / "rl" / name)
        row.updates, row.verifier_calls, row.judge_calls, row.trees = summary.updates, summary.verifier_calls, summary.judge_calls, summary.trees
        row.steps = summary.steps
        row.train_success = Rate.of(sum(r["success"].k for r in summary.rows), sum(r["success"].n for r in summary.rows))
        train, _ = load_train(out / "rl" / name)
        if train is not None:
            for stage in stage_times(train):
                for part, seconds in stage.parts.items():
                    row.parts[part] = row.parts.get(part, 0.0) + seconds
    if ev.status == "done":
        stats = eval_stats(out / "eval" / name)
        row.success = stats.success
        row.change = PairedChange.of(start, stats.outcomes) if start is not None else None
    return row


def mean_std(rates: list[Rate]) -> str:
    values = [100 * r.k / r.n for r in rates if r.n]
    if not values:
        return "—"
    std = f" ± {statistics.stdev(values):.1f}" if len(values) > 1 else " (one seed)"
    return f"{statistics.fmean(values):.1f}{std}"


def setup_lines(args: argparse.Namespace, cfg: TrainConfig) -> list[str]:
    """The runs' shared settings, read from the SFT start's config."""
    r, p, sft = cfg.rollout, cfg.pipeline, cfg.sft
    sched = schedules(args)
    return [
        f"- Config `{args.config.relative_to(REPO) if args.config.is_relative_to(REPO) else args.config}`, preset "
        f"`{cfg.preset}`, model `{cfg.model.name}` ({cfg.model.dtype}, {cfg.model.finetune}); "
        f"{cfg.environment.name} `{cfg.environment.split}` ({cfg.environment.difficulty or 'all'}); "
        f"{r.batch_tasks} task(s) × K={r.trees_per_task} trees per step at temperature {r.agent_temperature:g}, "
        f"{r.max_calls_per_agent} calls per agent, {r.max_tokens} tokens per call; at most {args.updates} updates per run, "
        f"RL lr {cfg.optimizer.lr:g}" + (f", at most {args.rl_minutes:g} min per run" if args.rl_minutes else ""),
        "- Schedules (shortened from the paper's 16:2:2 so that a few steps reach every stage): "
        + "; ".join(f"{k} `{sched.get(k, 'the preset')}`" for k in args.methods.split(",")),
        f"- Shared SFT: expert `{sft.expert}`, {sft.train_tasks} train tasks, {sft.epochs} epoch(s), batches of "
        f"{sft.batch_datums}, lr {sft.lr if sft.lr is not None else cfg.optimizer.lr:g}.",
        f"- Evaluation: the first {p.eval_tasks} `{p.eval_split or 'val'}` tasks ({p.eval_difficulty or 'all'}), "
        f"{eval_sampling(p.eval_samples, p.eval_temperature)} with the config's seed ({cfg.seed}) in every "
        "evaluation, so every run pairs with the SFT start rollout by rollout.",
    ]


def write_doc(args: argparse.Namespace, out: Path, record: JobRecord, command: str, started: str,
              sft_cfg: TrainConfig) -> Path:
    """The Markdown page: setup, the table, the caveats, all from the experiment's files."""
    methods, seeds = args.methods.split(","), [int(s) for s in args.seeds.split(",")]
    m, git = machine(), git_state()
    sft_line = "—"
    if (out / "sft" / "metrics.jsonl").is_file():
        run, _ = load_train(out / "sft")
        nll = [s["heldout_nll"] for s in (run.steps if run else ()) if s.get("kind") == "eval" and s.get("heldout_nll") is not None]
        sft_line = describe_nll(nll)
    start = eval_stats(out / "eval" / "sft") if record.phase("eval/sft").status == "done" else None
    rows = [["SFT start (shared)", "—", "—", "—", describe_count(start.success) if start else "—", "—", "—", "—", "—", "—",
             "—", "—", "—", f"{record.phase('eval/sft').wall_s or 0:.0f}"]]
    for method in methods:
        runs = [run_row(out, record, method, seed, start.outcomes if start else None) for seed in seeds]
        rates = [r.success for r in runs if r.success is not None]
        rows.append([
            method, str(len(rates)) + (f" of {len(runs)}" if len(rates) < len(runs) else ""),
            ", ".join("—" if r.updates is None else f"{r.updates} of {r.steps}" for r in runs),
            ", ".join(f"{r.train_success.k}/{r.train_success.n}" if r.train_success else "—" for r in runs),
            mean_std(rates),
            "; ".join(describe_count(r.success) if r.success else r.status for r in runs),
            "; ".join(paired(r.change) if r.change else "—" for r in runs),
            str(sum(r.trees for r in runs)), str(sum(r.verifier_calls for r in runs)), str(sum(r.judge_calls for r in runs)),
            *(f"{sum(r.parts.get(part, 0.0) for r in runs):.0f}" for part in STAGE_PARTS),
            f"{sum(r.eval_s or 0.0 for r in runs):.0f}",
        ])
    headers = ["method", "seeds evaluated", "updates of steps per seed", "training trees solved per seed",
               "success % (mean ± std over seeds)", "per seed (Wilson 95% CI)", "per seed vs SFT start (paired exact test)",
               "training trees (verified)", "verifier label calls", "judge calls",
               *(f"{part} s" for part in STAGE_PARTS), "eval s"]
    failed = [f"- `{name}`: {p.status}: {p.error}" for name, p in record.phases.items() if p.status in ("failed", "interrupted")]
    text = "\n".join([
        "# CPU experiment: RAO, SERA w/o D and SERA from one SFT checkpoint",
        "",
        "Written by `scripts/cpu_experiment.py` from the files of its run folder; rerun the command to reproduce",
        "or resume it.",
        "",
        f"- Command: `{command}`",
        f"- Started: {started} (UTC); git commit `{git['commit']}`" + (" (uncommitted changes)" if git["dirty"] else ""),
        f"- Machine: {m.cpu}; native bf16: {'yes' if m.native_bf16 else 'no'}; {m.cores} cores ({m.usable_cores} usable), "
        f"torch threads {m.torch_threads}",
        *setup_lines(args, sft_cfg),
        f"- {sft_line}",
        "",
        markdown_table(headers, rows),
        "",
        "Success is k/n rollouts on the fixed set per seed, with its Wilson 95% interval; the paired test counts the "
        "rollouts (same task, same sample seed) the run solved and the SFT start did not (+) and the reverse (−). "
        "Seconds are summed over the method's seeds: sampling, update and sync from the RL loop's records, eval the "
        "final evaluations' wall time. A step with nothing to train on (every tree of its task got the same reward) "
        "is skipped: it samples and makes no update.",
        *(["", "Runs that did not finish:", *failed] if failed else []),
        "",
    ])
    args.doc.parent.mkdir(parents=True, exist_ok=True)
    args.doc.write_text(text, encoding="utf-8")
    return args.doc


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    out: Path = args.out
    command = shlex.join(["python", "scripts/cpu_experiment.py", *argv])
    methods, seeds = args.methods.split(","), [int(s) for s in args.seeds.split(",")]
    if args.updates < 1 or not seeds or not methods:
        raise SystemExit("error: --updates must be >= 1 and --methods, --seeds non-empty")
    try:
        configs = {(m, s): config(args, m, s) for m in methods for s in seeds}
        eval_configs = {m: config(args, m, None) for m in methods}  # the file's seed: every evaluation pairs
        sft_cfg = config(args, SFT_METHOD, None)
    except ConfigError as exc:
        raise SystemExit(f"error: {exc}") from None
    out.mkdir(parents=True, exist_ok=True)
    record = JobRecord.load(out / "experiment.json")
    saved = next((i["settings"] for i in record.invocations if "settings" in i), None)
    if saved is not None and saved != settings(args):
        changed = sorted(k for k in set(saved) | set(settings(args)) if saved.get(k) != settings(args).get(k))
        raise SystemExit(f"error: {out} holds an experiment with other settings ({', '.join(changed)}); use another --out")
    started = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime())
    record.invocations.append({"command": command, "started_at": started, "settings": settings(args),
                               "config_hashes": {f"{m}-s{s}": config_hash(c) for (m, s), c in configs.items()},
                               "git": git_state(), "machine": machine().to_json()})
    record.save()

    def log(line: str) -> None:
        print(f"    {line}", flush=True)

    def step(name: str, folder: Path, kind: str, work: Any) -> bool:
        phase = record.phase(name)
        if phase.status == "done" and finished(folder, kind):
            print(f"{name}: kept", flush=True)
            return True
        print(f"{name}: running", flush=True)
        phase = run_phase(record, name, work)
        print(f"{name}: {phase.status} in {phase.wall_s:.0f} s" + (f": {phase.error}" if phase.error else ""), flush=True)
        return phase.status == "done"

    sft_dir = out / "sft"
    ok = step("sft", sft_dir, "train", lambda: sft_work(sft_cfg, sft_dir, log))
    if ok:
        ok = step("eval/sft", out / "eval" / "sft", "eval", lambda: eval_work(sft_cfg, out / "eval" / "sft", sft_dir))
        for (method, seed), cfg in configs.items():
            name = f"{method}-s{seed}"
            rl_dir, eval_dir = out / "rl" / name, out / "eval" / name
            deadline = time.monotonic() + 60 * args.rl_minutes if args.rl_minutes else None
            if step(f"rl/{name}", rl_dir, "train", lambda: rl_work(cfg, rl_dir, sft_dir, deadline, log)):
                ok = step(f"eval/{name}", eval_dir, "eval", lambda: eval_work(eval_configs[method], eval_dir, rl_dir)) and ok
            else:
                ok = False
    doc = write_doc(args, out, record, command, record.invocations[0]["started_at"], sft_cfg)
    print(f"table: {doc}", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
