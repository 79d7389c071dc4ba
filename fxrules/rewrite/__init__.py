"""Rewriting: one match's replacement spliced into the graph, undoably
(``transaction``), spelled for the graph's level (``aten``), with
rewrite-time ``helpers`` seeing modules read-only; ``standalone`` builds a
rule's two sides as graphs of their own for verification and loop checks;
``spelling`` gives recompiled code public names (``torch.nn.functional.gelu``).
"""
