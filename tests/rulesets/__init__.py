"""The bundled rulesets: on real models, in every trace kind, and where a rule must not fire."""
