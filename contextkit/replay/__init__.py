"""Replaying recorded agent runs through a strategy: the harness and the metrics that can fail.

``replay(load_trajectory(path), "contextkit", window=16_384)`` runs the recorded agent's steps as a
real agent loop over HTTP against the simulator, which answers with the recorded replies; see
``docs/howto/replay.md``.
"""

from __future__ import annotations

from contextkit.replay.harness import MASK_KEEP, PRICE_AS, STRATEGIES, ReplayRun, SentRequest, StepRecord, replay
from contextkit.replay.metrics import LAG, calibrated_errors, first_uses, identifiers, median_abs, token_errors
from contextkit.replay.peers import REPLAY_PEERS, peer_status
from contextkit.sim.replay import ReplayScript, Trajectory, load_trajectory, parse_trajectory

__all__ = [
    "LAG",
    "MASK_KEEP",
    "PRICE_AS",
    "REPLAY_PEERS",
    "STRATEGIES",
    "ReplayRun",
    "ReplayScript",
    "SentRequest",
    "StepRecord",
    "Trajectory",
    "calibrated_errors",
    "first_uses",
    "identifiers",
    "load_trajectory",
    "median_abs",
    "parse_trajectory",
    "peer_status",
    "replay",
    "token_errors",
]
