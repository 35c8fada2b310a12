"""The ``notion`` backend: one page per memory in a Notion data source."""
