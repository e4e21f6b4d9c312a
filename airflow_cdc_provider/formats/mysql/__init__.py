"""MySQL binlog rows as Canal (``canal``) and Maxwell (``maxwell``) write them; both read column types
through ``declared_types``.
"""
