"""User predicates: Python functions a guard calls by name (apply(predicates=...)), checked at apply and verify."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import fxrules
from fxrules.graph.metadata import TensorInfo
from fxrules.verification.soundness import Verdict
from tests.conftest import ops, trace

MATMUL_AS_MM = """\
rule matmul_as_mm:
    given:
        a: Tensor[M, K]
        b: Tensor[K, N]
    pattern:
        return torch.matmul(a, b)
    where:
        fits_tensor_cores(a, b, "sm80")
    replace:
        return torch.mm(a, b)
"""

#: Per architecture, the dtypes its tensor cores multiply and the multiple of 8 bytes each side must be.
TENSOR_CORES = {"sm80": {torch.float16: 8, torch.bfloat16: 8, torch.float32: 4}}


def fits_tensor_cores(a: TensorInfo, b: TensorInfo, arch: str) -> bool:
    multiple = TENSOR_CORES[arch].get(a.dtype)
    return multiple is not None and a.dtype == b.dtype and all(size % multiple == 0 for size in (*a.shape, b.shape[1]))


def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.matmul(a, b)


def test_a_predicate_gets_the_captures_metadata_and_decides() -> None:
    seen: list[tuple[Any, ...]] = []

    def recording(a: TensorInfo, b: TensorInfo, arch: str) -> bool:
        seen.append((tuple(a.shape), b.dtype, arch))
        return fits_tensor_cores(a, b, arch)

    rules = fxrules.parse(MATMUL_AS_MM, "mm.fxr")
    fits = [torch.randn(8, 4), torch.randn(4, 16)]
    gm = trace(matmul)
    report = fxrules.apply(gm, rules, example_inputs=fits, predicates={"fits_tensor_cores": recording},
                           static_shapes=True)
    assert report.counts() == {"matmul_as_mm": 1} and ops(gm) == ["mm"]
    assert seen == [((8, 4), torch.float32, "sm80")]
    torch.testing.assert_close(gm(*fits), fits[0] @ fits[1])

    odd = [torch.randn(8, 3), torch.randn(3, 16)]
    gm = trace(matmul)
    report = fxrules.apply(gm, rules, example_inputs=odd, predicates={"fits_tensor_cores": fits_tensor_cores},
                           static_shapes=True)
    assert report.counts() == {} and ops(gm) == ["matmul"]
    assert [(s.reason.value, s.detail) for s in report["matmul_as_mm"].skipped] == [
        ("guard false", "the where: condition is false")]


def test_a_predicate_on_symbolic_sizes_skips_unless_shapes_are_static() -> None:
    """Sizes are symbols unless static_shapes=True: an answer that depends on one is reason dynamic size."""
    gm = trace(matmul)
    report = fxrules.apply(gm, fxrules.parse(MATMUL_AS_MM, "mm.fxr"), example_inputs=[torch.randn(8, 4),
                                                                                        torch.randn(4, 16)],
                           predicates={"fits_tensor_cores": fits_tensor_cores})
    assert [s.reason.value for s in report["matmul_as_mm"].skipped] == ["dynamic size"]
    assert ops(gm) == ["matmul"]


def test_an_unknown_predicate_is_an_apply_error_with_its_place_and_the_closest_name() -> None:
    rules = fxrules.parse(MATMUL_AS_MM, "mm.fxr")
    gm = trace(matmul)
    before = gm.code
    with pytest.raises(fxrules.FxrApplyError) as error:
        fxrules.apply(gm, rules, predicates={"fits_tensor_core": fits_tensor_cores})
    assert str(error.value) == ("mm.fxr:8:9: rule matmul_as_mm calls unknown predicate 'fits_tensor_cores'; did you "
                                "mean 'fits_tensor_core'? (given predicates are fits_tensor_core; pass them with "
                                "predicates={...})")
    assert gm.code == before
    with pytest.raises(fxrules.FxrApplyError, match="unknown predicate 'fits_tensor_cores' \\(none were given"):
        fxrules.apply(gm, rules)


@pytest.mark.parametrize(("predicates", "message"), [
    ({"len": len}, "predicate 'len' has the name of a guard function, which a guard calls instead"),
    ({"fits_tensor_cores": 3}, "predicate 'fits_tensor_cores' is not callable: int"),
    ({"not a name": len}, "predicates= maps names to functions; 'not a name' is not a name a guard can call"),
])
def test_bad_predicate_tables_are_usage_errors(predicates: dict[str, Any], message: str) -> None:
    with pytest.raises(fxrules.FxrUsageError) as error:
        fxrules.apply(trace(matmul), fxrules.parse(MATMUL_AS_MM), predicates=predicates)
    assert str(error.value) == message


def test_a_predicate_that_raises_or_returns_no_bool_skips_the_match_as_a_guard_error() -> None:
    rules = fxrules.parse(MATMUL_AS_MM, "mm.fxr")
    inputs = [torch.randn(8, 4), torch.randn(4, 16)]
    for predicate, detail in [(lambda a, b, arch: 1, "mm.fxr:8:9: predicate 'fits_tensor_cores' returned int, "
                                                     "not a bool"),
                              (lambda a, b, arch: TENSOR_CORES["sm90"], "mm.fxr:8:9: KeyError: 'sm90'")]:
        gm = trace(matmul)
        report = fxrules.apply(gm, rules, example_inputs=inputs, predicates={"fits_tensor_cores": predicate},
                               static_shapes=True)
        assert [(s.reason.value, s.detail) for s in report["matmul_as_mm"].skipped] == [("guard error", detail)]
        assert ops(gm) == ["matmul"]


def test_a_predicate_name_is_no_python_builtin() -> None:
    """``where print(x)`` calls the user predicate named print, if one is given; never Python's print."""
    ruleset = fxrules.parse("rule r: torch.neg(torch.neg(x)) => x where print(x)")
    gm = trace(lambda x: torch.neg(torch.neg(torch.relu(x))))
    with pytest.raises(fxrules.FxrApplyError, match="calls unknown predicate 'print'"):
        fxrules.apply(gm, ruleset)
    assert fxrules.apply(gm, ruleset, predicates={"print": lambda x: True}).counts() == {"r": 1}


UNSIGNED_ABS = """\
rule abs_of_unsigned:
    pattern:
        return torch.abs(x)
    where:
        unsigned(x)
    replace:
        return x
"""


def test_verify_takes_inputs_where_a_predicate_is_false_as_outside_the_domain() -> None:
    rules = fxrules.parse(UNSIGNED_ABS, "abs.fxr")
    report = fxrules.verify(rules, max_examples=30, predicates={"unsigned": lambda x: x.dtype == torch.uint8})
    assert report["abs_of_unsigned"].verdict is Verdict.SOUND
    report = fxrules.verify(rules, max_examples=30, predicates={"unsigned": lambda x: True})
    assert report["abs_of_unsigned"].verdict is Verdict.UNSOUND


def test_verify_reports_an_unknown_predicate_as_an_error_of_the_rule() -> None:
    report = fxrules.verify(fxrules.parse(UNSIGNED_ABS, "abs.fxr"), max_examples=5)
    verdict = report["abs_of_unsigned"]
    assert verdict.verdict is Verdict.ERROR
    assert verdict.reason == ("abs.fxr:5:9: rule abs_of_unsigned calls unknown predicate 'unsigned' (none were "
                              "given; pass them with predicates={...})")


def test_the_backend_passes_predicates_and_checks_them_when_built() -> None:
    rules = fxrules.parse(MATMUL_AS_MM, "mm.fxr")
    with pytest.raises(fxrules.FxrApplyError, match="unknown predicate 'fits_tensor_cores'"):
        fxrules.backend(rules, then="eager")
    torch._dynamo.reset()
    backend = fxrules.backend(rules, then="eager", predicates={"fits_tensor_cores": fits_tensor_cores})
    a, b = torch.randn(8, 4), torch.randn(4, 16)
    torch.testing.assert_close(torch.compile(matmul, backend=backend)(a, b), a @ b)
    torch._dynamo.reset()
    assert [report.counts() for report in backend.reports] == [{"matmul_as_mm": 1}]


def test_inductor_pass_cache_key_follows_the_predicates_code() -> None:
    rules = fxrules.parse(MATMUL_AS_MM, "mm.fxr")
    first = fxrules.inductor_pass(rules, predicates={"fits_tensor_cores": fits_tensor_cores}).uuid()
    assert fxrules.inductor_pass(rules, predicates={"fits_tensor_cores": fits_tensor_cores}).uuid() == first
    other = fxrules.inductor_pass(rules, predicates={"fits_tensor_cores": lambda a, b, arch: False}).uuid()
    assert other != first
