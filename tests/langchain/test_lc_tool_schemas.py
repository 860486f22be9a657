"""The tool schemas a model call's record keeps: converted once per tool, never stale."""

from __future__ import annotations

from langchain_core.tools import StructuredTool, tool
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import BaseModel

from langchain_convmem._common import tool_schemas


@tool
def lookup_customer(name: str) -> str:
    """Look a customer up by name."""
    return name


class _Args(BaseModel):
    region: str


def test_schemas_equal_the_conversion_each_call() -> None:
    first = tool_schemas([lookup_customer])
    again = tool_schemas([lookup_customer])
    assert first == again == (convert_to_openai_tool(lookup_customer),)


def test_each_call_gets_its_own_copy() -> None:
    first = tool_schemas([lookup_customer])
    first[0]["function"]["name"] = "mutated by a caller"
    assert tool_schemas([lookup_customer])[0]["function"]["name"] == "lookup_customer"


def test_a_changed_tool_is_converted_again() -> None:
    t = StructuredTool.from_function(lambda region: region, name="orders",
                                     description="Open orders.", args_schema=_Args)
    assert tool_schemas([t])[0]["function"]["description"] == "Open orders."
    t.description = "Open orders in a region."
    assert tool_schemas([t])[0]["function"]["description"] == "Open orders in a region."
    t.name = "open_orders"
    assert tool_schemas([t])[0]["function"]["name"] == "open_orders"


def test_dict_schemas_and_dict_tools_are_taken_as_they_are() -> None:
    as_dict = {"type": "function", "function": {"name": "x", "parameters": {}}}
    assert tool_schemas([as_dict]) == (as_dict,)
    t = StructuredTool.from_function(
        lambda region: region, name="by_dict", description="d.",
        args_schema={"type": "object", "properties": {"region": {"type": "string"}}},
    )
    schema = tool_schemas([t])[0]
    assert schema == convert_to_openai_tool(t)
    t.args_schema["properties"]["limit"] = {"type": "integer"}  # type: ignore[index]
    assert "limit" in tool_schemas([t])[0]["function"]["parameters"]["properties"]
