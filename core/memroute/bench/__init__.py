"""Every ``memroute bench`` mode, each measured against a baseline in the same run.

- :mod:`~memroute.bench.engine`: the configured engine's add, import and search speed and size on disk.
- :mod:`~memroute.bench.async_api`: the async API under concurrent callers.
- :mod:`~memroute.bench.quality` (with :mod:`~memroute.bench.facts`): held-out retrieval quality.
- :mod:`~memroute.bench.speed`: memroute against the naive recipe; :mod:`~memroute.bench.indexing`: indexing speed.
- :mod:`~memroute.bench.http`: ``memroute serve`` over HTTP; :mod:`~memroute.bench.proxy`: what the memory proxy
  adds to a chat request.
"""
