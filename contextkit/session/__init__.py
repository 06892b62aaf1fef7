"""``Session``: one host of the engine, owning a history, an archive and an event log.

* ``core`` - the ``Session`` facade (send, asend, stream, astream, save, load);
* ``config`` - its constructor's checks and the status sink;
* ``views`` - the read-only views (history, stats, limits, the next request's size);
* ``controls`` - manual ``compact``, ``rewind``, ``reset_limits``;
* ``persist`` - atomic save and load.

May import: everything in the core (the vocabulary modules, ``failures``, ``limits``, ``policy``,
``compaction``, ``engine``, ``archive``, ``prompt``, ``display``).
"""

from contextkit.session.config import default_status, stderr_status
from contextkit.session.core import Session

__all__ = ["Session", "default_status", "stderr_status"]
