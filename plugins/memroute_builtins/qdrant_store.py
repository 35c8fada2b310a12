"""Qdrant vector store (issue 3). Not implemented yet: this module registers no components."""
