"""The Debezium family: the envelope (``envelope``) and its landings: JSON lines (``json``), Avro and Parquet
from Kafka Connect sinks (``avro``, with ``connect_avro``), MongoDB's extended-JSON documents (``mongodb``, with
``extended_json``), and the connector's unavailable-value placeholders (``unavailable``).
"""
