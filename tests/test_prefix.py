"""Prefix-cache probe: shared_prefix and PrefixProbe."""

from __future__ import annotations

import json
import os
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from contextkit.prompt.prefix import PrefixProbe, PrefixSample, shared_prefix


def _naive(a: bytes, b: bytes) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


@given(st.binary(max_size=300), st.binary(max_size=300))
def test_matches_naive_on_random_bytes(a: bytes, b: bytes) -> None:
    assert shared_prefix(a, b) == _naive(a, b)


@given(st.binary(max_size=200), st.binary(max_size=50), st.binary(max_size=50))
def test_common_head_is_found(head: bytes, tail_a: bytes, tail_b: bytes) -> None:
    n = shared_prefix(head + tail_a, head + tail_b)
    assert n >= len(head)
    assert n == len(head) + _naive(tail_a, tail_b)


def test_edge_cases() -> None:
    assert shared_prefix(b"", b"") == 0
    assert shared_prefix(b"", b"abc") == 0
    assert shared_prefix(b"abc", b"abc") == 3
    assert shared_prefix(b"abc", b"abcdef") == 3  # append-only: the whole previous body
    assert shared_prefix(b"xbc", b"abc") == 0


def test_str_bodies_are_measured_as_utf8_bytes() -> None:
    # "é" is two bytes in UTF-8; the bodies differ in the second byte of the second "é"
    assert shared_prefix("aé", "aé") == 3
    assert shared_prefix("éé", "éè") == 3  # é = c3 a9, è = c3 a8: the lead byte c3 is shared
    assert shared_prefix("abc", b"abd") == 2


def test_bad_input_is_a_clear_type_error() -> None:
    with pytest.raises(TypeError, match="request body"):
        shared_prefix(None, b"x")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="request body"):
        PrefixProbe().feed(123)  # type: ignore[arg-type]


def test_difference_at_every_chunk_position() -> None:
    base = os.urandom(200_000)
    for pos in (0, 1, 65_535, 65_536, 65_537, 131_072, 199_999):
        changed = base[:pos] + bytes([base[pos] ^ 0xFF]) + base[pos + 1 :]
        assert shared_prefix(base, changed) == pos


def test_fast_for_megabyte_bodies() -> None:
    a = os.urandom(8 * 1024 * 1024)
    b = a[:7_654_321] + bytes([a[7_654_321] ^ 0xFF]) + a[7_654_322:]
    started = time.perf_counter()
    assert shared_prefix(a, b) == 7_654_321
    assert shared_prefix(a, a) == len(a)
    assert time.perf_counter() - started < 1.0  # a Python per-byte loop takes ~1 s per MB


def _body(messages: list[dict[str, str]]) -> bytes:
    return json.dumps({"messages": messages, "model": "m"}, separators=(",", ":")).encode()


def test_probe_reports_append_only_history_as_full_reuse() -> None:
    probe = PrefixProbe()
    history = [{"role": "system", "content": "sys"}, {"role": "user", "content": "q1"}]
    first = probe.feed(_body(history))
    assert first == PrefixSample(shared_bytes=0, share=None, body_bytes=len(_body(history)), previous_bytes=None)
    previous = _body(history)
    history += [{"role": "assistant", "content": "a1"}, {"role": "user", "content": "q2"}]
    second = probe.feed(_body(history))
    # everything but the closing "]," + model tail of the previous body is reused
    tail = len(b'],"model":"m"}')
    assert second.shared_bytes == len(previous) - tail
    assert second.share == pytest.approx((len(previous) - tail) / len(previous))
    assert second.previous_bytes == len(previous)


def test_probe_sees_a_rewrite_of_an_early_message() -> None:
    probe = PrefixProbe()
    history = [{"role": "system", "content": "sys"}, {"role": "user", "content": "x" * 1000}]
    probe.feed(_body(history))
    history[1] = {"role": "user", "content": "[cleared]"}
    sample = probe(_body(history))
    assert sample.shared_bytes == len(b'{"messages":[{"role":"system","content":"sys"},{"role":"user","content":"')
    assert sample.share is not None and sample.share < 0.1


def test_probe_reset_and_empty_previous() -> None:
    probe = PrefixProbe()
    probe.feed(b"")
    assert probe.feed(b"abc").share is None  # the previous body was empty: no share to report
    assert probe.previous_bytes == 3
    probe.reset()
    assert probe.previous_bytes is None
    assert probe.feed(b"abc").share is None
