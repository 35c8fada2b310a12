"""Built-in vector stores: ``sqlite-vec`` and ``qdrant``."""
