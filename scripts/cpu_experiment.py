"""CPU experiment: RAO, SERA w/o D and SERA trained from one shared SFT checkpoint, compared.

    python scripts/cpu_experiment.py --out runs/cpu_experiment [--seeds 0,1] [--updates 3] ...

Steps, each recorded in OUT/experiment.json by `sera.pipeline.record.run_phase` (a rerun skips
what is done, resumes an unfinished RL from its checkpoint and keeps an evaluation's finished
trees):

1. `sft`: one SFT warm start (`run_sft` on easy TextCraft-Synth training tasks, the `sera`
   config's demonstrations, with rubric-writing and scoring calls), shared by every run.
2. `eval/sft`: that checkpoint on the fixed held-out set (the pipeline's evaluation: the first
   `--eval-tasks` easy val tasks, greedy, one rollout each): where every run starts.
3. For each method (`configs/textcraft-synth/<method>.yaml`) and seed: `rl/<method>-s<seed>`,
   `--updates` optimizer updates from the SFT weights (`run_train(init_from=...)`), and
   `eval/<method>-s<seed>`, its final checkpoint on the same set.
4. The table (success mean ± std over seeds, per-seed k/n, supervision spent, wall time per
   stage) into `--doc` (default docs/cpu_experiment.md), with this command and the machine.

The methods' paper schedules (16 execution updates per cycle) would never leave the execution
stage in a few updates, so each method's schedule is shortened (`--schedule METHOD=SCHEDULE`,
defaults in `SCHEDULES`), keeping its stages. Sizes are flags; the defaults are first guesses for
~90 minutes on 2 cores, to be timed. Validate with `--preset tiny` (the random test model).
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
from sera.reports.wording import describe_count, describe_nll  # noqa: E402
from sera.reports.load_train import load_train  # noqa: E402
from sera.reports.tables import markdown_table  # noqa: E402
from sera.reports.train_stats import stage_times  # noqa: E402
from sera.stats import Rate  # noqa: E402
from sera.train.config import ConfigError, TrainConfig, config_hash, load_config  # noqa: E402

METHODS = ("rao", "sera-no-d", "sera")
"""The methods compared (their TextCraft-Synth configs)."""
SCHEDULES = {
    "rao": "execution:1",
    "sera-no-d": "execution:2,rubric_generation:1",
    "sera": "execution:1,delegation:1,rubric_generation:1",
}
"""Shortened schedules with each method's stages (the paper: 16:2 and 16:2:2)."""
STAGE_PARTS = ("sampling", "update", "sync")
"""`time/<part>` metrics of the RL loop shown per run (the evaluation's wall is the fourth)."""
SFT_METHOD = "sera"
"""The config whose SFT demonstrations (with rubric calls) make the shared checkpoint."""


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, required=True, help="experiment folder (rerun to resume)")
    p.add_argument("--doc", type=Path, default=REPO / "docs" / "cpu_experiment.md", help="Markdown file the table is written to")
    p.add_argument("--preset", default="cpu", help="scale preset: cpu (SmolLM2, fp32) or tiny (the random test model)")
    p.add_argument("--methods", default=",".join(METHODS), help="comma-separated methods")
    p.add_argument("--seeds", default="0,1", help="comma-separated RL seeds (at least 2 for a std)")
    p.add_argument("--updates", type=int, default=3, help="optimizer updates per RL run")
    p.add_argument("--rl-minutes", type=float, default=None, help="optional wall-clock cap per RL run (then updates may differ; the table says how many)")
    p.add_argument("--batch-tasks", type=int, default=1, help="tasks per RL step")
    p.add_argument("--trees", type=int, default=8, help="K: trees per task")
    p.add_argument("--max-calls", type=int, default=4, help="policy calls per agent (RL and evaluation)")
    p.add_argument("--max-tokens", type=int, default=192, help="completion tokens per call")
    p.add_argument("--rl-lr", type=float, default=5e-6, help="RL learning rate")
    p.add_argument("--sft-tasks", type=int, default=8, help="SFT training tasks demonstrated")
    p.add_argument("--sft-val-tasks", type=int, default=2, help="held-out tasks of the SFT NLL")
    p.add_argument("--sft-epochs", type=int, default=1, help="SFT epochs")
    p.add_argument("--sft-lr", type=float, default=1e-4, help="SFT learning rate")
    p.add_argument("--sft-batch", type=int, default=2, help="SFT demonstrations per update")
    p.add_argument("--sft-max-calls", type=int, default=6, help="the expert's calls per agent in the demonstrations")
    p.add_argument("--eval-tasks", type=int, default=8, help="fixed held-out evaluation set: the first N easy val tasks")
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


def config(args: argparse.Namespace, method: str, seed: int) -> TrainConfig:
    """The run's config: the method's TextCraft-Synth file at the preset, with the flags' sizes."""
    keys = [
        "environment.difficulty=easy", f"rollout.batch_tasks={args.batch_tasks}", f"rollout.trees_per_task={args.trees}",
        f"rollout.concurrency={max(args.batch_tasks * args.trees, 1)}", f"rollout.max_calls_per_agent={args.max_calls}",
        f"rollout.max_tokens={args.max_tokens}", f"optimizer.lr={args.rl_lr}", f"steps.max_steps={args.updates}",
        f"checkpoint.every={args.updates}", f"sft.train_tasks={args.sft_tasks}", f"sft.val_tasks={args.sft_val_tasks}",
        f"sft.epochs={args.sft_epochs}", f"sft.max_calls_per_agent={args.sft_max_calls}", f"sft.lr={args.sft_lr}",
        f"sft.batch_datums={args.sft_batch}",
        f"pipeline.eval_tasks={args.eval_tasks}", "pipeline.eval_difficulty=easy", f"pipeline.eval_max_calls={args.max_calls}",
        f"seed={seed}", *args.set,
    ]
    schedule = schedules(args).get(method)
    if schedule:
        keys.append(f"method.overrides.schedule={schedule}")
    return load_config(REPO / "configs" / "textcraft-synth" / f"{method}.yaml", preset=args.preset, overrides=keys, host=True)


@dataclass
class RunRow:
    """One method and seed, as the table shows it."""

    method: str
    seed: int
    status: str
    updates: int | None
    success: Rate | None
    verifier_calls: int
    judge_calls: int
    trees: int
    parts: dict[str, float]
    eval_s: float | None
    rl_s: float | None
    steps: int | None = None
    train_success: Rate | None = None


def run_row(out: Path, record: JobRecord, method: str, seed: int) -> RunRow:
    name = f"{method}-s{seed}"
    rl, ev = record.phase(f"rl/{name}"), record.phase(f"eval/{name}")
    status = ev.status if rl.status == "done" else rl.status
    row = RunRow(method, seed, status, None, None, 0, 0, 0, {}, ev.wall_s, rl.wall_s)
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
        row.success = eval_stats(out / "eval" / name).success
    return row


def mean_std(rates: list[Rate]) -> str:
    values = [100 * r.k / r.n for r in rates if r.n]
    if not values:
        return "—"
    std = f" ± {statistics.stdev(values):.1f}" if len(values) > 1 else " (one seed)"
    return f"{statistics.fmean(values):.1f}{std}"


def write_doc(args: argparse.Namespace, out: Path, record: JobRecord, command: str, started: str) -> Path:
    """The Markdown page: setup, the table, the caveats, all from the experiment's files."""
    methods, seeds = args.methods.split(","), [int(s) for s in args.seeds.split(",")]
    m, git = machine(), git_state()
    sft_line = "—"
    if (out / "sft" / "metrics.jsonl").is_file():
        run, _ = load_train(out / "sft")
        nll = [s["heldout_nll"] for s in (run.steps if run else ()) if s.get("kind") == "eval" and s.get("heldout_nll") is not None]
        sft_line = describe_nll(nll)
    start = eval_stats(out / "eval" / "sft").success if record.phase("eval/sft").status == "done" else None
    rows = [["SFT start (shared)", "—", "—", "—", describe_count(start) if start else "—", "—", "—", "—", "—", "—", "—", "—",
             f"{record.phase('eval/sft').wall_s or 0:.0f}"]]
    for method in methods:
        runs = [run_row(out, record, method, seed) for seed in seeds]
        rates = [r.success for r in runs if r.success is not None]
        rows.append([
            method, str(len(rates)) + (f" of {len(runs)}" if len(rates) < len(runs) else ""),
            ", ".join("—" if r.updates is None else f"{r.updates} of {r.steps}" for r in runs),
            ", ".join(f"{r.train_success.k}/{r.train_success.n}" if r.train_success else "—" for r in runs),
            mean_std(rates),
            ", ".join(f"{r.success.k}/{r.success.n}" if r.success else r.status for r in runs),
            str(sum(r.trees for r in runs)), str(sum(r.verifier_calls for r in runs)), str(sum(r.judge_calls for r in runs)),
            *(f"{sum(r.parts.get(part, 0.0) for r in runs):.0f}" for part in STAGE_PARTS),
            f"{sum(r.eval_s or 0.0 for r in runs):.0f}",
        ])
    headers = ["method", "seeds evaluated", "updates of steps per seed", "training trees solved per seed",
               "success % (mean ± std over seeds)", "per seed",
               "training trees (verified)", "verifier label calls", "judge calls",
               *(f"{part} s" for part in STAGE_PARTS), "eval s"]
    failed = [f"- `{name}`: {p.status}: {p.error}" for name, p in record.phases.items() if p.status in ("failed", "interrupted")]
    sched = schedules(args)
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
        f"- Preset `{args.preset}`; easy TextCraft-Synth; {args.batch_tasks} task(s) × K={args.trees} trees per step, "
        f"{args.max_calls} calls per agent, {args.max_tokens} tokens per call; {args.updates} updates per run, RL lr {args.rl_lr:g}"
        + (f", at most {args.rl_minutes:g} min per run" if args.rl_minutes else ""),
        "- Schedules (shortened from the paper's 16:2:2 so that a few updates reach every stage): "
        + "; ".join(f"{k} `{sched.get(k, 'the preset')}`" for k in methods),
        f"- Shared SFT: {args.sft_tasks} train tasks, {args.sft_epochs} epoch(s), batches of {args.sft_batch}, lr {args.sft_lr:g}. {sft_line}",
        f"- Evaluation: the first {args.eval_tasks} easy val tasks, one greedy rollout each (the same set for every run).",
        "",
        markdown_table(headers, rows),
        "",
        "Success is k/n on the fixed set per seed; with n = "
        f"{args.eval_tasks} tasks one seed's 95% Wilson interval is wide (0/{args.eval_tasks} is "
        f"{describe_count(Rate.of(0, args.eval_tasks)).split('; ')[1].rstrip(')')}), so differences between methods at this "
        "scale are not claimed. Seconds are summed over the method's seeds: sampling, update and sync from the RL loop's "
        "records, eval the final evaluations' wall time. A step with nothing to train on (every tree of its task got the "
        "same reward) is skipped: it samples and makes no update.",
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
        sft_cfg = config(args, SFT_METHOD, seeds[0])
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
    if not (record.phase("sft").status == "done" and finished(sft_dir, "train")) and sft_dir.exists():
        import shutil

        shutil.rmtree(sft_dir)  # an unfinished SFT restarts (run_sft does not resume)
    ok = step("sft", sft_dir, "train", lambda: sft_work(sft_cfg, sft_dir, log))
    if ok:
        ok = step("eval/sft", out / "eval" / "sft", "eval", lambda: eval_work(sft_cfg, out / "eval" / "sft", sft_dir))
        for (method, seed), cfg in configs.items():
            name = f"{method}-s{seed}"
            rl_dir, eval_dir = out / "rl" / name, out / "eval" / name
            deadline = time.monotonic() + 60 * args.rl_minutes if args.rl_minutes else None
            if step(f"rl/{name}", rl_dir, "train", lambda: rl_work(cfg, rl_dir, sft_dir, deadline, log)):
                ok = step(f"eval/{name}", eval_dir, "eval", lambda: eval_work(cfg, eval_dir, rl_dir)) and ok
            else:
                ok = False
    doc = write_doc(args, out, record, command, record.invocations[0]["started_at"])
    print(f"table: {doc}", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
