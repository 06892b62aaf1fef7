"""The compaction pipeline: its three stages (trim, summary, truncation) run for a trigger.

Each stage is made of phases (the ``phase`` of a ``CompactionEvent``): trim runs trim, dedup,
microcompact, budget and verbatim; summary runs summarize; truncation runs truncate and shrink.

* ``compactor`` - ``Compactor``: runs the stages as a sans-IO generator; hooks, undo, counters;
* ``summary_phase`` - the summary stage (mixed into ``Compactor``): segment plan, quality gate,
  identifier ledger, the extractive fallback, back-off;
* ``summarizer`` - the ``Summarizer`` protocol, ``LiteLLMSummarizer`` and a scripted fake;
* ``types`` - value types (``CompactionInfo``, ``CompactionResult``, ``CompactionStats``) and the
  markdown ``WorkbenchWriter``.

The pure history policies each phase applies live in ``contextkit.policy``.
May import: the vocabulary modules, ``failures``, ``policy``.
"""
