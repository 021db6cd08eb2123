"""A person as the policy: shows each observation and reads a code cell from the terminal."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from sera.runtime.policy import Completion, SamplingParams
from sera.types import Message

END_OF_CELL = ""
"""An empty line ends a cell."""


class HumanPolicy:
    """Prints the newest messages and reads the reply cell line by line."""

    def __init__(self, read_line: Callable[[str], str] = input, write: Callable[[str], None] = print) -> None:
        self._read_line = read_line
        self._write = write

    async def __call__(self, messages: list[Message], sampling: SamplingParams) -> Completion:
        new = messages[1:] if len(messages) == 2 else messages[-1:]
        for message in new:
            self._write(f"\n--- {message.role} ---\n{message.content}")
        self._write("\nType a Python cell; an empty line runs it (`finish('...')` ends the episode).")
        lines = []
        while True:
            line = await asyncio.to_thread(self._read_line, ">>> " if not lines else "... ")
            if line == END_OF_CELL and lines:
                break
            lines.append(line)
        code = "\n".join(lines)
        return Completion(text=f"<python>\n{code}\n</python>", finish_reason="stop")
