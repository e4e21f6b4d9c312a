"""Huawei MRS CDL JSON, ``message_version`` 1.0 (``--format cdl-json``)."""
