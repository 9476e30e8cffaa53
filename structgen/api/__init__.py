"""What users touch: the `LM` handle and its one-call modes, the Pydantic decorator, tools and
the tool loop, semantic validators. Imports torch and transformers (unlike the compiler core)."""

from structgen.api.lm import LM, default_lm
from structgen.api.partial import parse_partial
from structgen.api.structured import (
    Partial,
    generate_object,
    generation_schema,
    stream_object,
    structured,
)
from structgen.api.tools import (
    Tool,
    ToolCall,
    ToolCallRecord,
    ToolRun,
    ToolTurn,
    TurnRecord,
    execute_tool_calls,
    parse_tool_turn,
    run_tools,
    tool,
    tool_call_grammar,
    tool_prompt,
    turn_schema,
)

__all__ = [
    "LM",
    "Partial",
    "Tool",
    "ToolCall",
    "ToolCallRecord",
    "ToolRun",
    "ToolTurn",
    "TurnRecord",
    "default_lm",
    "execute_tool_calls",
    "generate_object",
    "generation_schema",
    "parse_partial",
    "parse_tool_turn",
    "run_tools",
    "stream_object",
    "structured",
    "tool",
    "tool_call_grammar",
    "tool_prompt",
    "turn_schema",
]
