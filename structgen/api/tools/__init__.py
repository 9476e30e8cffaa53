"""Tool calling: tools from Python functions or OpenAI specs, a constrained turn, and the loop.

One module per job: `spec.py` (the `Tool`), `turn.py` (the turn schema and its parser),
`guard.py` (no repeated calls, answers closed in time; the turn grammar), `templates.py` (chat
template probing and rendering), `run.py` (`run_tools`).

A model's turn is one JSON object, constrained by one JSON Schema compiled per tool set:

    {"tool_calls": [{"name": "<tool>", "arguments": {...}}, ...]}   call one or more tools
    {"answer": "<text>"}                                              the final answer

The `name` of each call is a `const` and its `arguments` are that tool's own argument schema
(an `anyOf` over the tools), so a call of an unknown tool, or with invalid arguments, cannot be
generated at all. `tool_choice` picks the branches: "auto" (either), "required" (calls only),
"none" (answer only) or a tool name (calls of that tool only). A turn holds at most
`max_calls_per_turn` calls (`maxItems`), and a guard beside the grammar stops a model that
repeats itself: once a call equals an earlier one (same name, equal arguments; in the turn, or
made earlier in the run), the only way on is to close the turn, and the repeat is dropped.
Given the turn's token budget, the same guard closes an answer in time to end within it.

`run_tools` loops: generate a turn, run every call in it (an exception becomes an error message
for the model, never the user's problem), put the calls and their results into the conversation
through the chat template, and go again until the model answers; the last allowed step is forced
to answer, so a run always ends with one, and so is the step after a turn that only repeated
calls. See docs/guide/tools.md.
"""

from __future__ import annotations

from structgen.api.tools.guard import _ANSWER_RESERVE as _ANSWER_RESERVE
from structgen.api.tools.guard import tool_call_grammar
from structgen.api.tools.run import ToolRun, TurnRecord, execute_tool_calls, run_tools
from structgen.api.tools.spec import (
    DEFAULT_MAX_CALLS_PER_TURN,
    TURN_SCHEMA_OPTIONS,
    Tool,
    ToolChoice,
    ToolLike,
    as_tools,
    tool,
)
from structgen.api.tools.templates import TemplateSupport, template_support, tool_prompt
from structgen.api.tools.turn import (
    ToolCall,
    ToolCallRecord,
    ToolTurn,
    parse_tool_turn,
    turn_schema,
)
from structgen.api.tools.turn import _call_key as _call_key

__all__ = [
    "DEFAULT_MAX_CALLS_PER_TURN",
    "TURN_SCHEMA_OPTIONS",
    "TemplateSupport",
    "Tool",
    "ToolCall",
    "ToolCallRecord",
    "ToolChoice",
    "ToolLike",
    "ToolRun",
    "ToolTurn",
    "TurnRecord",
    "as_tools",
    "execute_tool_calls",
    "parse_tool_turn",
    "run_tools",
    "template_support",
    "tool",
    "tool_call_grammar",
    "tool_prompt",
    "turn_schema",
]
