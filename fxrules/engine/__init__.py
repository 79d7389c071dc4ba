"""The driver: ``apply`` runs a rule set over a graph module (or an exported
program) in passes, all or nothing, and reports what it did; rule files are
loaded with the loop check that needs the matcher and rewriter.
"""
