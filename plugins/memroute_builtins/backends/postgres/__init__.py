"""The ``postgres`` backend: psycopg 3 with a pool, tsvector keyword search, row-level security by tenant
(``backend`` + ``schema``; ``database`` holds the pool and transactions the pgvector store shares)."""
