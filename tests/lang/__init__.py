"""Reading rule files: parser, diagnostics, name resolution, the sandbox, includes, formatting."""
