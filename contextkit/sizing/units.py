"""Human sizes: ``parse_size`` reads them (``"5MB"``, ``"512KB"``), ``format_size`` prints them."""

from __future__ import annotations

import math
import re

from contextkit.errors import ConfigError

KB = 1024
MB = 1024 * 1024
GB = 1024 * 1024 * 1024

_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(gb|mb|kb|g|m|k|b)?\s*$", re.IGNORECASE)
_UNITS = {"gb": GB, "g": GB, "mb": MB, "m": MB, "kb": KB, "k": KB, "b": 1, None: MB}
SIZE_FORMS = '"5MB", "512KB", "2.5MB", "1GB", "1024B" or a bare number of megabytes such as "5"'


def parse_size(value: str | int | float, *, what: str = "size") -> int:
    """``"5MB"`` → 5242880, ``"512KB"`` → 524288, ``"2.5MB"``, ``"5"`` (= 5 MB). Ints are bytes.

    Raises ``ConfigError`` naming the accepted forms for anything else, including zero and
    negative values.
    """
    if isinstance(value, bool):
        raise ConfigError(f"{what}: expected a size such as {SIZE_FORMS}, got {value!r}")
    if isinstance(value, int):
        if value <= 0:
            raise ConfigError(f"{what}: must be a positive number of bytes, got {value}")
        return value
    if isinstance(value, float):
        if not math.isfinite(value) or int(value) <= 0:
            raise ConfigError(f"{what}: must be a positive, finite number of bytes, got {value}")
        return int(value)
    if not isinstance(value, str):
        raise ConfigError(f"{what}: expected a size such as {SIZE_FORMS}, got {type(value).__name__}")
    match = _SIZE_RE.match(value)
    if not match:
        raise ConfigError(f"{what}: cannot read {value!r} as a size; use {SIZE_FORMS}")
    number = float(match.group(1))
    if not math.isfinite(number):
        raise ConfigError(f"{what}: {value!r} is too large; use {SIZE_FORMS}")
    unit = match.group(2).lower() if match.group(2) else None
    size = int(number * _UNITS[unit])
    if size <= 0:
        raise ConfigError(f"{what}: must be greater than zero, got {value!r}; use {SIZE_FORMS}")
    return size


def format_size(n: int | float) -> str:
    """512 → "512 B", 2048 → "2.0 KB", 5242880 → "5.0 MB"."""
    n = int(n)
    if n >= GB:
        return f"{n / GB:.1f} GB"
    if n >= MB:
        return f"{n / MB:.1f} MB"
    if n >= KB:
        return f"{n / KB:.1f} KB"
    return f"{n} B"
