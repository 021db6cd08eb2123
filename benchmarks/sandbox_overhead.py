"""Sandbox overhead: `SandboxSession.run` vs plain in-process `exec`, measured side by side.

Prints one JSON object:
- `session_start_ms`: the first session (also starts the fork server) and later ones (median);
- `cells`: per-cell time of a trivial cell and of a cell making 20 sync tool calls, in the
  sandbox and with `exec` in this process (same code, same tool functions), and their ratio;
- `tool_call_round_trip_us`: per sync and per async tool call, from the slope between cells
  making 0 and 200 calls;
- `concurrent_sessions`: N sessions started and running one tool-calling cell at once on one
  event loop, with the worst event-loop lag seen by a 1 ms ticker meanwhile;
- `isolation_cost`: session start and the two cells again with a fork server that skips the
  kernel isolation (namespaces, empty root; the rlimits stay), and isolated / plain ratios.
Usage: python benchmarks/sandbox_overhead.py [--repeats N] [--sessions N]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

from sera.sandbox import SandboxSession, forkserver

TRIVIAL = "x = 1 + 1"
TWENTY_CALLS = "for i in range(20):\n    craft({'oak planks': 1}, ('stick', 4))"


def _tools() -> dict[str, Any]:
    def craft(ingredients: dict[str, int], target: tuple[str, int]) -> str:
        return f"Crafted {target[1]} {target[0]}"

    async def fetch(i: int) -> int:
        return i

    return {"craft": craft, "fetch": fetch}


async def _median_ms(run: Callable[[], Awaitable[Any]], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        await run()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def _exec_ms(code: str, repeats: int) -> float:
    namespace = dict(_tools())
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        exec(compile(code, "<cell>", "exec"), namespace)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


async def _session_start(repeats: int) -> dict[str, float]:
    start = time.perf_counter()
    first = SandboxSession(_tools())
    await first.start()
    cold = (time.perf_counter() - start) * 1e3
    await first.close()

    async def start_one() -> None:
        session = SandboxSession(_tools())
        await session.start()
        await session.close()  # included: a real session also pays for its teardown

    later = await _median_ms(start_one, repeats)
    return {"first_including_fork_server": round(cold, 2), "later_median": round(later, 3)}


async def _cells(repeats: int) -> dict[str, Any]:
    report: dict[str, Any] = {}
    async with SandboxSession(_tools()) as session:
        for name, code in (("trivial", TRIVIAL), ("twenty_sync_tool_calls", TWENTY_CALLS)):
            result = await session.run(code)
            assert result.ok, result.error
            sandbox_ms = await _median_ms(lambda code=code: session.run(code), repeats)
            exec_ms = _exec_ms(code, repeats)
            report[name] = {
                "sandbox_ms": round(sandbox_ms, 3),
                "exec_ms": round(exec_ms, 4),
                "ratio": round(sandbox_ms / exec_ms, 1),
                "overhead_ms": round(sandbox_ms - exec_ms, 3),
            }
        sync_calls = "for i in range(200):\n    craft({'a': 1}, ('b', 1))"
        async_calls = "for i in range(200):\n    await fetch(i)"
        base = await _median_ms(lambda: session.run("for i in range(200):\n    pass"), repeats)
        sync = await _median_ms(lambda: session.run(sync_calls), repeats)
        asyn = await _median_ms(lambda: session.run(async_calls), repeats)
        gathered = await _median_ms(
            lambda: session.run("import asyncio\nawait asyncio.gather(*[fetch(i) for i in range(200)])"), repeats
        )
    round_trip = {
        "sync_us": round((sync - base) / 200 * 1e3, 1),
        "async_sequential_us": round((asyn - base) / 200 * 1e3, 1),
        "async_gathered_us": round((gathered - base) / 200 * 1e3, 1),
    }
    return {"cells": report, "tool_call_round_trip_us": round_trip}


async def _concurrent(n: int) -> dict[str, Any]:
    worst_lag = 0.0
    stop = False

    async def ticker() -> None:
        nonlocal worst_lag
        while not stop:
            before = time.perf_counter()
            await asyncio.sleep(0.001)
            worst_lag = max(worst_lag, time.perf_counter() - before - 0.001)

    tick = asyncio.create_task(ticker())
    await asyncio.sleep(0.01)
    sessions = [SandboxSession(_tools()) for _ in range(n)]
    start = time.perf_counter()
    await asyncio.gather(*(s.start() for s in sessions))
    started = time.perf_counter()
    results = await asyncio.gather(*(s.run(TWENTY_CALLS + "\nawait fetch(1)") for s in sessions))
    ran = time.perf_counter()
    await asyncio.gather(*(s.close() for s in sessions))
    closed = time.perf_counter()
    stop = True
    await tick
    assert all(r.ok for r in results), [r.error for r in results if not r.ok][:1]
    return {
        "sessions": n,
        "start_all_s": round(started - start, 3),
        "run_one_cell_each_s": round(ran - started, 3),
        "close_all_s": round(closed - ran, 3),
        "worst_event_loop_lag_ms": round(worst_lag * 1e3, 2),
    }


async def _isolation_cost(repeats: int) -> dict[str, Any]:
    """Start, trivial cell and 20-call cell with the kernel isolation on, then off (same run)."""

    async def measure(allow_weak: bool) -> dict[str, float]:
        async def start_one() -> None:
            session = SandboxSession(_tools(), allow_weak_isolation=allow_weak)
            await session.start()
            await session.close()

        numbers = {"session_start_ms": await _median_ms(start_one, max(10, repeats // 10))}
        async with SandboxSession(_tools(), allow_weak_isolation=allow_weak) as session:
            for name, code in (("trivial_ms", TRIVIAL), ("twenty_sync_tool_calls_ms", TWENTY_CALLS)):
                await session.run(code)
                numbers[name] = await _median_ms(lambda code=code: session.run(code), repeats)
        return numbers

    isolated = await measure(False)
    plain_server = forkserver.ForkServer(namespaces=False)
    saved = forkserver._server
    forkserver._server = plain_server  # sessions started now use the plain fork server
    try:
        plain = await measure(True)
    finally:
        forkserver._server = saved
        plain_server.close()
    return {
        name: {"isolated": round(isolated[name], 3), "plain": round(plain[name], 3),
               "ratio": round(isolated[name] / plain[name], 2)}
        for name in isolated
    }


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--sessions", type=int, default=30)  # within the default worker bound (32)
    args = parser.parse_args()
    report: dict[str, Any] = {"session_start_ms": await _session_start(max(10, args.repeats // 10))}
    report.update(await _cells(args.repeats))
    report["concurrent_sessions"] = await _concurrent(args.sessions)
    report["isolation_cost"] = await _isolation_cost(args.repeats)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
