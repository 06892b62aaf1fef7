"""The turn engine: one user turn as a sans-IO generator of effects, and the drivers that run it.

* ``effects`` - what the flow yields (``CallModel``, ``RunTools``, ``Sleep``, ``StreamNote``), what
  drivers send back (``ModelReply``, ``ModelFailure``), and ``Reply``;
* ``flow`` - ``turn_flow``: requests, verdicts, recovery, escalation, tool rounds; a transaction;
* ``answer`` / ``request`` / ``tool_round`` / ``recall_round`` - the parts of a turn;
* ``driver`` - ``EffectRunner``: runs effects (litellm calls, summaries, tools, sleeps) sync and async;
* ``streaming`` - ``ReplyStream`` / ``AsyncReplyStream``.

May import: the vocabulary modules, ``failures``, ``limits``, ``policy``, ``compaction``, ``archive``,
``prompt``. The flow does no IO; only ``driver`` and ``streaming`` call out (through ``backend``).
"""
