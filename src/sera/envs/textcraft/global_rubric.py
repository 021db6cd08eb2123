"""The fixed, task-independent TextCraft rubric of the "global fixed rubric" ablation (sera-spec §4.5).

Every delegation is scored with this one rubric instead of one the parent writes. The structure
(gate, four failure conditions, five items and their weights, anchors, a six-step procedure)
follows the paper's ablation; the wording is ours. It is validated by the strict parser at import.
"""

from __future__ import annotations

from sera.rubric.schema import STRICT, Rubric, rubric_from_dict

_SCORING_PROCEDURE = """\
1. Check the success gate and the failure conditions first. If the gate is not met or any \
failure condition holds, success is false and the final score is exactly 0.0.
2. Otherwise score each rubric item between 0 and 1 from the trajectory and the final inventory.
3. Use the anchors 0.0 (absent), 0.25 (poor), 0.5 (partial), 0.75 (good) and 1.0 (complete).
4. Combine the item scores as their weighted sum.
5. Calibrate the total with the same anchors while keeping the order between better and worse work.
6. A trajectory that passes the gate scores above 0."""

_GLOBAL_TEXTCRAFT = {
    "rubric_items": [
        {
            "name": "Goal Fulfillment",
            "weight": 0.40,
            "description": "The delegated task is done: the requested items exist in the inventory "
            "in the requested quantity, or the requested information was found.",
            "score_0": "None of the requested items or information was produced.",
            "score_full": "Everything the delegated task asked for is present, in full quantity.",
        },
        {
            "name": "Correctness and Grounding",
            "weight": 0.25,
            "description": "What the sub-agent reports matches what the tools and the inventory "
            "show; nothing is claimed that the trajectory does not support.",
            "score_0": "The finish message claims results that the observations contradict or never show.",
            "score_full": "Every reported result is backed by a tool output or the final inventory.",
        },
        {
            "name": "Utility to Parent",
            "weight": 0.15,
            "description": "The finish message gives the parent what it needs to continue: what "
            "was made, how many, and any shortage or problem met.",
            "score_0": "No finish message, or one the parent cannot act on.",
            "score_full": "A short, accurate summary of the outcome, including remaining gaps.",
        },
        {
            "name": "Action Validity",
            "weight": 0.10,
            "description": "Tool calls use real recipe and item names with correct arguments and "
            "rarely fail.",
            "score_0": "Most calls fail or use invented items or recipes.",
            "score_full": "Every call is well formed and refers to items and recipes that exist.",
        },
        {
            "name": "Efficiency",
            "weight": 0.10,
            "description": "The task is done without redundant lookups, repeated failed crafts, "
            "loops or work outside the delegated task.",
            "score_0": "Most of the budget goes to loops, repeated failures or unrelated work.",
            "score_full": "Each step moves the delegated task forward.",
        },
    ],
    "success_gate": "The sub-agent completed the delegated task and returned a truthful, usable "
    "result; otherwise the score is exactly 0.0.",
    "failure_conditions": [
        "The delegated task was not completed.",
        "The sub-agent stopped, crashed or looped before finishing.",
        "The reported result is fabricated or contradicted by the tool outputs or the inventory.",
        "The information the parent needs to continue is missing from the result.",
    ],
    "scoring_procedure": _SCORING_PROCEDURE,
}

GLOBAL_TEXTCRAFT_RUBRIC: Rubric = rubric_from_dict(_GLOBAL_TEXTCRAFT, STRICT)
"""The one rubric every TextCraft delegation is scored with in the global-rubric ablation."""
