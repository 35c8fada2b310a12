"""The ``obsidian`` backend: notes in a vault through the Local REST API plugin."""
