"""What decoders of several families share: JSON-lines and tabular reading, value typing, DDL text and
Kafka Connect schemas. Nothing here names a format.
"""
