"""OpenAI-compatible remote embedding source (issue 3). Not implemented yet: this module registers no components."""
