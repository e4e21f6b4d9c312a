"""Record builders: one way to write each source format's records, from Python values.

The format tests (tests/formats), the generated histories (``reference.histories``) and the
benchmarks' generator all write records with these, so a record layout is spelled once.
"""
