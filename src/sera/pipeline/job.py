"""`sera pipeline`: the main job, phase after phase, resumable, with an honest report at the end.

    eval_base -> sft -> eval_sft -> rl (until the budget's RL deadline) -> eval_rl -> report

Run again with the same command, the job resumes: a phase recorded `done` whose output is still
there is kept; SFT and RL continue from their newest checkpoints (exactly: the same batches and
weights as an uninterrupted run); an evaluation keeps its finished trees. A phase
whose source is redone makes what was built from it stale: the job refuses to start rather than
mix them (remove the stale folders, or use another `--out`). The job directory's `config.yaml`
is the config it was started with; a rerun may change only `RESUMABLE_KEYS`.

Skips (`pipeline.sft` / `pipeline.rl` false, no time left for RL) are decided afresh on every run.
The job stops at the first phase that fails or is interrupted (recorded in `pipeline.json` with
its one-line error; nothing completed is deleted) and still writes the report of what it has.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sera.eval.errors import EvalSetupError
from sera.eval.lock import run_lock
from sera.pipeline.budget import Budget
from sera.pipeline.machine import git_state, machine
from sera.pipeline.phases import (
    DEPENDS_ON, EVAL_PHASES, LABELS, PHASES, dependents, eval_work, output_present, rl_work, sft_work,
)
from sera.pipeline.record import JobRecord, PhaseRecord, now_iso, run_phase
from sera.reports.wording import describe_success
from sera.stats import Rate
from sera.train.config import ConfigError, TrainConfig, config_diff, config_hash, dump_config, load_config

PIPELINE_FILE = "pipeline.json"
"""The job record (`sera.pipeline.record`)."""
CONFIG_FILE = "config.yaml"
"""The resolved config the job was started with."""
REPORT_FILE = "report.md"
"""The report (with `report.json` and `curve.png` beside it)."""
RESUMABLE_KEYS = frozenset({"pipeline.budget_minutes", "steps.max_steps"})
"""Config keys a rerun may change (the time it gets; how far an unfinished RL may go)."""
SIGNAL_EXIT = {"SIGINT": 130, "SIGTERM": 143}
"""Exit status of a job a signal stopped (the shell's 128 + signal number)."""


class PipelineError(ValueError):
    """The job cannot start in this directory; the message is one line saying why."""


@dataclass(frozen=True)
class PipelineResult:
    """How a run of the job ended."""

    out: Path
    """The job directory."""
    report: Path | None
    """`report.md` (None when no report could be written; see `report_error`)."""
    exit_code: int
    """0: every phase done or skipped; 1: a phase failed; 130/143: a signal stopped it."""
    ran: tuple[str, ...]
    """Phases run (or resumed) by this invocation."""
    stopped_at: str | None = None
    """The phase that failed or was interrupted."""
    report_error: str | None = None
    """One line: why the report could not be written."""


def check_config(out: Path, cfg: TrainConfig) -> None:
    """Refuse a directory that is not a job of this config (a file; a non-empty folder without a
    job; a job whose config differs outside `RESUMABLE_KEYS`)."""
    if out.exists() and not out.is_dir():
        raise PipelineError(f"--out {out} is a file; give a folder")
    saved_path = out / CONFIG_FILE
    if not saved_path.is_file():
        if out.is_dir() and any(p.name != "run.lock" for p in out.iterdir()):
            raise PipelineError(f"--out {out} is not empty and holds no pipeline job ({CONFIG_FILE} missing); give a new folder")
        return
    try:
        saved = load_config(saved_path)
    except ConfigError as exc:
        raise PipelineError(f"{saved_path}: {exc}") from None
    changed = [line for line in config_diff(saved, cfg) if line.split(":", 1)[0] not in RESUMABLE_KEYS]
    if changed:
        raise PipelineError(f"{out} holds a job started with another config: {'; '.join(changed)} (a rerun may change "
                            f"only {', '.join(sorted(RESUMABLE_KEYS))}; use another --out)")


def enabled(cfg: TrainConfig, name: str) -> str | None:
    """Why the config leaves `name` out (None: it runs)."""
    if name in ("sft", "eval_sft") and not cfg.pipeline.sft:
        return "pipeline.sft is false"
    if name in ("rl", "eval_rl") and not cfg.pipeline.rl:
        return "pipeline.rl is false"
    return None


def complete(record: JobRecord, out: Path, name: str) -> bool:
    """Recorded done and its output still on disk."""
    return record.phase(name).status == "done" and output_present(out, name)


def check_stale(record: JobRecord, out: Path, cfg: TrainConfig) -> None:
    """Refuse to redo a phase while outputs made from its previous result are on disk."""
    for name in PHASES:
        if enabled(cfg, name) is None and not complete(record, out, name):
            stale = [d for d in dependents(name) if (out / d).exists()]
            if stale:
                raise PipelineError(f"{out / name} must be made again, but {', '.join(str(out / d) for d in stale)} "
                                    f"were made from its previous result: remove them too, or use another --out")


def run_pipeline(cfg: TrainConfig, out: str | Path, *, command: str, log: Callable[[str], None] = print,
                 detail: Callable[[str], None] | None = None) -> PipelineResult:
    """Run (or resume) the job in `out`. `log` gets one line per phase (how it ended, or that it
    was kept or skipped) and the report's path; `detail` the start of each phase and the phases'
    own progress lines (default: `log`, indented). `PipelineError` (one line) when the job cannot start."""
    start = time.monotonic()
    out = Path(out)
    check_config(out, cfg)
    out.mkdir(parents=True, exist_ok=True)
    try:
        with run_lock(out):
            return _run(cfg, out, start, command, log, detail or (lambda line: log(f"    {line}")))
    except EvalSetupError as exc:  # the lock: another job runs in this folder
        raise PipelineError(str(exc).replace("another evaluation", "another sera pipeline")) from None


def _run(cfg: TrainConfig, out: Path, start: float, command: str, log: Callable[[str], None],
         detail: Callable[[str], None]) -> PipelineResult:
    try:
        record = JobRecord.load(out / PIPELINE_FILE, PHASES)
    except ValueError as exc:
        raise PipelineError(str(exc)) from None
    check_stale(record, out, cfg)
    (out / CONFIG_FILE).write_text(dump_config(cfg), encoding="utf-8")
    budget = Budget(start, cfg.pipeline.budget_minutes * 60)
    invocation: dict[str, Any] = {"command": command, "started_at": now_iso(), "config_hash": config_hash(cfg),
                                  "git": git_state(), "machine": machine().to_json(),
                                  "budget_minutes": cfg.pipeline.budget_minutes}
    record.invocations.append(invocation)
    record.save()
    before = json.dumps([vars(p) for p in record.phases.values()], default=str)
    log(f"sera pipeline: {out} (budget {cfg.pipeline.budget_minutes:g} min)")

    ran: list[str] = []
    stopped: PhaseRecord | None = None
    try:
        for name in PHASES:
            phase = _step(cfg, out, name, record, budget, invocation, log, detail)
            if phase is None:
                continue
            ran.append(name)
            if phase.status != "done":
                stopped = phase
                break
    except KeyboardInterrupt:  # outside RL (which checkpoints and returns): recorded by run_phase
        log("interrupted (SIGINT); rerun the same command to resume")
        stopped_at = next((n for n in PHASES if record.phase(n).status == "interrupted"), None)
        return PipelineResult(out=out, report=None, exit_code=SIGNAL_EXIT["SIGINT"], ran=tuple(ran), stopped_at=stopped_at)
    invocation["ended_phases_at"] = now_iso()
    invocation["used_s"] = round(budget.used(), 3)
    record.save()

    changed = json.dumps([vars(p) for p in record.phases.values()], default=str) != before
    report, report_error = out / REPORT_FILE, None
    if changed or not report.is_file():
        report, report_error = _report(out, log)
    else:
        log(f"report: unchanged ({report})")
    code = 0
    if stopped is not None:
        code = SIGNAL_EXIT.get(stopped.detail.get("stopped_by", ""), 1) if stopped.status == "interrupted" else 1
    elif report_error is not None:
        code = 1
    return PipelineResult(out=out, report=report, exit_code=code, ran=tuple(ran),
                          stopped_at=stopped.name if stopped else None, report_error=report_error)


def _step(cfg: TrainConfig, out: Path, name: str, record: JobRecord, budget: Budget, invocation: dict[str, Any],
          log: Callable[[str], None], detail: Callable[[str], None]) -> PhaseRecord | None:
    """Skip, keep or run one phase; returns its record when it ran (None otherwise)."""
    source = DEPENDS_ON.get(name)
    reason = enabled(cfg, name)
    if reason is None and source is not None and record.phase(source).status == "skipped" and enabled(cfg, source) is None:
        reason = f"{source} was skipped"
    if reason is not None:
        record.skip(name, reason)
        log(f"{name}: skipped ({reason})")
        return None
    if complete(record, out, name):
        phase = record.phase(name)
        log(f"{name}: kept (done at {phase.ended_at}, {phase.wall_s:.1f} s)")
        return None
    folder = out / name
    if name in EVAL_PHASES:
        weights = None if name == "eval_base" else out / source  # type: ignore[operator]
        samples = cfg.pipeline.eval_base_samples if name == "eval_base" else None
        work = lambda: eval_work(cfg, folder, weights, samples, detail)  # noqa: E731
    elif name == "sft":
        work = lambda: sft_work(cfg, folder, detail)  # noqa: E731
    else:
        deadline = _rl_deadline(cfg, record, budget)
        invocation["rl_deadline_s"] = round(deadline - budget.start, 3)
        if deadline <= time.monotonic():
            record.skip(name, f"no time left: {budget.used():.0f} s of the {budget.seconds:.0f} s budget used, and "
                              f"the final evaluation and report need about {budget.end - deadline:.0f} s; "
                              f"{_budget_hint(budget, deadline)}")
            log(f"{name}: skipped ({record.phase(name).detail['reason']})")
            return None
        init = out / "sft" if cfg.pipeline.sft else None
        work = lambda: rl_work(cfg, folder, init, deadline, detail)  # noqa: E731
    detail(f"{name}: running")
    phase = run_phase(record, name, work)
    log(_phase_line(phase))
    return phase


RL_HINT_MINUTES = 15
"""The RL time the skip message's budget suggestion leaves room for."""


def _budget_hint(budget: Budget, deadline: float) -> str:
    """What budget would give RL `RL_HINT_MINUTES` on this machine, from what this run measured:
    the time used so far plus the final evaluation's share (a rerun keeps the finished phases, but
    its budget counts from its own start: `Budget`)."""
    needed = budget.used() + (budget.end - deadline)
    minutes = math.ceil(needed / 60) + RL_HINT_MINUTES
    return (f"at this machine's speed a budget of {minutes} min (pipeline.budget_minutes; make run BUDGET_MIN={minutes}) "
            f"gives RL about {RL_HINT_MINUTES} min")


def _rl_deadline(cfg: TrainConfig, record: JobRecord, budget: Budget) -> float:
    """RL's deadline from the measured wall time of the evaluation before it."""
    source = "eval_sft" if cfg.pipeline.sft else "eval_base"
    measured = record.phase(source).wall_s
    if measured is None:
        raise PipelineError(f"{source} has no recorded wall time to size RL's deadline by; rerun the job")
    return budget.rl_deadline(measured, cfg.pipeline.final_eval_margin)


def _phase_line(phase: PhaseRecord) -> str:
    """One line: how the phase ended and its headline number."""
    took = "?" if phase.wall_s is None else f"{phase.wall_s:.1f} s" if phase.wall_s < 100 else f"{phase.wall_s:.0f} s"
    if phase.status == "failed":
        kind = "infrastructure failure" if phase.infra else "FAILED"
        return f"{phase.name}: {kind} after {took}: {phase.error}"
    if phase.status == "interrupted":
        return f"{phase.name}: interrupted after {took} ({phase.error}); rerun the same command to resume"
    d = phase.detail
    if phase.name in EVAL_PHASES:
        rate = Rate.of(d["successes"], d["rollouts"] - d["infra_failures"])
        return f"{phase.name}: done in {took}: {LABELS[phase.name]}, {describe_success(rate)}"
    if phase.name == "sft":
        return (f"sft: done in {took}: {d['steps']} steps on {d['train_datums']} datums, held-out NLL "
                f"{d['nll_before']:.3f} -> {d['nll_after']:.3f} nats/token")
    stop = f", stopped by {d['stopped_by']}" if d.get("stopped_by") else ""
    return f"rl: done in {took}: {d['updates']} updates in {d['steps']} steps{stop}"


def _report(out: Path, log: Callable[[str], None]) -> tuple[Path | None, str | None]:
    """Write the report; a failure to write it is said in one line, never hides the phases' results."""
    from sera.pipeline.report import write_report

    try:
        paths = write_report(out)
    except Exception as exc:  # the phases' outputs stay; the message says what to fix
        message = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        log(f"report: FAILED: {message}")
        return None, message
    log(f"report: {paths[0]}")
    return paths[0], None
