"""External judge: binary success labels for child agents from an OpenAI-compatible model.

`JudgeClient.judge_child` asks whether a child agent completed the goal its parent assigned
(TextWorld labels, sera-spec §5.3); `JudgeClient.complete_json` serves other external-model
requests (rubric writing / scoring ablations). Replies are parsed strictly (`parse`), cached on
disk (`cache`) and counted per role in the client's `usage`.
"""

from sera.judge.client import JsonReply, JudgeClient, Judgement
from sera.judge.prompts import build_judge_messages, render_trajectory

__all__ = ["JsonReply", "JudgeClient", "Judgement", "build_judge_messages", "render_trajectory"]
