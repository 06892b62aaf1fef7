"""The simulator's prompt cache (sim/cache.py) and its wire formats, read back through litellm."""

from __future__ import annotations

import json
from typing import Any

import pytest

from contextkit import backend
from contextkit.sim import GatewaySimulator
from contextkit.sim.cache import CacheUse, PromptBlock, PromptCache
from contextkit.sim.model import Conversation
from contextkit.sim.wire import PRIMING_TOKENS, count_tokens, parse_anthropic, parse_openai, prompt_blocks

BIG = "\n".join(f"line {i}: a stable system prompt for the prompt-cache tests" for i in range(300))
EPH = {"type": "ephemeral"}


def blocks(*tokens: int, marks: tuple[int, ...] = (), salt: str = "") -> list[PromptBlock]:
    return [PromptBlock(f"{salt}{i}-{t}", t, i in marks) for i, t in enumerate(tokens)]


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


# the cache model -------------------------------------------------------------------------------


def test_automatic_mode_reads_the_longest_cached_prefix():
    cache = PromptCache(min_tokens=1000)
    first = cache.use(blocks(800, 400, 300))
    assert first == CacheUse(prompt_tokens=1500, read_tokens=0, write_tokens=1500)
    again = cache.use(blocks(800, 400, 300, 200))
    assert (again.read_tokens, again.write_tokens) == (1500, 200)
    forked = cache.use(blocks(800, 400) + blocks(999, salt="x"))
    assert forked.read_tokens == 1200  # the prefix up to the first differing block


def test_minimum_size_granularity_and_namespaces():
    cache = PromptCache(min_tokens=1024)
    assert cache.use(blocks(500, 500)).write_tokens == 0  # 1000 < 1024: nothing is cached
    assert cache.use(blocks(500, 500, 10)).read_tokens == 0
    cache.use(blocks(700, 700, 700))
    assert cache.use(blocks(700, 700, 700, 5), granularity=128).read_tokens == 1024 + 8 * 128  # 2100 in steps of 128
    assert cache.use(blocks(700, 700, 700), namespace="other").read_tokens == 0


def test_entries_expire_after_the_ttl_and_hits_refresh_them():
    clock = Clock()
    cache = PromptCache(min_tokens=10, ttl=300, clock=clock)
    cache.use(blocks(100, 100))
    clock.now = 299
    assert cache.use(blocks(100, 100)).read_tokens == 200  # a hit refreshes the entry
    clock.now = 598
    assert cache.use(blocks(100, 100)).read_tokens == 200
    clock.now = 1000
    assert cache.use(blocks(100, 100)).read_tokens == 0
    cache.clear()
    assert len(cache) == 0


def test_breakpoint_mode_caches_only_at_breakpoints_with_a_lookback():
    cache = PromptCache(min_tokens=10, lookback=2)
    assert cache.use(blocks(100, 100, 100), breakpoints=True) == CacheUse(300, 0, 0, 0)  # no marks: no cache
    cache.use(blocks(100, 100, 100, marks=(1,)), breakpoints=True)  # writes the prefix ending at block 1
    use = cache.use(blocks(100, 100, 100, 100, marks=(3,)), breakpoints=True)
    assert (use.read_tokens, use.write_tokens, use.breakpoints) == (200, 200, 1)  # found 2 blocks back
    far = cache.use(blocks(100, 100, 1, 2, 3, 4, 5, marks=(6,), salt=""), breakpoints=True)
    assert far.read_tokens == 0  # the cached prefix (block 1) is more than 2 blocks before the mark
    assert far.uncached_tokens == far.prompt_tokens - far.write_tokens


def test_blocks_add_up_to_the_prompt_tokens_and_ignore_cache_control():
    tools = [{"type": "function", "function": {"name": "grep", "parameters": {"type": "object"}}}]
    body: dict[str, Any] = {
        "tools": tools,
        "messages": [
            {"role": "system", "content": BIG},
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c", "type": "function", "function": {"name": "grep", "arguments": '{"pattern": "x"}'}}]},
            {"role": "tool", "tool_call_id": "c", "content": "found"},
        ],
    }  # fmt: skip
    got = prompt_blocks("openai", body)
    assert PRIMING_TOKENS + sum(b.tokens for b in got) == count_tokens(parse_openai(body), body)
    marked = json.loads(json.dumps(body))
    marked["messages"][1]["cache_control"] = EPH
    again = prompt_blocks("openai", marked)
    assert [b.digest for b in again] == [b.digest for b in got] and again[2].breakpoint
    anthropic = {"system": [{"type": "text", "text": BIG, "cache_control": EPH}], "messages": [
        {"role": "user", "content": [{"type": "text", "text": "hi"}]}]}  # fmt: skip
    got = prompt_blocks("anthropic", anthropic)
    conv: Conversation = parse_anthropic(anthropic)
    assert PRIMING_TOKENS + sum(b.tokens for b in got) == count_tokens(conv, anthropic) and got[0].breakpoint


# the wire, through litellm ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def gw():
    with GatewaySimulator(record_bodies=True) as sim:
        yield sim


def call(gw: GatewaySimulator, route: str, messages: list[dict[str, Any]], **kw: Any) -> Any:
    return backend.completion(messages=messages, timeout=10, **gw.litellm_kwargs(route), **kw)


def conversation(extra: str = "") -> list[dict[str, Any]]:
    return [{"role": "system", "content": BIG}, {"role": "user", "content": f"question {extra}"}]


@pytest.mark.parametrize("stream", [False, True])
def test_openai_route_reports_cached_tokens_in_prompt_tokens_details(gw: GatewaySimulator, stream: bool):
    gw.reset()
    first = call(gw, "openai", conversation("a"), stream=stream)
    second = call(gw, "openai", conversation("b"), stream=stream)
    if stream:
        first = backend.stream_chunk_builder(list(first))
        second = backend.stream_chunk_builder(list(second))
    records = gw.requests
    assert backend.cache_usage(first.usage) == (0, 0) and records[0].cache_write_tokens > 1024
    shared = prompt_blocks("openai", json.loads(gw.body(records[1].seq)))[0].tokens  # the system message
    assert records[1].cached_tokens == 1024 + (shared - 1024) // 128 * 128  # OpenAI: steps of 128 tokens
    assert second.usage.prompt_tokens_details.cached_tokens == records[1].cached_tokens
    assert second.usage.prompt_tokens == records[1].tokens  # cached tokens are part of prompt_tokens
    assert backend.cache_usage(second.usage) == (records[1].cached_tokens, 0)


@pytest.mark.parametrize("stream", [False, True])
def test_anthropic_route_reports_reads_and_writes_only_with_breakpoints(gw: GatewaySimulator, stream: bool):
    gw.reset()

    def usage(messages: list[dict[str, Any]]) -> Any:
        response = call(gw, "anthropic", messages, stream=stream)
        if stream:
            response = backend.stream_chunk_builder(list(response))
        return response.usage

    plain = usage(conversation("a"))
    assert backend.cache_usage(plain) == (0, 0) and gw.requests[-1].cache_write_tokens == 0
    marked = conversation("a")
    marked[0]["cache_control"] = EPH
    written = usage(marked)
    system_tokens = gw.requests[-1].cache_write_tokens
    assert system_tokens > 1024 and getattr(written, "cache_creation_input_tokens", None) == system_tokens
    assert backend.cache_usage(written) == (0, system_tokens)
    marked[1]["content"] = "question b"
    read = usage(marked)
    assert getattr(read, "cache_read_input_tokens", None) == system_tokens == gw.requests[-1].cached_tokens
    assert read.prompt_tokens_details.cached_tokens == system_tokens
    assert read.prompt_tokens == gw.requests[-1].tokens  # litellm adds the cached part back in
    assert backend.cache_usage(read) == (system_tokens, 0)


def test_cache_settings_validate_and_can_be_switched_off(gw: GatewaySimulator):
    from contextkit.errors import ConfigError

    with pytest.raises(ConfigError, match="cache_min_tokens"):
        GatewaySimulator(cache_min_tokens=0)
    gw.reset(prompt_cache=False)
    call(gw, "openai", conversation())
    response = call(gw, "openai", conversation())
    assert gw.requests[-1].cached_tokens == 0 and backend.cache_usage(response.usage) == (0, 0)
    gw.reset(cache_min_tokens=10_000)
    call(gw, "openai", conversation())
    call(gw, "openai", conversation())
    assert gw.requests[-1].cached_tokens == 0  # below the minimum cacheable size
    gw.reset()
    call(gw, "openai", conversation())
    gw.clear_cache()
    call(gw, "openai", conversation())
    assert gw.requests[-1].cached_tokens == 0


def test_cost_uses_litellms_cache_prices():
    info = backend.model_info("anthropic/claude-sonnet-4-5")
    got = backend.request_cost(
        "anthropic/claude-sonnet-4-5", prompt_tokens=10_000, completion_tokens=100, cached_tokens=6_000,
        cache_write_tokens=3_000,
    )  # fmt: skip
    expected = (
        1_000 * info["input_cost_per_token"] + 6_000 * info["cache_read_input_token_cost"]
        + 3_000 * info["cache_creation_input_token_cost"] + 100 * info["output_cost_per_token"]
    )  # fmt: skip
    assert got == pytest.approx(expected)
    assert info["cache_read_input_token_cost"] < info["input_cost_per_token"] < info["cache_creation_input_token_cost"]
    assert backend.request_cost("openai/sim-model", prompt_tokens=10, completion_tokens=1) == 0.0
    assert backend.cache_usage(None) == (0, 0)
