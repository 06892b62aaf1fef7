"""Gateway simulator: a local provider + gateway for litellm over real HTTP.

``GatewaySimulator`` serves the OpenAI chat-completions and Anthropic messages APIs on
127.0.0.1 with a configurable context window, body cap, rejection style, output cap, latency,
one-shot faults and a deterministic scripted model. ``workloads`` generates the big tool
outputs agents read.
"""

from __future__ import annotations

from contextkit.sim.cli import run_sim_cli
from contextkit.sim.faults import OVERFLOW_STYLES, REJECT_MODES
from contextkit.sim.model import AgentScript, Conversation, ScriptedModel, ScriptedReply, extractive_summary, long_text
from contextkit.sim.server import FAULT_KINDS, SUMMARY_MODES, GatewaySimulator, RequestRecord, SimConfig
from contextkit.sim.workloads import TOOL_SCHEMAS, ToolOutput, Workspace, agent_steps

__all__ = [
    "FAULT_KINDS",
    "OVERFLOW_STYLES",
    "REJECT_MODES",
    "SUMMARY_MODES",
    "TOOL_SCHEMAS",
    "AgentScript",
    "Conversation",
    "GatewaySimulator",
    "RequestRecord",
    "ScriptedModel",
    "ScriptedReply",
    "SimConfig",
    "ToolOutput",
    "Workspace",
    "agent_steps",
    "extractive_summary",
    "long_text",
    "run_sim_cli",
]
