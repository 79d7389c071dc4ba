"""What a pattern matches: compiled matcher and interpreter, families, types, guards, candidates."""
