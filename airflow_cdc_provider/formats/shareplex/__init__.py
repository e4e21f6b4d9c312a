"""Shareplex JSON as Alibaba DTS writes it (``--format shareplex-json``)."""
