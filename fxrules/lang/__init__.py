"""The language: ``.fxr`` text to checked, immutable rule IR.

``parser`` (Lark grammar to syntax tree) -> ``resolve`` (names against the
allow-list of ``targets``, calls bound by ``signatures``, ``guards`` and
``families`` checked) -> ``ir`` (what every later layer executes);
``loader`` drives it for files, includes and the prelude.  Nothing here
looks at a graph or runs a rule.
"""
