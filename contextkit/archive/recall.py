"""Recall for the model: the ``recall`` tool, the in-text ``@recall KEY`` form, and tool messages.

Recall never raises for a bad or unknown key: the model gets an actionable text instead (an exception
would end the turn the model was trying to repair). Recall output is flagged ``is_recall`` and
``preserve_verbatim`` so no later phase re-compresses or re-archives it (otherwise the next pass
would stub the original the model just asked for, and it would recall it again, in a loop).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from typing import Any, Protocol

from contextkit.archive.paging import PageRequest, page_of, request_from_text
from contextkit.errors import RecallValidationError
from contextkit.markers import extract_keys_tolerant, json_object, marker
from contextkit.messages import Message

RECALL_TOOL = "recall"
RECALL_CONTEXT_TOOL = "recall_context"
MAX_RECALL_KEYS = 32
_PAYLOAD_ECHO = 120
# "@recall" then one or more key forms (<<ccr:K>>, <ccr:K>, ccr:K, bare K), separated by spaces/commas
_KEY_FORM = r"(?:<{0,2}\s*ccr\s*:\s*[0-9a-f]{16}\s*>{0,2}|[0-9a-f]{16}\b)"
_BARE_KEY_RE = re.compile(r"^[0-9a-fA-F]{16}$")
_INLINE_RE = re.compile(rf"@recall\b((?:[\s,]*{_KEY_FORM})+)", re.IGNORECASE | re.ASCII)


class _Readable(Protocol):
    def get(self, key: str) -> str | None: ...


@dataclass(frozen=True)
class RecallResult:
    """What a recall returned: ``text`` goes to the model; the rest is for code and tests."""

    text: str
    keys: tuple[str, ...]
    found: tuple[str, ...]
    missing: tuple[str, ...]
    is_error: bool
    complete: bool = True  # every found original delivered whole (no page of a longer original)


def recall_tool_schema() -> dict[str, Any]:
    """OpenAI function-calling schema of the ``recall`` tool."""
    return {
        "type": "function",
        "function": {
            "name": RECALL_TOOL,
            "description": (
                "Return the full original text that was archived (removed or shortened to save context) behind "
                "a <<ccr:KEY>> marker. Pass the marker or its 16-hex-char key; several markers at once return "
                "one labelled section each. Long originals come in pages (lines or characters, 1-based, "
                "inclusive); each page's last line says how to get the next. A query returns just the lines "
                "with all its words."
            ),
            "parameters": {
                "type": "object",
                "properties": {
                    "key": {
                        "type": "string",
                        "description": 'One or more markers or keys, e.g. "<<ccr:0123456789abcdef>>" or '
                        '"0123456789abcdef fedcba9876543210".',
                    },
                    "query": {"type": "string"},
                    "start_line": {"type": "integer"},
                    "end_line": {"type": "integer"},
                    "start_char": {"type": "integer"},
                    "end_char": {"type": "integer"},
                },
                "required": ["key"],
            },
        },
    }


def is_recall_tool(name: object) -> bool:
    """``recall``/``@recall`` in any case, surrounding spaces ignored."""
    if not isinstance(name, str):
        return False
    name = name.strip()
    if name.startswith("@"):
        name = name[1:]
    return name.lower() == RECALL_TOOL


def _echo(payload: str) -> str:
    flat = " ".join(payload[: _PAYLOAD_ECHO * 2].split())
    return flat if len(flat) <= _PAYLOAD_ECHO else flat[:_PAYLOAD_ECHO] + "..."


def no_key_text(payload: str) -> str:
    return (
        f'recall: no archive key found in "{_echo(payload)}" - pass the value from a '
        '<<ccr:KEY>> marker (KEY is 16 hex chars), e.g. {"key": "<<ccr:0123456789abcdef>>"} or '
        '{"key": "0123456789abcdef"}'
    )


def missing_text(key: str) -> str:
    return (
        f"recall: no archived content for {key} in this session's archive. A key is the 16 hex chars inside a "
        "<<ccr:KEY>> marker shown earlier in this conversation; copy it exactly and call recall again."
    )


def section_header(key: str) -> str:
    return f"--- @recall {marker(key)} ---\n"


def _key_list(payload: str) -> list[str]:
    """A payload that is nothing but bare keys separated by spaces/commas (``"K1 K2"``, ``{"key": "K1, K2"}``)."""
    text = payload.strip()
    if text.startswith("{"):
        data = json_object(text)
        values = [v for v in data.values() if isinstance(v, str)] if data else []
        text = values[0] if len(values) == 1 else ""
    tokens = [t.strip("`'\"<>[]") for t in re.split(r"[\s,;]+", text.strip()) if t.strip()]
    if len(tokens) < 2 or not all(_BARE_KEY_RE.match(t) for t in tokens):
        return []
    return list(dict.fromkeys(t.lower() for t in tokens))


def extract_recall_keys(payload: str) -> list[str]:
    """``markers.extract_keys_tolerant`` plus a plain list of bare keys; prose with a bare key stays a miss."""
    return extract_keys_tolerant(payload) or _key_list(payload)


def recall(archive: _Readable, payload: str, *, max_bytes: int | None = None) -> RecallResult:
    """Expand the keys found in ``payload`` (tolerant: markers, ``ccr:K``, bare keys, JSON args).

    JSON arguments may carry a range (``start_line``/``end_line`` or ``start_char``/``end_char``);
    an original longer than ``max_bytes`` comes as its first page (see the module docstring).
    """
    if not isinstance(payload, str):
        payload = "" if payload is None else str(payload)
    keys = extract_recall_keys(payload)
    if not keys:
        return RecallResult(no_key_text(payload), (), (), (), True)
    request = _request_from_payload(payload)
    return recall_keys(archive, [(k, request) for k in keys], max_bytes=max_bytes)


def recall_keys(
    archive: _Readable, wanted: list[tuple[str, PageRequest]], *, max_bytes: int | None = None
) -> RecallResult:
    """Recall ``(key, page request)`` pairs; several keys share ``max_bytes`` evenly."""
    problem = next((p for _, r in wanted if (p := r.problem())), None)
    if problem is not None:
        return RecallResult(f"recall: {problem}", tuple(k for k, _ in wanted), (), (), True)
    extra = [k for k, _ in wanted[MAX_RECALL_KEYS:]]
    wanted = wanted[:MAX_RECALL_KEYS]
    keys = [k for k, _ in wanted]
    contents = {key: archive.get(key) for key in keys}
    found = tuple(k for k in keys if contents[k] is not None)
    missing = tuple(k for k in keys if contents[k] is None)
    share = None if max_bytes is None else max_bytes // max(1, len(found))
    pages = {k: page_of(contents[k] or "", k, req, share) for k, req in wanted if contents[k] is not None}
    complete = all(p.complete for p in pages.values())
    if len(keys) == 1:
        if keys[0] not in pages:
            return RecallResult(missing_text(keys[0]), tuple(keys), (), missing, True)
        return RecallResult(pages[keys[0]].text, tuple(keys), found, (), False, complete)
    sections = []
    for key in keys:
        body = pages[key].text if key in pages else f"[no archived content for {key}]"
        sections.append(section_header(key) + body)
    text = "\n\n".join(sections)
    if not found:
        text = (
            f"recall: none of the {len(keys)} keys has archived content in this session's archive "
            f"(no archived content for {', '.join(keys)}). Copy keys exactly from <<ccr:KEY>> markers."
        )
    if extra:
        more = " ".join(marker(k) for k in extra)
        text += (
            f"\n\n[{len(extra)} more keys not recalled (at most {MAX_RECALL_KEYS} per call): {more}"
            " - call recall again with them]"
        )
    return RecallResult(text, tuple(keys), found, missing, not found, complete)


def _request_from_payload(payload: str) -> PageRequest:
    """The range in tool arguments: JSON fields, or ``lines 5-10`` written after the marker."""
    text = payload.strip()
    request = PageRequest()
    data = json_object(text)
    if data is not None:
        fields = {n: _lenient_int(data.get(n)) for n in ("start_line", "end_line", "start_char", "end_char")}
        request = PageRequest(**fields)  # type: ignore[arg-type]  # checked by problem() below
        key = data.get("key")
        if not request.ranged and isinstance(key, str):
            text = key
    if not request.ranged:
        tail = re.split(r"ccr\s*:\s*[0-9a-fA-F]{16}\s*>{0,2}", text)[-1]
        request = request_from_text(tail)
    query = data.get("query") if data is not None else None
    return request if query is None else replace(request, query=query)  # type: ignore[arg-type]  # problem() checks


def find_inline_recalls(text: str) -> list[str]:
    """Keys named by the in-text form ``@recall KEY`` (``@recall <<ccr:K1>> <<ccr:K2>>`` gives both)."""
    return list(dict.fromkeys(k for k, _ in find_inline_requests(text)))


def find_inline_requests(text: str) -> list[tuple[str, PageRequest]]:
    """``(key, range)`` for every ``@recall KEY``; a range written after the keys (``@recall
    <<ccr:K>> lines 181-360``) applies to them, else the range is empty (whole or first page)."""
    if not isinstance(text, str):
        return []
    found: dict[str, PageRequest] = {}
    for match in _INLINE_RE.finditer(text):
        keys = extract_keys_tolerant(match.group(1)) or []
        bare = re.findall(r"(?<![0-9a-fA-F:])[0-9a-fA-F]{16}\b", match.group(1))
        keys.extend(k.lower() for k in bare)
        request = request_from_text(text[match.end() : match.end() + 80])
        for key in keys:
            found.setdefault(key, request)
    return list(found.items())


def recall_inline(archive: _Readable, text: str, *, max_bytes: int | None = None) -> RecallResult | None:
    """Recall the keys of every ``@recall KEY`` in ``text``; None when there is none."""
    wanted = find_inline_requests(text)
    return recall_keys(archive, wanted, max_bytes=max_bytes) if wanted else None


def recall_message(archive: _Readable, tool_call_id: str, payload: str, *, max_bytes: int | None = None) -> Message:
    """The tool-result message for a ``recall`` call, never re-archived; ``preserve_verbatim`` when it
    holds whole originals (a page is not pinned: the next page replaces its use)."""
    result = recall(archive, _arguments_payload(payload), max_bytes=max_bytes)
    return Message.tool(tool_call_id, result.text, name=RECALL_TOOL, is_recall=True, preserve_verbatim=result.complete)


def _arguments_payload(payload: str) -> str:
    # tool-call arguments arrive as JSON text; tolerant extraction copes with both forms
    return payload if isinstance(payload, str) else json.dumps(payload)


def _lenient_int(value: object) -> object:
    # models often send numbers as strings ("8"); anything else is left for validation to explain
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def handle_tool_call(archive: Any, tool_call_id: str, name: str, arguments: str) -> Message | None:
    """Answer a ``recall`` or ``recall_context`` tool call; None when ``name`` is another tool.

    Bad arguments become an explanatory tool result, never an exception into the loop.
    """
    if is_recall_tool(name):
        return recall_message(archive, tool_call_id, arguments)
    if not isinstance(name, str) or name.strip().lower() != RECALL_CONTEXT_TOOL:
        return None
    try:
        args = json.loads(arguments) if arguments and arguments.strip() else {}
    except ValueError:
        args = {"query": arguments}
    if not isinstance(args, dict):
        args = {"query": str(args)}
    try:
        text = archive.recall_context(
            args.get("query", ""),
            max_items=_lenient_int(args.get("max_items", 8)),
            max_tokens=_lenient_int(args.get("max_tokens", 1500)),
        )
    except RecallValidationError as exc:
        text = f"recall_context: {exc}"
    return Message.tool(tool_call_id, text, name=RECALL_CONTEXT_TOOL, is_recall=True)
