"""memroute-jsonl: a memroute storage backend plugin (``type = "jsonl"``)."""

from memroute_jsonl.backend import JsonlBackend, JsonlSettings

__all__ = ["JsonlBackend", "JsonlSettings"]
__version__ = "0.1.0"
