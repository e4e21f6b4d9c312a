"""What a decoder is: a named turn from landed files to canonical change events."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import ClassVar

from pyspark.sql import DataFrame, SparkSession

from airflow_cdc_provider.contract.unavailable import placeholders
from airflow_cdc_provider.spark.reader import LandedFile


@dataclass(frozen=True)
class DecodeOptions:
    """Format options that come from the job's arguments.

    ``key_columns`` is ``--key``: default key columns for tables whose records do not name their
    key (Debezium values, DataHub TUPLE). ``table_keys`` holds ``--key TABLE=COL,COL`` entries.
    ``table`` is the table name for files that hold one table and do not say which (Qlik without
    schema/table fields). ``binary_as_text`` decodes Base64 values of Lindorm HBase tables as UTF-8
    text instead of binary. ``context_files`` are files an incremental run does not decode (its
    base applied them) but that may hold what decoding the others needs (Qlik's MD messages).
    ``with_metadata`` is ``--with-metadata``: a decoder may then keep source metadata a row does
    not otherwise carry (Shareplex's ``rowid``). ``table_columns`` holds ``--columns TABLE=C1,C2``
    entries (the column names of headerless CSV landings, AWS DMS) and ``timestamp_column`` is
    ``--timestamp-column`` (the column DMS adds with ``TimestampColumnName``). ``whole_transactions``
    is ``--whole-transactions``: a decoder may then derive transaction ids its records do not carry
    (DataHub BLOB, from its transaction markers), which costs it a pass it otherwise skips.
    ``unavailable_values`` are the bytes of ``--unavailable-value``: the placeholders a Debezium
    connector writes for values it could not read (``formats/debezium/unavailable.py``).
    """

    key_columns: tuple[str, ...] = ()
    table_keys: dict[str, tuple[str, ...]] = field(default_factory=dict)
    table: str | None = None
    binary_as_text: bool = False
    context_files: tuple[LandedFile, ...] = ()
    with_metadata: bool = False
    table_columns: dict[str, tuple[str, ...]] = field(default_factory=dict)
    timestamp_column: str | None = None
    whole_transactions: bool = False
    unavailable_values: tuple[bytes, ...] = placeholders(())


class Decoder(ABC):
    """Turns landed files of one source format into rows of ``CANONICAL_EVENT_SCHEMA``.

    A decoder reads every record of every file exactly once and emits one canonical row per row
    change, per ignored record (DDL, heartbeat, transaction marker, tombstone) and per record it
    cannot decode (kind ``quarantined`` with a reason): nothing it reads may vanish. Blank lines
    are the one exception: they are not records.
    """

    name: ClassVar[str]
    description: ClassVar[str]
    # Options the format needs on the command line ("--key" or ""), for docs and `cdc-replay formats`.
    needs: ClassVar[str] = ""
    # Whether updates may carry only the changed columns (``partial``). The engine then also
    # carries a row's other columns across a key change, which costs one more pass.
    partial_images: ClassVar[bool] = False
    # Whether one ``--table`` also names the table of records that do not say which (Qlik DT
    # messages without schema/table fields).
    table_from_filter: ClassVar[bool] = False
    # Whether records carry a transaction id (``tx_id``): ``--whole-transactions`` needs it.
    transaction_ids: ClassVar[bool] = False
    # Python modules the decoder runs in Spark's Python workers (Avro without the spark-avro jar);
    # empty for decoders that stay in the JVM. Over Spark Connect the server's Python must have them.
    worker_modules: ClassVar[tuple[str, ...]] = ()

    @abstractmethod
    def decode(self, spark: SparkSession, files: list[LandedFile], options: DecodeOptions) -> DataFrame:
        """Return canonical events for ``files``.

        The events are lazy. A decoder may run one small job while planning (Qlik collects its MD
        messages, one row per table version, to type by literal types); nothing the size of the
        landing may reach the driver. The engine calls this where a damaged file is caught.
        """
