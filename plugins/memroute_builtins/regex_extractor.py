"""Regex fact extractor (issue 4). Not implemented yet: this module registers no components."""
