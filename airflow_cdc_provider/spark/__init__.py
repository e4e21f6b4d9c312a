"""Spark plumbing below the decoders and the replay: the session, the SQL expression builder, the reader of
landed files and the rows Python workers hand back. Nothing here knows a format or the fold.
"""
