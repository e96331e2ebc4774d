"""The `numatopo` command line: thin commands over the engine, the operator and the node side."""
