"""Images are archived before any rewrite drops them (nothing lost: every removed byte is archived first).

The image bytes are looked for in the SQLite file itself, not only through the Archive API.
"""

from __future__ import annotations

import base64
import re
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from contextkit import Limits, Session
from contextkit.archive import Archive
from contextkit.markers import marker
from contextkit.messages import (
    IMAGE_LINE,
    Message,
    ToolCall,
    archived_text,
    from_wire,
    message_from_dict,
    message_to_dict,
    render_transcript,
    to_wire,
)
from contextkit.policy.microcompact import microcompact
from contextkit.policy.pairing import repair_tool_pairing
from contextkit.policy.summary import plan_segment, segment_transcript
from contextkit.policy.truncate import emergency_truncate
from contextkit.sim import GatewaySimulator

SCREENSHOT = bytes(range(256)) * 24 + b"screenshot-end"
PHOTO = b"\x89PNG\r\n\x1a\n" + bytes(reversed(range(256))) * 16
SCREENSHOT_URL = "data:image/png;base64," + base64.b64encode(SCREENSHOT).decode()
PHOTO_URL = "data:image/png;base64," + base64.b64encode(PHOTO).decode()
DATA_URL_RE = re.compile(r"\[image_url: data:image/png;base64,([A-Za-z0-9+/=]+)\]")


def images_in_sqlite(path: Path) -> set[bytes]:
    """Every image decoded from every blob stored in the SQLite file."""
    with sqlite3.connect(path) as conn:
        blobs = [bytes(row[0]).decode("utf-8", "surrogatepass") for row in conn.execute("SELECT content FROM blobs")]
    return {base64.b64decode(m.group(1)) for blob in blobs for m in DATA_URL_RE.finditer(blob)}


def agent_history() -> list[Message]:
    """A user photo, then a screenshot tool whose result carries an image (OpenAI content parts)."""
    shot = from_wire(
        {
            "role": "tool",
            "tool_call_id": "c1",
            "content": [
                {"type": "text", "text": "screenshot of the settings page\n" + "pixel row\n" * 400},
                {"type": "image_url", "image_url": {"url": SCREENSHOT_URL}},
            ],
        }
    )
    history = [
        Message.system("You are a UI tester."),
        from_wire(
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "what is wrong here?"},
                    {"type": "image_url", "image_url": {"url": PHOTO_URL}},
                ],
            }
        ),
        Message.assistant("Taking a screenshot.", [ToolCall("c1", "screenshot", "{}")]),
        shot,
    ]
    for i in range(6):
        history += [Message.assistant(f"answer {i}"), Message.user(f"question {i}")]
    return history


def test_archived_text_keeps_text_only_messages_unchanged() -> None:
    assert archived_text(Message.user("plain")) == "plain"
    both = archived_text(Message.user("look", images=(PHOTO_URL,)))
    assert both == "look\n" + IMAGE_LINE.format(url=PHOTO_URL, detail="")
    assert PHOTO_URL in render_transcript([Message.user("", images=(PHOTO_URL, SCREENSHOT_URL))])


def test_image_detail_is_kept_on_the_wire_and_in_the_archive(tmp_path: Path) -> None:
    raw = {"role": "user", "content": [{"type": "text", "text": "a"},
                                       {"type": "image_url", "image_url": {"url": PHOTO_URL, "detail": "low"}},
                                       {"type": "image_url", "image_url": {"url": SCREENSHOT_URL}}]}  # fmt: skip
    message = from_wire(raw)
    assert message.image_details == ("low", None)
    assert to_wire(message)["content"][1:] == raw["content"][1:]  # detail sent as given, not dropped
    assert message_from_dict(message_to_dict(message)) == message
    assert f"[image_url: {PHOTO_URL} detail=low]" in archived_text(message)
    assert from_wire({"role": "user", "content": raw["content"][2:]}).image_details == ()


def test_image_round_trip_through_microcompact_and_truncation(tmp_path: Path) -> None:
    path = tmp_path / "a.sqlite"
    with Archive(path, session_id="img") as archive:
        history = agent_history()
        aged, report = microcompact(history, archive=archive)
        assert report.summarized == 1
        shot = next(m for m in aged if m.tool_call_id == "c1")
        assert shot.images == (SCREENSHOT_URL,)  # the stub keeps its image: nothing removed yet
        assert "pixel row" not in shot.content and archive.get(shot.archive_keys[0]).count("pixel row") == 400
        truncated, cut = emergency_truncate(aged, keep=4, archive=archive)
        assert cut.dropped >= 3 and not any(m.images for m in truncated)
        segment = archive.get(cut.segment_key or "")
        assert segment is not None and PHOTO_URL in segment and SCREENSHOT_URL in segment
        assert marker(cut.segment_key or "") in truncated[1].content  # the notice cites the transcript
    assert images_in_sqlite(path) == {PHOTO, SCREENSHOT}  # the bytes themselves, in the file


def test_nuclear_cap_keeps_the_images_of_kept_messages() -> None:
    # an older message: the newest user message is the task, which truncation never cuts
    history = [Message.user("x" * 9_000, images=(PHOTO_URL,)), Message.assistant("ok"), Message.user("and now?")]
    with Archive.in_memory() as archive:
        out, report = emergency_truncate(history, keep=4, archive=archive, per_message_cap=4_000)
    assert report.capped == 1 and out[0].images == (PHOTO_URL,)


def test_orphan_tool_result_with_an_image_is_archived_with_it() -> None:
    orphan = Message.tool("gone", "the screenshot", name="screenshot", images=(SCREENSHOT_URL,))
    with Archive.in_memory() as archive:
        repaired, report = repair_tool_pairing([Message.user("hi"), orphan], archive=archive)
        assert report.orphans_removed == 1 and orphan not in repaired
        (key,) = report.archived_keys
        assert SCREENSHOT_URL in (archive.get(key) or "")


def test_summarized_segment_transcript_holds_the_images() -> None:
    history = agent_history()
    plan = plan_segment(history, min_keep_recent=4)
    assert plan is not None and any(m.images for m in plan.segment)
    transcript = segment_transcript(plan)
    assert PHOTO_URL in transcript and SCREENSHOT_URL in transcript


@pytest.mark.parametrize("instruction", [None, "keep the UI findings"])
def test_session_compaction_archives_images_in_the_sqlite_file(tmp_path: Path, instruction: Any) -> None:
    """Through litellm and the simulator: a manual compaction (summary or truncation) drops the
    image messages and the archive file holds their bytes."""
    path = tmp_path / "session.sqlite"
    with GatewaySimulator() as gw:
        kw = gw.litellm_kwargs()
        model = kw.pop("model")
        session = Session(model, archive=Archive(path), status=None, limits=Limits(min_keep_recent=2), **kw)
        session.send([{"role": "user", "content": [{"type": "text", "text": "what is wrong here?"},
                                                   {"type": "image_url", "image_url": {"url": PHOTO_URL}}]}])  # fmt: skip
        for i in range(6):
            session.send(f"follow-up question {i} " + "detail " * 200)
        result = session.compact(instruction)
        assert result.changed and not any(m.images for m in session.history)
        session.archive.close()
    assert PHOTO in images_in_sqlite(path)
