"""Local ONNX all-MiniLM-L6-v2 embedding source (issue 3). Not implemented yet: this module registers no components."""
