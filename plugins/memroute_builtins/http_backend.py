"""Generic HTTP storage backend (issue 5). Not implemented yet: this module registers no components."""
