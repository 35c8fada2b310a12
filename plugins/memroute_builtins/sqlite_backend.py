"""SQLite storage backend (apsw, FTS5). Not implemented yet: this module registers no components."""
