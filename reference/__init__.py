"""What the engine must give, written apart from it in plain Python; not part of the shipped package.

- ``reference.fold``: the reference fold of landed row changes (docs/design.md, "Replay semantics").
- ``reference.histories``: random change histories with injected faults, landed in any source
  format, and what they must give (the fold of each).
- ``reference.records``: one way to write each source format's records.

Used by the tests, ``scripts/make_sample_data.py`` and the benchmarks; it imports nothing from
``tests``.
"""
