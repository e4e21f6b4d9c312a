"""MySQL binlog rows as Canal (``canal``, its values typed by ``canal_typing``) and Maxwell
(``maxwell``) write them; both read column types through ``declared_types``.
"""
