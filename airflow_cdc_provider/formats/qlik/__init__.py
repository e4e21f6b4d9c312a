"""Qlik Replicate JSON (``--format qlik-json``): the decoder (``decoder``), the MD-message lookup and
its declared table versions (``metadata``), the typing of DT images by version (``images``) and the
field-level expressions they share (``values``).
"""
