"""Built-in rerankers: ``remote`` (any Cohere / Jina-style ``/rerank`` endpoint)."""
