"""Oracle GoldenGate JSON (``--format ogg-json``)."""
