"""Every column name the replay adds to a DataFrame, and the group tags: one registry.

The canonical events' own columns (``table``, ``kind``, ``op``, ``file``, ...) are the decoders'
contract and are named in ``formats/events.py``; everything the replay adds after decoding is named
here, so that no stage spells a column another stage reads. Names starting with ``_`` never leave a
run; the others are columns of the fold's rows (some of them also kept in ``_cdc_state/rows``, so
their names are part of that format) or, for ``_cdc_*``, columns of the written tables (see
docs/contract.md). Struct field names inside a column (``ord``, ``after``, ``settled``...) are the
column's own shape and are spelled where the struct is built.
"""

from __future__ import annotations

# Group tags: the value of ``TAG``, which kind of group a fold row is.
TAG_ROW = "R"  # a keyed row change
TAG_TRUNCATE = "T"  # a table's truncates
TAG_IGNORED = "I"  # ignored records, one group per reason
TAG_QUARANTINED = "Q"  # one undecodable record
TAG_NO_KEY = "K"  # row changes of a table nobody gave a key for: a configuration error

# Keying (keys.py): attached once to every decoded event.
KEY_COLS = "_key_cols"  # the key column names of the event's table (the record's own, else --key's)
NEW_KEY = "_new_key"  # the key values the row is under after the event (a delete's: its before image's)
OLD_KEY = "_old_key"  # the key values of the before image, where there is one
CONTENT_HASH = "_content_hash"  # hash of table, position and record: what exact duplicates share
TAG = "_tag"  # the group tag (``TAG_*``)
GROUP_KEY = "_group_key"  # the group's key before a key change is split in two
HASH = "_hash"  # ``CONTENT_HASH`` as the counting order reads it
KEY_MOVED = "_key_moved"  # an update that moves its row to another key
MOVED_AWAY = "_moved_away"  # the old-key half of a key change: a delete at the same position
MOVED_PARTIALLY = "_moved_partially"  # ``MOVED_AWAY`` of an update with a partial image
KEY = "_key"  # the group's key: key values, an ignored reason, or a quarantined record's position

# What applies at AS OF (keys.with_as_of_flags, transactions.py).
APPLIED = "_applied"  # a row change that applies at AS OF
DDL_APPLIED = "_ddl_applied"  # a DDL event that applies at AS OF
AFTER_AS_OF = "_after_as_of"  # a row change that does not apply at AS OF
HELD_BACK_BY_TX = "_held_back"  # on time for AS OF, but its transaction is not (--whole-transactions)
APPLY_MS = "_apply_ms"  # the instant from which the event applies (its transaction's; null: never)
TX_FIRST = "_tx_first"  # the earliest row change of its transaction: per-key sums count transactions once
BASE_ROW = "_base"  # a row of the base's state folded again (applied, never counted)

# The counting window (counts.py): what each applied row change adds to the counts.
GROUP_HASH = "_group_hash"  # 64-bit hash of table, tag and key, sorted before them
OP_CODE = "_op_code"  # the event's op as the counting window's number
COUNTED = "_counted"  # applied and counted (not a key change's second half, not a base row)
PREV_HASH = "_prev_hash"  # ``HASH`` of the previous counted event of the group
PREV_OP = "_prev_op"  # ``OP_CODE`` of the previous applied event of the group
PREV_ORD = "_prev_ord"  # position of the previous applied event of the group
COUNT_FLAG_PREFIX = "_c_"  # ``_c_<count>``: 1 where the event adds to that count of ``COUNT_FIELDS``

# The fold's rows (fold.py, spans.py): one per group, read by resolve, typing and the metrics.
EVENTS = "n"  # events read in the group
EVENTS_AFTER_AS_OF = "after_as_of"  # events read that do not apply at AS OF
UNPOSITIONED = "unpositioned"  # events read whose log position could not be read
RESET = "reset"  # the latest resetting event (insert, read, full-image update, delete)
RESETS = "resets"  # every reset a key kept (partial images of a key that moves)
PARTIALS = "partials"  # the partial images the group kept, with their positions
MOVES_OUT = "moves_out"  # the group's moves to another key
LAST_MOVE = "_last_move"  # position of the latest move to another key (full images)
KEY_MOVES = "_key_moves"  # whether the key ever moves to another key
LAST_RESET = "_last_reset"  # position of the key's latest reset
COUNTS = "counts"  # struct of the group's ``COUNT_FIELDS``
LAST = "last"  # the last applied event (``keys.event_meta``)
LAST_EVENT_MS = "last_event_ms"  # time of the latest applied event
TYPE_SIGS = "type_sigs"  # distinct declared type signatures (``table_changes.type_signature``)
DDL_CHANGES = "ddl_changes"  # applied DDL events' columns added and dropped (``table_changes.ddl_change``)
FIRST = "first"  # the first listed (ignored or quarantined) record: file, position, reason, record
KEY_NAMES = "key_names"  # the key column names the group was folded by
BASE_ORD = "base_ord"  # position of the base's row of the key (incremental runs)
HELD_BACK = "held_back"  # events held back by --whole-transactions
HELD_BACK_TRANSACTIONS = "held_back_transactions"  # transactions held back by --whole-transactions
HELD_BACK_COUNTS = (HELD_BACK, HELD_BACK_TRANSACTIONS)

# The fields of ``COUNTS``, also columns of the group counts. ``PARTIAL_UPDATES``: partial images
# of a format whose images are full unless a record says otherwise (a Debezium update that left
# unavailable values out); the run then folds them as such.
INSERTS = "inserts"  # inserts and snapshot reads
UPDATES = "updates"  # updates, key-changing ones included
DELETES = "deletes"  # deletes of rows that existed
DUPLICATES = "duplicates"  # exact re-deliveries
DELETES_UNKNOWN = "deletes_unknown"  # deletes of keys with no row
UPDATES_UNKNOWN = "updates_unknown"  # updates that created their row
PARTIAL_UPDATES = "partial_updates"  # updates with a partial image
COUNT_FIELDS = (INSERTS, UPDATES, DELETES, DUPLICATES, DELETES_UNKNOWN, UPDATES_UNKNOWN, PARTIAL_UPDATES)

# Several AS OFs in one fold (spans.py), by index into the sorted AS OFs.
READ_FROM = "_visible"  # the first AS OF whose run reads the event's file
APPLIES_FROM = "_b"  # the first AS OF the event applies at (the AS OF count: none)
POINT_KIND = "_kind"  # an event's row in the spans window: 0 read, 1 applies, 2 both, 3 applies (read at 0)
POINT = "_point"  # the AS OF index of the row's point
NEXT = "_next"  # the next row's point or time in the window (``lead``)
FIRST_POINT = "_first_point"  # the group's first point
CHANGES_APPLIED = "_changes_applied"  # row changes applied up to the point
READ_HERE_PREFIX = "_r_"  # ``_r_<count>``: what the events read at points up to this one give
READ_FIRST_PREFIX = "_z_"  # ``_z_<count>``: what the events read from the first AS OF on give
READ_FIRST_ROWS = "_z_rows"  # how many events are read from the first AS OF on
CHANGES_READ = "changes"  # row changes read
EARLY = "_early"  # the span before the group's first point: events read, nothing applied
OUT_OF_ORDER = "_out_of_order"  # events before one that applies at an earlier AS OF, in position order
SPAN_FROM = "_span_from"  # the first AS OF index the row holds at
SPAN_TO = "_span_to"  # the AS OF index the row no longer holds at
AS_OF_INDEX = "_index"  # an AS OF's index, where rows are spread over the AS OFs they hold at

# Tables' changes (table_changes.py), joined to the fold's rows by resolve.
TRUNCS = "truncs"  # positions of the table's applied truncates
DROPS = "drops"  # the table's applied column drops (``ddl_change``)

# The resolved rows (resolve.py).
EXISTS = "exists"  # the group's row exists at AS OF
IMAGE = "image"  # the row's final image (column -> variant)
UNKNOWN = "unknown"  # columns null only because their value was unavailable
CARRIES = "carries"  # the rows partial key changes carry into the key
CARRY = "c"  # one carried row
MOVE = "_move"  # one partial move of a group

# The group counts (group_counts.py): one row per table, tag and reason.
ROWS = "rows"  # rows that exist
ROW_SCHEMA = "row_schema"  # ``schema_of_variant_agg`` of the final rows' images
SEQUENCES = "sequences"  # distinct column orders of the final rows' images
DROPS_COUNT = "drops"  # applied DDL changes that drop columns
UNKNOWN_VALUES = "unknown_values"  # values unknown because unavailable (``UNKNOWN``)
VERSIONS = "versions"  # a history's versions of the table
ROW_OBJECT = "_object"  # a final row's image as a variant object
ROW_SHAPE = "_shape"  # ``schema_of_variant`` of ``ROW_OBJECT``
UNAVAILABLE_COLUMN = "column"  # a column whose values were unavailable

# A history's versions (versions.py).
FROM_MS = "_from_ms"  # the instant a version starts, epoch ms
TO_MS = "_to_ms"  # the instant it ends (null: current)
APPLIES_AT = "_at"  # the instant an event applies from
EVENT_ORD = "ord"  # the event's position (``keys.ordering``)
CARRIED = "_carried"  # the row a partial key change carries from its old key
PENDING = "_pending"  # that carried row is not rebuilt
CARRY_TABLE = "_c_table"  # the table of a carry, joined to its change
CARRY_KEY = "_c_key"  # the key of a carry, joined to its change
CARRY_ENTRY = "_c"  # one carry, joined to its change
PARTIAL_UPDATE = "_partial"  # a partial-image update
EVENT_META = "_meta"  # the event as ``LAST`` shows it
VERSION_BASE = "_base"  # the latest reset up to the version's time
VERSION_PARTIALS = "_partials"  # the partial images up to the version's time
LATEST_ORD = "_win"  # position of the latest event up to the version's time
PREVIOUS_LATEST_ORD = "_prev"  # ``LATEST_ORD`` of the previous time
VERSION_EXISTS = "_exists"  # the key's row exists in the version

# Salvage (salvage.py): records of split-read files.
TAIL_FILE = "_t_file"  # a file whose last record was cut short
TAIL_POS = "_t_pos"  # that record's place in its file
LINE_FILE = "_l_file"  # a split-read record's file
LINE_POS = "_l_pos"  # its place in its file
LINE_NUMBER = "_l_line"  # its line number

# Incremental runs (base_state.py).
TOUCHED = "_touched"  # a base row some new row change names
LATE = "late"  # row changes the base's AS OF covers, in files it did not read
STRUCTURAL = "structural"  # late DDL and truncates the base's rows cannot replay
FIRST_STRUCTURAL = "first"  # the first of them
WHOLE_TABLES = "whole_tables"  # tables whose base rows are all folded again
NEWEST_MS = "m"  # a file's newest event time

# Typing (schemas.py, typed.py): one-row queries.
DDL_CHANGE = "c"  # one entry of ``DDL_CHANGES``
CHANGED_COLUMN = "col"  # a column a DDL change added or dropped
DROPPED_AT = "dropped_at"  # position of the column's latest drop
ADDED_AT = "added_at"  # position of the column's latest add
FIRST_DECLARED = "m"  # the first event declaring a column's type: position and file
DECLARED_ORD = "o"  # that event's position
DECLARED_FILE = "f"  # that event's file
REPEATED_NAMES = "names"  # the column names of a row image that names one twice

# The written tables' columns after the table's own (docs/contract.md).
CDC_OP = "_cdc_op"  # the op of the event that last wrote the row
CDC_EVENT_TS = "_cdc_event_ts"  # that event's own time (--with-metadata)
CDC_POSITION = "_cdc_position"  # its source log position, else file:line in the landing
CDC_FILE = "_cdc_file"  # the landed file of that event (--with-metadata)
CDC_LINE = "_cdc_line"  # its line (or 1-based record index) in that file (--with-metadata)
VALID_FROM = "_cdc_valid_from"  # a history version's start
VALID_TO = "_cdc_valid_to"  # its end (null while current)


def count_flag(count: str) -> str:
    """The column of ``count``'s (``COUNT_FIELDS``) flag in the counting window."""
    return f"{COUNT_FLAG_PREFIX}{count}"
