"""Replacements made of captures and literals, or of one call of them, are spliced in as the general emitter
would: a symbolic size they use is made a literal or skipped, and sizes they do not use change nothing."""

from __future__ import annotations

import torch

import fxrules
from tests.conftest import trace

OPT_IN = "pass static_shapes=True to apply (--static-shapes) to specialize the graph to the example sizes"


def skips(report: fxrules.Report) -> dict[str, dict[str, int]]:
    return {rule.name: dict(rule.skip_counts) for rule in report.rules if rule.skip_counts}


def rows(x: torch.Tensor) -> torch.Tensor:
    return x * x.size(0)


def flattened(x: torch.Tensor) -> torch.Tensor:
    return torch.flatten(x) * 2  # not returned as is: the alias check keeps a returned view of an input


BARE_DIM = fxrules.parse("""
rule rows_as_dim:
    given:
        x: Tensor[M, K]
    pattern:
        return x.size(0)
    replace:
        return M
""")

DIM_IN_ONE_CALL = fxrules.parse("""
rule flatten_as_reshape:
    given:
        x: Tensor[N]
    pattern:
        return torch.flatten(x)
    replace:
        return x.reshape(N)
""")

UNUSED_DIMS = fxrules.parse("""
rule relu_as_sigmoid:
    given:
        x: Tensor[M, K]
    pattern:
        return torch.relu(x)
    replace:
        return torch.sigmoid(x)

rule mul_one:
    given:
        y: Tensor[M, K]
    pattern:
        return y * 1
    replace:
        return y
""")


def test_a_bare_capture_of_a_symbolic_dim_is_skipped_as_a_dynamic_size() -> None:
    gm = trace(rows)
    code = gm.code
    report = fxrules.apply(gm, BARE_DIM, example_inputs=[torch.randn(4, 3)])
    assert report.counts() == {} and skips(report) == {"rows_as_dim": {"dynamic size": 1}}
    assert report["rows_as_dim"].skipped[0].detail.startswith("'M' depends on a size the graph leaves symbolic (")
    assert gm.code == code


def test_a_bare_capture_of_a_dim_is_its_literal_with_static_shapes() -> None:
    gm = trace(rows)
    report = fxrules.apply(gm, BARE_DIM, example_inputs=[torch.randn(4, 3)], static_shapes=True)
    assert report.counts() == {"rows_as_dim": 1}
    assert "mul = x * 4" in gm.code
    x = torch.randn(4, 3)
    torch.testing.assert_close(gm(x), x * 4)


def test_a_symbolic_dim_passed_to_a_single_call_is_skipped_as_a_dynamic_size() -> None:
    gm = trace(flattened)
    code = gm.code
    report = fxrules.apply(gm, DIM_IN_ONE_CALL, example_inputs=[torch.randn(6)])
    assert report.counts() == {} and skips(report) == {"flatten_as_reshape": {"dynamic size": 1}}
    assert report["flatten_as_reshape"].skipped[0].detail.startswith(
        "'N' depends on a size the graph leaves symbolic (")
    assert gm.code == code


def test_a_dim_passed_to_a_single_call_is_its_literal_with_static_shapes() -> None:
    gm = trace(flattened)
    report = fxrules.apply(gm, DIM_IN_ONE_CALL, example_inputs=[torch.randn(6)], static_shapes=True)
    assert report.counts() == {"flatten_as_reshape": 1}
    assert "reshape = x.reshape(6)" in gm.code
    x = torch.randn(6)
    torch.testing.assert_close(gm(x), x * 2)


def test_symbolic_dims_a_replacement_does_not_use_do_not_stop_it() -> None:
    """The dims of a typed capture are bound as symbols; a replacement that names only the tensor fires, with the
    same code and metadata whether or not the dims are symbolic."""
    gm = trace(lambda x: torch.relu(x) * 1)
    report = fxrules.apply(gm, UNUSED_DIMS, example_inputs=[torch.randn(4, 3)])
    assert report.counts() == {"relu_as_sigmoid": 1, "mul_one": 1} and skips(report) == {}
    assert "sigmoid = torch.sigmoid(x);  x = None\n    return sigmoid" in gm.code
    (sigmoid,) = gm.graph.find_nodes(op="call_function", target=torch.sigmoid)
    assert sigmoid.meta["fxrules"] == {"rule": "relu_as_sigmoid", "file": "<string>", "line": 2}
    assert isinstance(sigmoid.meta["val"].shape[0], torch.SymInt)
    x = torch.randn(5, 2)
    torch.testing.assert_close(gm(x), torch.sigmoid(x))
