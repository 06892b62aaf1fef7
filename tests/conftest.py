"""Shared fixtures: offline environment before anything imports litellm."""

from __future__ import annotations

from contextkit._offline import ensure_offline

ensure_offline()
