"""Helpers shared by several test files (test files never import each other).

* ``histories`` - ready-made histories (pastes, reads) and the history an event log describes;
* ``logcheck`` - checks over the simulator's request log (no request at or above a size the endpoint
  rejected as evidence of a limit);
* ``archives`` - an archive on either backend (an SQLite file or a PostgreSQL schema) for the
  archive's test suite (the ``open_archive`` fixture in ``conftest.py``);
* ``faults`` - random fault sequences through a session, and one turn in any loop (send, stream, astream);
* ``replay`` - a loopback server answering with one recorded middlebox rejection (``tests/fixtures/middleboxes``).
"""
