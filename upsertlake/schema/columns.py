"""Column names: Hudi's meta columns, and the internal columns a write adds to its records and to
the location tables the indexes return. One place, so no step spells one as a string of its own.
"""

from __future__ import annotations

# -- Hudi's meta columns, first in every base file and log record -----------------------------------
COMMIT_TIME = "_hoodie_commit_time"
COMMIT_SEQNO = "_hoodie_commit_seqno"
RECORD_KEY = "_hoodie_record_key"
PARTITION_PATH = "_hoodie_partition_path"
FILE_NAME = "_hoodie_file_name"
META_COLUMNS = (COMMIT_TIME, COMMIT_SEQNO, RECORD_KEY, PARTITION_PATH, FILE_NAME)
IS_DELETED = "_hoodie_is_deleted"  # a data column: true marks the record a delete (Hudi's convention)

# -- a prepared batch: the data columns, then these ------------------------------------------------
KEY = RECORD_KEY  # the record key, as the key generator makes it
PARTITION = PARTITION_PATH  # the partition path, as the key generator makes it
DELETE_FLAG = "_upsertlake_delete"  # the record is a delete
FORCE_FLAG = "_upsertlake_force"  # the record wins whatever the ordering values
POSITION = "_upsertlake_position"  # a record's place in its batch (ties of the ordering value go to the later)
BUCKET = "_upsertlake_bucket"  # the bucket a record is written in (Spark)
STORED_KEY = "_upsertlake_stored_key"  # a stored key (Spark's lookup)
FILE_NUMBER = "_upsertlake_file"  # the number of the file a stored key is in (Spark's lookup)
PARTITION_NUMBER = "_upsertlake_partition"  # the number of a partition that has files (Spark's lookup)
STORED_ORDER = "_upsertlake_stored_order"  # the stored record's ordering value (global routing on Spark)
KEY_BUCKET = "_upsertlake_key_bucket"  # the bucket a record's key hashes to (the bucket index on Spark)

# -- where the index found each record (null: an insert) ------------------------------------------
LOC_PARTITION = "loc_partition"
LOC_FILE_ID = "loc_file_id"
LOC_INSTANT = "loc_instant"  # the instant of the file the key was found in
LOCATION = (LOC_PARTITION, LOC_FILE_ID, LOC_INSTANT)
LOOKUP_KEY = "key"  # the key column of a lookup's located table and of an index update
LOOKUP_ROW = "row"  # a located table's batch row: the row of the batch that holds the stored key
UPDATE_PARTITION = "partition"  # an index update's partition path of a key
UPDATE_FILE_ID = "file_id"  # an index update's file id of a key

# -- a log file's delete block, as its keys table (Hudi's DeleteRecord fields) ---------------------
DELETED_KEY = "record_key"
DELETED_PARTITION = "partition_path"
DELETED_ORDERING = "ordering_value"  # the deleted record's ordering value (null: none given)
DELETED_NATURAL = "natural_order"  # the delete wins whatever the ordering values
