"""Facts about FX graphs that matching and rewriting read: shape and dtype
metadata, sizes without specializing them, higher-order subgraphs, and the
plain data of captured modules read without running their code.
"""
