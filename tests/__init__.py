"""The test suite, one package per layer of fxrules, each file named for the behaviour it pins.

* ``lang``: reading rule files (parser, diagnostics, resolution, the sandbox, includes, formatting, highlighting).
* ``match``: what a pattern matches (the compiled matcher against the interpreter, families, types and guards,
  the narrowing of candidates, bounded work, skip details).
* ``rewrite``: what a replacement does to the graph (aliasing, aten spellings, the commit).
* ``engine``: ``apply`` (passes, reports, all or nothing, dynamic shapes, narrowing against visiting everything).
* ``verify``: ``fxrules.verify`` and ``fxrules prove``.
* ``integrations``: the compile pipelines, ``replace_pattern`` compatibility and conversion.
* ``rulesets``: the bundled rulesets on real models and on the inputs where a rule must not fire.
* top level: the command line, the docs' examples, packaging, the demo, import cost, a smoke test.

Shared helpers live here: ``conftest`` (fixtures, seen by every package), ``models`` (the real-model corpus),
``strategies`` (random graphs), ``reference_matcher`` (the matching oracle), ``side_effects``.
"""
