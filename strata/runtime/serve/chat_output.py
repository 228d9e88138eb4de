"""A chat reply read for reasoning and tool calls (`chat_tools.ChatPlan`), as OpenAI's message or
as the deltas of its stream.

    out = ChatOutput(plan)
    for text in streamed_texts:
        for delta in out.feed(text): ...         # {"content": ...}, {"reasoning_content": ...}, {"tool_calls": [...]}
    deltas = out.finish()
    out.message(), out.finish_reason("stop")     # the whole reply, from the same pieces

The reply is split first into reasoning and answer (`text.reasoning`), then the answer into content
and calls (`text.tool_calls`). A call is streamed as two deltas once it is whole and checked: its
index, id, type and name with empty arguments, then its arguments, so the fragments of a call
always join to the JSON text of the unstreamed reply's call. The finish reason is "tool_calls"
when the reply called a tool.
"""

from __future__ import annotations

import uuid
from typing import Any

from strata.runtime.serve.chat_tools import ChatPlan
from strata.runtime.text.reasoning import ReasoningSplitter
from strata.runtime.text.tool_calls import Call, Content, ToolCallParser


class ChatOutput:
    def __init__(self, plan: ChatPlan) -> None:
        self.plan = plan
        self._reasoning = ReasoningSplitter(plan.think, thinking=plan.thinking) if plan.think else None
        names = plan.tool_names if plan.tool_choice != "function" else {plan.forced_name}
        self._tools = ToolCallParser(plan.tool_format, names) if plan.tool_format else None
        self.content: list[str] = []
        self.reasoning: list[str] = []
        self.calls: list[dict[str, Any]] = []

    def feed(self, text: str) -> list[dict[str, Any]]:
        if self._reasoning is None:
            return self._answer(text, final=False)
        reasoning, content = self._reasoning.feed(text)
        return self._think(reasoning) + self._answer(content, final=False)

    def finish(self) -> list[dict[str, Any]]:
        if self._reasoning is None:
            return self._answer("", final=True)
        reasoning, content = self._reasoning.finish()
        return self._think(reasoning) + self._answer(content, final=True)

    def _think(self, text: str) -> list[dict[str, Any]]:
        if not text:
            return []
        self.reasoning.append(text)
        return [{"reasoning_content": text}]

    def _answer(self, text: str, final: bool) -> list[dict[str, Any]]:
        if self._tools is None:
            pieces = [Content(text)]
        else:
            pieces = self._tools.feed(text) if text else []
            if final:
                pieces += self._tools.finish()
        deltas: list[dict[str, Any]] = []
        for piece in pieces:
            if isinstance(piece, Content):
                if piece.text:
                    self.content.append(piece.text)
                    deltas.append({"content": piece.text})
            else:
                deltas += self._call(piece)
        return deltas

    def _call(self, call: Call) -> list[dict[str, Any]]:
        index = len(self.calls)
        entry = {"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function",
                 "function": {"name": call.name, "arguments": call.arguments}}
        self.calls.append(entry)
        head = {"index": index, "id": entry["id"], "type": "function", "function": {"name": call.name, "arguments": ""}}
        return [{"tool_calls": [head]}, {"tool_calls": [{"index": index, "function": {"arguments": call.arguments}}]}]

    def message(self) -> dict[str, Any]:
        """OpenAI's assistant message of the whole reply (after `finish`)."""
        content = "".join(self.content)
        message: dict[str, Any] = {"role": "assistant", "content": content if content or not self.calls else None}
        if self.reasoning or (self._reasoning is not None and self._reasoning.reasoned):
            message["reasoning_content"] = "".join(self.reasoning)
        if self.calls:
            message["tool_calls"] = self.calls
        return message

    def finish_reason(self, reason: str) -> str:
        return "tool_calls" if self.calls else reason
