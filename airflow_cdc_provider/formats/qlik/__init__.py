"""Qlik Replicate JSON (``--format qlik-json``)."""
