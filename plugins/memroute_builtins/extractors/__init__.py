"""Built-in fact extractors: ``regex``."""
