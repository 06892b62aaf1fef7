"""``Session(tool_index=True)``: one line per tool in every request, the full schema through ``describe_tools``."""

from __future__ import annotations

from typing import Annotated

import pytest
from pydantic import Field

from contextkit.archive import Archive
from contextkit.errors import ConfigError
from contextkit.limits.floor import floor_measure
from contextkit.policy.tool_index import LINE_CHARS, describe, index_schema
from contextkit.session.core import Session
from contextkit.sim import GatewaySimulator

LONG = "Search the inventory database for items.\n\n" + "It matches names, SKUs and warehouse codes. " * 30


def search_items(
    query: Annotated[str, Field(description="Words to look for; " + "a long explanation " * 20)],
    warehouse: Annotated[str, Field(description="A warehouse code such as WH-07; " + "more words " * 20)] = "",
) -> str:
    return f"found 3 items for {query} in {warehouse or 'every warehouse'}"


search_items.__doc__ = LONG


def count_stock(sku: Annotated[str, Field(description="The SKU, e.g. SKU-1234. " + "detail " * 30)]) -> str:
    """Count the stock of one SKU across every warehouse, including items in transit and on hold."""
    return f"{sku}: 42 in stock"


def _session(gw: GatewaySimulator, **kwargs: object) -> Session:
    kw = gw.litellm_kwargs()
    model = kw.pop("model")
    return Session(model, **kw, tools=[search_items, count_stock], archive=Archive.in_memory(session_id="i"),
                   status=None, **kwargs)  # type: ignore[arg-type]  # fmt: skip


def test_the_index_shrinks_the_floor_and_describe_tools_gives_the_full_schema() -> None:
    with GatewaySimulator() as gw:
        full = _session(gw)
        indexed = _session(gw, tool_index=True)
        names = [t["function"]["name"] for t in indexed.tool_schemas]
        assert names[:2] == ["search_items", "count_stock"] and "describe_tools" in names
        for schema in indexed.tool_schemas[:2]:
            description = schema["function"]["description"]
            assert "\n" not in description and len(description) <= LINE_CHARS + 40
            assert "description" not in str(schema["function"]["parameters"])
        # the floor (the smallest request recovery can reach) counts the tools as sent
        assert floor_measure(indexed._context()).bytes < 0.75 * floor_measure(full._context()).bytes
        # the model can still call a tool with its parameters, and ask for the full schema
        reply = indexed.send('[[tool:count_stock {"sku": "SKU-1234"}]] how many?')
        assert reply.tool_calls == 1
        indexed.send('[[tool:describe_tools {"names": "search_items"}]] tell me more')
        answer = [m for m in indexed.history if m.role == "tool"][-1].content
        assert "It matches names, SKUs and warehouse codes." in answer and '"warehouse"' in answer
        sent = gw.requests[-1].bytes
    assert sent < 20_000


def test_describe_names_unknown_tools_and_everything_for_star() -> None:
    schemas = [{"type": "function", "function": {"name": "a", "description": "A.", "parameters": {}}},
               {"type": "function", "function": {"name": "b", "description": "B.", "parameters": {}}}]  # fmt: skip
    assert '"name": "a"' in describe(schemas, "*") and '"name": "b"' in describe(schemas, "")
    assert "no tool named zz; the tools are: a, b" in describe(schemas, "a, zz")
    one = index_schema({"type": "function", "function": {"name": "a", "description": "x" * 500, "parameters": {}}})
    assert one["function"]["description"].startswith("x" * 90) and "..." in one["function"]["description"]
    params = {"type": "object", "properties": {"sku": {"type": "string", "description": "long " * 50, "enum": ["a"]}},
              "required": ["sku"]}  # fmt: skip
    two = index_schema({"type": "function", "function": {"name": "c", "description": "C.", "parameters": params}})
    assert two["function"]["parameters"] == {"type": "object", "properties": {"sku": {"type": "string", "enum": ["a"]}},
                                             "required": ["sku"]}  # fmt: skip


def test_a_tool_named_describe_tools_is_refused_with_the_index() -> None:
    def describe_tools(names: str) -> str:
        """Mine."""
        return names

    with pytest.raises(ConfigError, match="describe_tools"):
        Session("openai/sim-model", tools=[describe_tools], tool_index=True, status=None)
