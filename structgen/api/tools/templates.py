"""Rendering turns for the model: what a chat template supports (probed once), tool instructions,
and calls and results as conversation messages.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from structgen._json_data import canonical_json
from structgen.api.tools.spec import Tool, ToolLike, as_tools
from structgen.api.tools.turn import _max_calls
from structgen.errors import GenerationError

if TYPE_CHECKING:
    from structgen.api.lm import LM


@dataclass(frozen=True, slots=True)
class TemplateSupport:
    """What a chat template does with tools: `tools=`, role "tool", and a tool message's name."""

    tools: bool
    tool_role: bool
    tool_name: bool


_SUPPORT: dict[str, TemplateSupport] = {}
_PROBE_TOOL = "structgen_probe_tool_q7"
_PROBE_RESULT = "structgen_probe_result_z3"


def template_support(tokenizer: Any) -> TemplateSupport:
    """Probe the tokenizer's chat template once (cached by template text)."""
    template = getattr(tokenizer, "chat_template", None)
    if not template:
        return TemplateSupport(False, False, False)
    key = template if isinstance(template, str) else canonical_json(template)
    found = _SUPPORT.get(key)
    if found is not None:
        return found
    spec = Tool(_PROBE_TOOL, "probe", {"type": "object", "properties": {}}).openai_spec()
    try:
        text = tokenizer.apply_chat_template(
            [{"role": "user", "content": "hi"}], tools=[spec], tokenize=False
        )
        takes_tools = _PROBE_TOOL in str(text)
    except Exception:
        takes_tools = False
    probe = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "{}"},
        {"role": "tool", "tool_call_id": "call_0", "name": _PROBE_TOOL, "content": _PROBE_RESULT},
    ]
    try:
        text = str(tokenizer.apply_chat_template(probe, tokenize=False))
        tool_role, tool_name = _PROBE_RESULT in text, _PROBE_TOOL in text
    except Exception:
        tool_role = tool_name = False
    found = _SUPPORT[key] = TemplateSupport(takes_tools, tool_role, tool_name)
    return found


def _tool_listing(tools: Sequence[Tool]) -> str:
    listed = "\n".join(
        json.dumps(
            {"name": t.name, "description": t.description, "parameters": t.parameters},
            ensure_ascii=False,
        )
        for t in tools
    )
    return f"You can call these tools (arguments as JSON Schema):\n{listed}"


def _instructions(tools: Sequence[Tool], support: TemplateSupport, limit: int | None) -> str:
    """The system text that tells the model the tools (unless the template does) and format."""
    parts = []
    if not support.tools:
        parts.append(_tool_listing(tools))
    how = "one tool" if limit == 1 else "one or more tools"
    parts.append(
        "Reply with one JSON object and nothing else:\n"
        '{"tool_calls":[{"name":"<tool name>","arguments":{...}}]} to call '
        f"{how}, or\n"
        '{"answer":"<text>"} to give your final answer.\n'
        "Tool results come back in the next messages; answer once you have what you need."
    )
    return "\n\n".join(parts)


def _as_json_value(text: str) -> Any:
    """Text that is JSON as its value (so it is not escaped twice), other text as a string."""
    try:
        return json.loads(text)
    except (json.JSONDecodeError, ValueError):
        return text


def _call_pairs(calls: Sequence[Mapping[str, Any]]) -> list[tuple[str, Any]]:
    """OpenAI `tool_calls` entries as (name, arguments) pairs (arguments parsed from text)."""
    pairs = []
    for c in calls:
        fn = c.get("function", c)
        arguments = fn.get("arguments", {})
        if isinstance(arguments, str):
            with contextlib.suppress(json.JSONDecodeError):
                arguments = json.loads(arguments)
        pairs.append((str(fn.get("name")), arguments))
    return pairs


def _call_turn_text(calls: Sequence[Mapping[str, Any]]) -> str:
    """An assistant tool-call message as turn text (what the model writes in this format)."""
    items = [{"name": n, "arguments": a} for n, a in _call_pairs(calls)]
    return json.dumps({"tool_calls": items}, ensure_ascii=False, separators=(",", ":"))


def _template_messages(
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[ToolLike],
    support: TemplateSupport,
    *,
    parallel_tool_calls: bool | int = True,
    tool_format: str = "json",
) -> list[dict[str, Any]]:
    """The conversation as the chat template should see it in the turn format.

    The instructions join the system message; assistant tool calls become their turn text;
    tool results become role "tool" messages (their name and call id in the text when the
    template drops them), or one user message per step when the template has no tool role.
    """
    tool_list = as_tools(tools)
    native = None
    if tool_format != "json":
        from structgen.api.tools.formats import tool_format as format_named

        native = format_named(tool_format)
    out: list[dict[str, Any]] = []
    pending: list[str] = []  # tool results waiting for a user message (no tool role)
    for m in messages:
        msg = dict(m)
        role = msg.get("role")
        if role == "tool":
            name = str(msg.get("name") or "tool")
            call = str(msg.get("tool_call_id") or "")
            content = str(msg.get("content") or "")
            if support.tool_role:
                if not support.tool_name:
                    content = json.dumps(
                        {"tool": name, "call_id": call, "result": _as_json_value(content)},
                        ensure_ascii=False,
                    )
                out.append({"role": "tool", "name": name, "tool_call_id": call, "content": content})
            else:
                pending.append(f"Result of {name} ({call}): {content}")
            continue
        if pending:
            out.append({"role": "user", "content": "\n".join(pending)})
            pending = []
        if role == "assistant" and msg.get("tool_calls"):
            if native is None:
                msg = {"role": "assistant", "content": _call_turn_text(msg["tool_calls"])}
            elif not support.tools:  # the template cannot render calls: the format's text
                msg = {
                    "role": "assistant",
                    "content": native.render(_call_pairs(msg["tool_calls"])),
                }
            # (else the template renders the calls in its own format)
        elif msg.get("content") is None:
            msg["content"] = ""
        out.append(msg)
    if pending:
        out.append({"role": "user", "content": "\n".join(pending)})
    if native is not None:
        if support.tools:
            return out  # the template lists the tools and says how to call them
        listing = _tool_listing(tool_list)
        text = f"{listing}\n\n{native.instructions(tool_list)}" if tool_list else ""
    else:
        text = _instructions(tool_list, support, _max_calls(parallel_tool_calls))
    if not text:
        return out
    if out and out[0].get("role") == "system":
        first = str(out[0].get("content") or "")
        out[0] = {**out[0], "content": f"{first}\n\n{text}" if first else text}
    else:
        out.insert(0, {"role": "system", "content": text})
    return out


def tool_prompt(
    lm_or_tokenizer: LM | Any,
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[ToolLike],
    *,
    parallel_tool_calls: bool | int = True,
    tool_format: str = "json",
) -> str:
    """The prompt text of the next turn: the conversation through the chat template.

    `tools=` goes to the template when it renders them; otherwise the system message lists the
    tools. The reply format is described (the grammar enforces it either way): structgen's JSON
    turn, or a native `tool_format` by example — unless the template renders tools, which then
    says it in its own words, and renders earlier calls in its own format. Without a chat
    template the messages are written as `role: content` paragraphs.
    """
    from structgen.api.lm import LM

    tokenizer = lm_or_tokenizer.tokenizer if isinstance(lm_or_tokenizer, LM) else lm_or_tokenizer
    support = template_support(tokenizer)
    tool_list = as_tools(tools)
    rendered = _template_messages(
        messages,
        tool_list,
        support,
        parallel_tool_calls=parallel_tool_calls,
        tool_format=tool_format,
    )
    if not getattr(tokenizer, "chat_template", None):
        lines = [f"{m['role']}: {m.get('content', '')}" for m in rendered]
        return "\n\n".join(lines) + "\n\nassistant: "
    specs = [t.openai_spec() for t in tool_list] if support.tools and tool_list else None
    try:
        text = tokenizer.apply_chat_template(
            rendered, tools=specs, add_generation_prompt=True, tokenize=False
        )
    except Exception as exc:
        raise GenerationError(f"cannot apply the chat template to the conversation: {exc}") from exc
    return str(text)
