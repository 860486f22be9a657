"""``wrap_tools``: every tool call's ``ToolOutput`` goes through the domain's tool rules.

Each wrapped tool calls the original, then hands ``(name, kwargs, result)`` to the
façade's ``record_tool``, the result read from the ``ToolOutput`` by
``llamaindex_convmem.tool_results`` (``is_error``, ``raw_output``, ``content``; the
contract is ``docs/tool-results.md``),
so a lookup tool sets the focus the moment it returns, and the model's next step already
sees it in the block. The wrapper adds no policy: it only translates.

The thread is fixed when the tools are wrapped: pass the ``ConvMemMemory`` the agent uses
(its ``thread_id`` is taken), or a ``SessionMemory`` plus ``thread_id=``. Wrap the tools
per conversation (per ``agent.run`` thread), not once per process. With a transcript,
each call and its output join the turn's record (commit point 2), and wrapping through
a ``ConvMemMemory`` registers the tools' schemas for the model-input record.

Clarification with ``FunctionAgent``: when a tool returns several candidates the rule
cannot pick from, ``record_tool`` returns a ``Clarification``; the wrapped tool then
returns, instead of the raw listing, an output telling the model to ask that question
(the raw output stays in ``raw_output``), and ``ConvMemMemory``'s next ``aget`` (the
agent calls it after every tool round) replaces the block with the same instruction. The
model's next reply is the clarification; the agent stores it, which closes the turn, and
the user's answer ("Seattle.", "the first one") picks the focus on the next run.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from llama_index.core.tools import ToolMetadata, ToolOutput
from llama_index.core.tools.types import AsyncBaseTool, BaseTool, adapt_to_async_tool

from convmem.errors import ConfigError
from convmem.session import Clarification, SessionMemory
from llamaindex_convmem.memory import CLARIFY_INSTRUCTION, ConvMemMemory
from llamaindex_convmem.tool_results import tool_result


def _tool_args(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    if kwargs:
        return dict(kwargs)
    if len(args) == 1 and isinstance(args[0], dict):
        return dict(args[0])
    return {"input": args[0]} if args else {}


class ConvMemTool(AsyncBaseTool):
    """One tool whose every result is recorded in the thread's session state."""

    def __init__(self, tool: BaseTool, memory: SessionMemory, thread_id: str) -> None:
        self.tool: AsyncBaseTool = adapt_to_async_tool(tool)
        self.session_memory = memory
        self.thread_id = thread_id

    @property
    def metadata(self) -> ToolMetadata:
        return self.tool.metadata

    def _name(self, output: ToolOutput) -> str:
        return self.tool.metadata.name or output.tool_name

    @staticmethod
    def _answer(output: ToolOutput, clarification: Clarification | None) -> ToolOutput:
        if clarification is None:
            return output
        return ToolOutput(
            tool_name=output.tool_name,
            content=CLARIFY_INSTRUCTION + clarification.text,
            raw_input=output.raw_input,
            raw_output=output.raw_output,
        )

    def call(self, *args: Any, **kwargs: Any) -> ToolOutput:
        output = self.tool.call(*args, **kwargs)
        clarification = self.session_memory.record_tool(
            self.thread_id, self._name(output), _tool_args(args, kwargs), tool_result(output)
        )
        return self._answer(output, clarification)

    async def acall(self, *args: Any, **kwargs: Any) -> ToolOutput:
        output = await self.tool.acall(*args, **kwargs)
        clarification = await self.session_memory.arecord_tool(
            self.thread_id, self._name(output), _tool_args(args, kwargs), tool_result(output)
        )
        return self._answer(output, clarification)


def wrap_tools(
    tools: Sequence[BaseTool],
    memory: ConvMemMemory | SessionMemory,
    *,
    thread_id: str | None = None,
) -> list[ConvMemTool]:
    """Wrap each tool so its results feed the session state of one thread."""
    if isinstance(memory, ConvMemMemory):
        facade, thread = memory.session_memory, thread_id or memory.thread_id
        memory.describe_model(tool_schemas=tuple(t.metadata.to_openai_tool() for t in tools))
    elif isinstance(memory, SessionMemory):
        if not thread_id:
            raise ConfigError("wrap_tools: with a SessionMemory, pass thread_id=")
        facade, thread = memory, thread_id
    else:
        raise ConfigError(
            "wrap_tools: memory must be a ConvMemMemory or a SessionMemory, "
            f"got {type(memory).__name__}"
        )
    return [ConvMemTool(tool, facade, thread) for tool in tools]
