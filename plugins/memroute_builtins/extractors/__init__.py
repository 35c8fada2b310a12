"""Built-in fact extractors: ``regex`` (offline) and ``llm`` (any OpenAI-compatible model, in the background)."""
