"""A person as the policy: shows each observation and reads a reply from the terminal, written in
the environment's reply protocol (a code cell for CodeAct, a command or tagged reply for text)."""

from __future__ import annotations

import asyncio
import builtins
from collections.abc import Callable

from sera.agents.protocol import CODEACT, ReplyProtocol
from sera.runtime.policy import Completion, SamplingParams
from sera.text_safety import clean_text
from sera.types import Message

END_OF_CELL = ""
"""An empty line ends a cell."""


class HumanPolicy:
    """Prints the newest messages and reads the reply line by line (an empty line sends it)."""

    def __init__(
        self,
        read_line: Callable[[str], str] | None = None,
        write: Callable[[str], None] | None = None,
        protocol: ReplyProtocol = CODEACT,
    ) -> None:
        # Looked up when the policy is made, not when this module is imported: the terminal's
        # input/print by default, whatever they are at that moment (tests replace them).
        self._read_line = read_line or builtins.input
        self._write = write or builtins.print
        self.protocol = protocol

    async def __call__(self, messages: list[Message], sampling: SamplingParams) -> Completion:
        new = messages[1:] if len(messages) == 2 else messages[-1:]
        for message in new:
            # Observations carry model-written cell output: never let it drive the terminal.
            self._write(f"\n--- {message.role} ---\n{clean_text(message.content)[0]}")
        self._write(f"\n{self.protocol.human_hint}")
        lines = []
        while True:
            line = await asyncio.to_thread(self._read_line, ">>> " if not lines else "... ")
            if line == END_OF_CELL and lines:
                break
            lines.append(line)
        return Completion(text=self.protocol.wrap_human("\n".join(lines)), finish_reason="stop")
