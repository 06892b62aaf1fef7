"""The ``contextkit`` command (also ``python -m contextkit``): ``demo``, ``sim``, ``experiment``.

May import: anything; nothing imports it.
"""
