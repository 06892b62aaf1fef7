"""Hosts other than ``Session``: the litellm drop-in, the proxy, framework adapters (LangChain, the
OpenAI Agents SDK, pydantic-ai). Each adapter module imports its framework only when it is imported
itself (``contextkit[integrations]`` installs them)."""

from __future__ import annotations

from contextkit.integrations.conversations import Conversations, acompletion, completion, default_conversations

__all__ = ["Conversations", "acompletion", "completion", "default_conversations"]
