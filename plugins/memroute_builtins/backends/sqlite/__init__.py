"""The ``sqlite`` backend: apsw, FTS5 keyword search, WAL (``backend`` + ``schema``)."""
