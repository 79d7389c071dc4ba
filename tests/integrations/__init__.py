"""The compile pipelines, `replace_pattern` compatibility and conversion to rules."""
