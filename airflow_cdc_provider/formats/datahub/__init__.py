"""Alibaba DataHub topics: TUPLE (``tuple_topic``) and BLOB (``blob_topic``) records; both pair the
halves of an update through ``pairing``.
"""
