"""The floor diagnostic names what does not fit - images, tool-call arguments - with the fix that
works; an oversized tool-call argument in the history is archived and excerpted once its call ran."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from contextkit import Limits, Message
from contextkit.archive import Archive
from contextkit.errors import PayloadFloorError
from contextkit.messages import ToolCall
from contextkit.policy.arguments import excerpt_tool_arguments, is_archived_arguments
from contextkit.policy.expand import expand_markers
from contextkit.policy.testing import MemorySink
from contextkit.session.core import Session
from contextkit.sim import GatewaySimulator, Workspace

PHOTO = "data:image/png;base64," + base64.b64encode(bytes(range(256)) * 400).decode()  # ~136 KB


def session_for(gw: GatewaySimulator, cap: str = "64KB") -> Session:
    kw = gw.litellm_kwargs()
    model = kw.pop("model")
    return Session(model, archive=Archive.in_memory(session_id="f"), session_id="f", status=None,
                   limits=Limits(context_window=1_000_000, retry_backoff=0.0, max_payload=cap), **kw)  # fmt: skip


def big_write(chars: int = 150_000) -> list[Message]:
    content = Workspace(seed=9, target_bytes=chars).read_file("src/app/core.py").content
    call = ToolCall("call_w", "write_file", json.dumps({"path": "src/app/core.py", "content": content}))
    return [
        Message.user("rewrite core.py"),
        Message.assistant("", tool_calls=[call]),
        Message("tool", "wrote src/app/core.py", tool_call_id="call_w", name="write_file"),
    ]


def test_an_image_that_cannot_fit_is_named_with_the_fix(gw: GatewaySimulator) -> None:
    session = session_for(gw)
    with pytest.raises(PayloadFloorError) as info:
        session.send(Message.user("what is in this picture?", images=(PHOTO,)))
    text = str(info.value)
    assert "1 image of 1" in text and "fewer or smaller images" in text and "of text" in text
    assert not gw.requests  # known before sending


def test_an_answered_oversized_tool_call_argument_is_archived_and_excerpted(gw: GatewaySimulator) -> None:
    session = session_for(gw)
    history = big_write()
    original = history[1].tool_calls[0].arguments
    session.add_messages(history)
    assert session.send("done? summarize the change").text  # under a 64 KB cap with a 150 KB argument
    (call,) = [c for m in session.history for c in m.tool_calls]
    assert is_archived_arguments(call.arguments) and len(call.arguments) < 10_000
    stub = json.loads(call.arguments)  # still JSON: every route parses arguments
    assert original in expand_markers(stub["archived_arguments"], session.archive)
    assert all(r.bytes <= 64 * 1024 for r in gw.requests)


def test_excerpting_arguments_leaves_unanswered_calls_and_is_idempotent() -> None:
    sink = MemorySink()
    history = big_write(40_000)
    pending = [*history[:2]]  # the call has no result yet: the model may still need it whole
    assert excerpt_tool_arguments(pending, archive=sink, max_chars=5_000) == (pending, ())
    once, keys = excerpt_tool_arguments(history, archive=sink, max_chars=5_000)
    assert len(keys) == 1 and sink.get(keys[0]) == history[1].tool_calls[0].arguments
    twice, again = excerpt_tool_arguments(once, archive=sink, max_chars=5_000)
    assert twice == once and again == ()


def test_arguments_that_stay_too_big_are_named(gw: GatewaySimulator, monkeypatch: Any) -> None:
    """When the arguments themselves are what remains (a call not yet answered cannot be excerpted),
    the diagnostic names them, not "your newest message is 27 B"."""
    from contextkit.limits import floor

    monkeypatch.setattr(floor, "excerpt_tool_arguments", lambda h, **_: (list(h), ()))
    session = session_for(gw, cap="32KB")
    session.add_messages(big_write(60_000))
    with pytest.raises(PayloadFloorError) as info:
        session.send("and now?")
    text = str(info.value)
    assert "tool-call arguments kept are" in text and "write_file" in text and "in pieces" in text
