"""Verification: hypothesis ``strategies`` for a rule's inputs, the
``soundness`` check that runs pattern and replacement on them, and the
``options`` shared by the Python API, the CLI and the pytest plugin.
"""
