"""The ``pgvector`` vector store: HNSW over pgvector in PostgreSQL, by default in the postgres primary's database."""
