"""Recall for the model: the ``recall`` tool, the in-text ``@recall KEY`` form, and tool messages.

Recall never raises for a bad or unknown key: the model gets an actionable text instead (SPEC S3.3).
Recall output is flagged ``is_recall`` and ``preserve_verbatim`` so no later phase re-compresses or
re-archives it (the source system's bug #1097).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Protocol

from contextkit.errors import RecallValidationError
from contextkit.markers import extract_keys_tolerant, marker
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


def recall_tool_schema() -> dict[str, Any]:
    """OpenAI function-calling schema of the ``recall`` tool."""
    return {
        "type": "function",
        "function": {
            "name": RECALL_TOOL,
            "description": (
                "Return the full original text that was archived behind a <<ccr:KEY>> marker in this "
                "conversation (removed or shortened to save context). Pass the marker or its 16-hex-char key; "
                "several markers at once return one labelled section each."
            ),
            "parameters": {
                "type": "object",
                "properties": {
                    "key": {
                        "type": "string",
                        "description": 'One or more markers or keys, e.g. "<<ccr:0123456789abcdef>>" or '
                        '"0123456789abcdef fedcba9876543210".',
                    }
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
        try:
            data = json.loads(text)
        except ValueError:
            data = None
        values = [v for v in data.values() if isinstance(v, str)] if isinstance(data, dict) else []
        text = values[0] if len(values) == 1 else ""
    tokens = [t.strip("`'\"<>[]") for t in re.split(r"[\s,;]+", text.strip()) if t.strip()]
    if len(tokens) < 2 or not all(_BARE_KEY_RE.match(t) for t in tokens):
        return []
    return list(dict.fromkeys(t.lower() for t in tokens))


def extract_recall_keys(payload: str) -> list[str]:
    """``markers.extract_keys_tolerant`` plus a plain list of bare keys; prose with a bare key stays a miss."""
    return extract_keys_tolerant(payload) or _key_list(payload)


def recall(archive: _Readable, payload: str) -> RecallResult:
    """Expand the keys found in ``payload`` (tolerant: markers, ``ccr:K``, bare keys, JSON args)."""
    if not isinstance(payload, str):
        payload = "" if payload is None else str(payload)
    keys = extract_recall_keys(payload)
    if not keys:
        return RecallResult(no_key_text(payload), (), (), (), True)
    extra = keys[MAX_RECALL_KEYS:]
    keys = keys[:MAX_RECALL_KEYS]
    contents = {key: archive.get(key) for key in keys}
    found = tuple(k for k in keys if contents[k] is not None)
    missing = tuple(k for k in keys if contents[k] is None)
    if len(keys) == 1:
        original = contents[keys[0]]
        if original is None:
            return RecallResult(missing_text(keys[0]), tuple(keys), (), missing, True)
        return RecallResult(original, tuple(keys), found, (), False)
    sections = []
    for key in keys:
        body = contents[key]
        sections.append(section_header(key) + (body if body is not None else f"[no archived content for {key}]"))
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
    return RecallResult(text, tuple(keys), found, missing, not found)


def find_inline_recalls(text: str) -> list[str]:
    """Keys named by the in-text form ``@recall KEY`` (``@recall <<ccr:K1>> <<ccr:K2>>`` gives both)."""
    if not isinstance(text, str):
        return []
    keys: list[str] = []
    for match in _INLINE_RE.finditer(text):
        keys.extend(extract_keys_tolerant(match.group(1)) or [])
        bare = re.findall(r"(?<![0-9a-fA-F:])[0-9a-fA-F]{16}\b", match.group(1))
        keys.extend(k.lower() for k in bare)
    return list(dict.fromkeys(keys))


def recall_inline(archive: _Readable, text: str) -> RecallResult | None:
    """Recall the keys of every ``@recall KEY`` in ``text``; None when there is none."""
    keys = find_inline_recalls(text)
    if not keys:
        return None
    return recall(archive, " ".join(marker(k) for k in keys))


def recall_message(archive: _Readable, tool_call_id: str, payload: str) -> Message:
    """The tool-result message for a ``recall`` call, never re-compressed or re-archived."""
    result = recall(archive, _arguments_payload(payload))
    return Message.tool(tool_call_id, result.text, name=RECALL_TOOL, is_recall=True, preserve_verbatim=True)


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
