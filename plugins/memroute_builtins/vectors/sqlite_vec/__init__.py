"""The ``sqlite-vec`` vector store (``store``) and its in-process matrix tier (``matrix_cache``)."""
