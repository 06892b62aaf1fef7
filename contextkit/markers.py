"""CCR markers: keys, stubs with recall suffixes, and tolerant key extraction.

Pure functions, no storage. ``KEY`` = first 16 hex chars of SHA-256 of the content; the marker
is ``<<ccr:KEY>>``. Keys are validated here before they reach SQL or a path.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable
from typing import Protocol

KEY_LENGTH = 16
MARKER_RE = re.compile(r"<<ccr:([0-9a-f]{16})>>")
_KEY_RE = re.compile(r"^[0-9a-f]{16}$")
# what models actually paste: <<ccr:K>>, <ccr:K>, ccr:K, spaces, upper-case hex, inside prose or JSON
_TOLERANT_RE = re.compile(r"<{0,2}\s*ccr\s*:\s*([0-9a-f]{16})\b", re.IGNORECASE | re.ASCII)
_BARE_RE = re.compile(r"^[0-9a-fA-F]{16}$")
_JSON_FIELDS = ("key", "keys", "marker", "markers", "ccr", "id")
RECALL_SUFFIX_PREFIX = "[full content recoverable via @recall "


def key_for(content: str) -> str:
    """Content address: first 16 lowercase hex chars of SHA-256 of the UTF-8 bytes."""
    return hashlib.sha256(content.encode("utf-8", "surrogatepass")).hexdigest()[:KEY_LENGTH]


def is_valid_key(key: object) -> bool:
    return isinstance(key, str) and bool(_KEY_RE.match(key))


def marker(key: str) -> str:
    return f"<<ccr:{key}>>"


def extract_keys(text: str) -> list[str]:
    """Canonical markers in ``text``, distinct, first-seen order."""
    if "<<ccr:" not in text:  # most texts hold none; a substring test is much cheaper than the pattern
        return []
    return list(dict.fromkeys(MARKER_RE.findall(text)))


def has_marker(text: str) -> bool:
    return "<<ccr:" in text and MARKER_RE.search(text) is not None


def recall_suffix(keys: Iterable[str]) -> str:
    """``\\n[full content recoverable via @recall <<ccr:K1>> <<ccr:K2>>]`` (empty for no keys)."""
    keys = list(dict.fromkeys(keys))
    if not keys:
        return ""
    return "\n" + RECALL_SUFFIX_PREFIX + " ".join(marker(k) for k in keys) + "]"


def json_object(text: str) -> dict[str, object] | None:
    """``text`` parsed as a JSON object (tool-call arguments), or None when it is not one."""
    if not text.lstrip().startswith("{"):
        return None
    try:
        data = json.loads(text)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def extract_keys_tolerant(payload: str) -> list[str]:
    """Keys from whatever a model pastes; lower-cased, distinct, first-seen order.

    Tier 1: any ``ccr:KEY`` form anywhere. Tier 2 (only if tier 1 found nothing): JSON fields
    ``key/keys/marker/markers/ccr/id`` or the whole payload, accepted only when exactly 16 hex chars.
    """
    if not isinstance(payload, str):
        return []
    found = [k.lower() for k in _TOLERANT_RE.findall(payload)]
    if found:
        return list(dict.fromkeys(found))
    candidates: list[str] = []
    text = payload.strip()
    data = json_object(text)
    if data is not None:
        for name in _JSON_FIELDS:
            value = data.get(name)
            if isinstance(value, str):
                candidates.append(value)
            elif isinstance(value, list):
                candidates.extend(v for v in value if isinstance(v, str))
    if not candidates:
        candidates = [text]
    keys = []
    for candidate in candidates:
        cleaned = candidate.strip().strip("`'\"<> ")
        if _BARE_RE.match(cleaned):
            keys.append(cleaned.lower())
    return list(dict.fromkeys(keys))


class ArchiveSink(Protocol):
    """What pure policies need from an archive: put content, get it back."""

    def put(
        self,
        content: str,
        *,
        kind: str = "message",
        origin: str | dict[str, object] | None = None,
        allow_markers: bool = False,
    ) -> str | None:
        """Store ``content`` verbatim; return its key, or None when it already carries a marker
        and ``allow_markers`` is False (the caller carries the existing markers instead)."""
        ...

    def get(self, key: str) -> str | None: ...
