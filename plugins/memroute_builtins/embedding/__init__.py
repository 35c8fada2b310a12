"""Built-in embedding sources: ``static`` (model2vec), ``transformers`` (ONNX MiniLM), ``remote``."""
