"""Built-in storage backends, one module or subpackage per plugin."""
