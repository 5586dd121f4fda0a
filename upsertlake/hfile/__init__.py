"""HFile, the sorted key-value file format of Apache Hudi's metadata table: a reader and a writer.

A pure codec on bytes and random-access files (it imports only `upsertlake.errors` and
`upsertlake.util`). The reader reads HFile version 3 as Hudi's own writer writes it and as HBase's
writer wrote it for Hudi 0.x and 1.0 (NONE and GZ compression, multi-level indexes, shortened
index keys); the writer writes what Hudi 1.2.1's `HFileWriterImpl` writes, byte for byte. The
layout: docs/DESIGN.md §10.
"""

from upsertlake.hfile.reader import Cursor, HFileReader, RandomAccess, SeekResult
from upsertlake.hfile.trailer import Compression, Trailer
from upsertlake.hfile.writer import DEFAULT_BLOCK_SIZE, HFileWriter, write_hfile

__all__ = [
    "DEFAULT_BLOCK_SIZE",
    "Compression",
    "Cursor",
    "HFileReader",
    "HFileWriter",
    "RandomAccess",
    "SeekResult",
    "Trailer",
    "write_hfile",
]
