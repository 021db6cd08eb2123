"""Finding a task by id in any environment's task list, with a helpful error."""

from __future__ import annotations

import difflib
from collections.abc import Sequence

from sera.types import Task


class UnknownTaskError(KeyError):
    """No task has the requested id."""

    def __str__(self) -> str:  # KeyError would print the message in quotes
        return str(self.args[0]) if self.args else ""


def find_task(tasks: Sequence[Task], task_id: str) -> Task:
    """The task with this id; `UnknownTaskError` (a KeyError) suggests close ids."""
    for task in tasks:
        if task.id == task_id:
            return task
    ids = [task.id for task in tasks]
    close = difflib.get_close_matches(task_id, ids, n=3, cutoff=0.6)
    hint = f"; did you mean {', '.join(repr(i) for i in close)}?" if close else ""
    span = f" ({ids[0]!r} .. {ids[-1]!r})" if ids else ""
    raise UnknownTaskError(f"no task with id {task_id!r} among {len(ids)} tasks{span}{hint}")
