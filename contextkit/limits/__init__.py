"""What the session knows about its limits, and the steps that keep each request inside them.

* ``evidence`` - per endpoint: the largest body accepted and the smallest rejected for its size;
  ``judge`` (retry / recover / fail) and the learned cap, window and probe arithmetic (pure);
* ``state`` - ``SessionState``: the history, the limits in force and the counters of one session;
* ``context`` - ``FlowContext``: what every step of a turn shares, and measuring a request;
* ``learning`` - every change of a limit as a ``LimitEvent`` with its evidence;
* ``floor`` - the smallest request recovery can reach, and the floor error;
* ``preflight`` - per-request steps: budgets, the pressure-gated rewrites, pre-flight compaction,
  the known-limit check;
* ``recovery`` - the recovery ladder (levels 1-3) after a failure about size;
* ``summary_guard`` - summary requests under the session's evidence.

May import: the vocabulary modules, ``failures``, ``policy``, ``prompt``, ``archive``, ``compaction``.
No IO of its own: the archive is reached through its protocol, clocks are passed in.
"""
