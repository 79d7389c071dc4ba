"""Whatever a rule raises while it is verified ends as a verdict with its location: unsound (the replacement
fails where the pattern works), error (an fxrules error: the rule cannot run as written) or inconclusive with the
reason; no raw Python exception escapes fxrules.verify or the command line."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import torch

import fxrules
from fxrules.cli import main
from fxrules.verification.soundness import RuleVerdict, Verdict

BUNDLED_HELPERS = ("concat, fold_conv_bn, fold_conv_bn_bias, fold_conv_bn_weight, fold_linear_bn, index, "
                   "static_shape, static_size")


def verdict_of(text: str, **options: Any) -> RuleVerdict:
    """The verdict of the one rule in ``text`` (a file named r.fxr), at 20 examples."""
    [result] = fxrules.verify(fxrules.parse(text, filename="r.fxr"), max_examples=20, **options).results
    return result


@pytest.mark.parametrize("name", ["lambda", "self", "getattr"])
def test_captures_named_like_python_keywords_or_builtins_are_verified(name: str) -> None:
    """The standalone graphs name their inputs as FX names nodes, not as the captures (``def forward(self,
    lambda)`` would not compile, a second ``self`` would shift every input)."""
    result = verdict_of(f"rule r:\n    given:\n        {name}: Tensor[..., dtype=float32]\n"
                        f"    pattern:\n        return torch.add({name}, {name})\n"
                        f"    replace:\n        return torch.mul({name}, 2)\n")
    assert (result.sound, result.examples) == (True, 20)


def test_the_reproduction_of_a_capture_named_like_a_keyword_is_valid_python() -> None:
    """A counterexample's reproduction names a keyword capture's variable ``lambda_``."""
    result = verdict_of("rule r: torch.relu(lambda) => torch.neg(lambda)")
    assert result.counterexample is not None
    reproduction = result.counterexample.reproduction
    compile(reproduction, "reproduction", "exec")
    assert "lambda_ = torch.tensor(" in reproduction
    assert reproduction.endswith("print(graphs.pattern(lambda_), graphs.replacement(lambda_))")


@pytest.mark.parametrize(("replacement", "raised"), [
    ("x.transpose(0, 5)", "IndexError: Dimension out of range (expected to be in range of [-1, 0], but got 5)"),
    ("torch.relu(x)[(1, 2, 3, 4, 5)]", "IndexError: too many indices for tensor of dimension 0"),
    ("torch.full(x.shape, 'q')", "TypeError: full(): argument 'fill_value' (position 2) must be Number, not str"),
    ("x.reshape(3, 3, 3, 3, 3, 3, 3)", "RuntimeError: shape '[3, 3, 3, 3, 3, 3, 3]' is invalid for input of size 1"),
])
def test_a_replacement_that_raises_is_unsound_with_the_exception(replacement: str, raised: str) -> None:
    result = verdict_of(f"rule r: torch.relu(x) => {replacement}", prove=False)
    assert result.verdict is Verdict.UNSOUND
    assert result.location == "r.fxr:1:6"
    assert result.reason == f"the replacement raises {raised}"
    # shrunk to the smallest input: a 0-dim float32 zero
    assert result.counterexample is not None and result.counterexample.inputs == ("x: Tensor[] torch.float32 = 0.0",)


def test_an_alternative_whose_replacement_raises_is_unsound() -> None:
    result = verdict_of("rule r: torch.neg(torch.neg(x)) | operator.neg(operator.neg(x)) => x.view(-1, 3, 3, 3)")
    assert result.verdict is Verdict.UNSOUND
    assert result.reason == "the replacement raises RuntimeError: shape '[-1, 3, 3, 3]' is invalid for input of size 1"


def test_a_helper_given_the_wrong_modules_is_unsound_with_its_error() -> None:
    text = """
rule r:
    given:
        c: nn.Linear
        bn: nn.BatchNorm1d
    pattern:
        return bn(c(x))
    replace:
        return @fold_conv_bn(c, bn)(x)
"""
    result = verdict_of(text)
    assert (result.verdict, result.location) == (Verdict.UNSOUND, "r.fxr:2:6")
    assert result.reason == "the replacement raises TypeError: fold_conv_bn: expected Conv1d/2d/3d, got Linear"


def test_an_unknown_helper_is_an_error_at_the_call() -> None:
    result = verdict_of("rule r: torch.relu(x) => @nope(x)")
    assert result.verdict is Verdict.ERROR
    assert result.reason == (f"r.fxr:1:26: unknown helper '@nope'; bundled helpers are {BUNDLED_HELPERS}; pass "
                             "others with helpers={...}")
    assert str(result).startswith("r.fxr:1:6: r: error: r.fxr:1:26: unknown helper '@nope'")


def test_an_fxrules_error_building_the_replacement_is_an_error_of_the_rule() -> None:
    text = """
rule r:
    given:
        c: nn.Conv2d
    pattern:
        return c(x)
    replace:
        return torch.conv2d(x, c)
"""
    result = verdict_of(text)
    assert result.verdict is Verdict.ERROR
    assert str(result) == ("r.fxr:2:6: r: error: a module capture can be called or passed to a helper, not used as "
                           "a value")
    assert not fxrules.verify(fxrules.parse(text, filename="r.fxr"), max_examples=20).sound


def test_a_guard_that_raises_on_every_input_is_inconclusive_with_its_location() -> None:
    result = verdict_of("rule r: torch.relu(x) => x where x.shape[7] == 1")
    assert result.verdict is Verdict.INCONCLUSIVE
    assert result.reason == ("the guard raised on every input the pattern accepted (the last: r.fxr:1:34: "
                             "IndexError: tuple index out of range)")


def test_a_pattern_that_raises_on_every_input_is_inconclusive_with_the_last_error() -> None:
    result = verdict_of("rule r: x.view(13, 13, 13, 13) => x")
    assert result.verdict is Verdict.INCONCLUSIVE
    assert result.reason.startswith("the pattern raised on every generated input (the last: RuntimeError: ")
    assert "13" in result.reason  # the last error names the size no drawn input has


def test_a_guard_rarely_true_says_how_the_inputs_were_rejected() -> None:
    result = verdict_of("rule r: torch.relu(x) => x where x.ndim > 10")
    assert result.verdict is Verdict.INCONCLUSIVE
    assert re.fullmatch(r"no generated input satisfied the guard and the pattern's domain \(the pattern raised on "
                        r"\d+ inputs; the guard was false on \d+ inputs\)", result.reason)  # relu raises on bool


def test_outputs_verify_cannot_compare_are_inconclusive() -> None:
    result = verdict_of("rule r: torch.relu(x).dtype => x.dtype")
    assert result.verdict is Verdict.INCONCLUSIVE
    assert result.reason == ("verify cannot compare the pattern's dtype with the replacement's dtype (RuntimeError: "
                             "Could not infer dtype of torch.dtype)")


def test_an_integer_difference_prints_without_a_relative_difference() -> None:
    result = verdict_of("rule r: torch.relu(x).shape[0] => x.numel()")
    assert result.verdict is Verdict.UNSOUND
    head, difference = str(result).splitlines()[:2]
    assert head == "r.fxr:1:6: r: unsound: values differ"
    assert re.fullmatch(r"  max abs diff \d+", difference)


def test_a_random_replacement_is_inconclusive_and_the_same_on_every_run() -> None:
    text = ("rule r:\n    given:\n        x: Tensor[..., dtype=float32]\n    pattern:\n        return torch.relu(x)\n"
            "    replace:\n        return torch.where(operator.gt(torch.rand_like(x), 0.9), x, torch.relu(x))\n")
    state = torch.random.get_rng_state()
    first, second = verdict_of(text), verdict_of(text)
    assert torch.equal(torch.random.get_rng_state(), state)  # verify leaves the caller's random numbers alone
    assert first.verdict is Verdict.INCONCLUSIVE
    assert first.reason == ("the outcome changed when an input was run again: the pattern or the replacement is not "
                            "deterministic")
    assert (second.verdict, second.reason) == (first.verdict, first.reason)


def test_a_module_without_a_generator_is_inconclusive() -> None:
    text = ("rule r:\n    given:\n        m: nn.LSTM\n    pattern:\n        return m(x)\n"
            "    replace:\n        return m(x)\n")
    result = verdict_of(text)
    assert (result.verdict, result.reason) == (
        Verdict.INCONCLUSIVE,
        "no input generator for LSTM: register one with fxrules.verification.strategies.register_module")


def test_ctrl_c_in_a_helper_stops_verify() -> None:
    def interrupted(x: Any) -> int:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        verdict_of("rule r: torch.neg(torch.neg(x)) => x + @stop(x)", helpers={"stop": interrupted})


def test_the_command_line_prints_a_verdict_for_every_such_rule(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    rules = tmp_path / "mixed.fxr"
    rules.write_text("rule keyword_capture: torch.neg(torch.neg(lambda)) => torch.clone(lambda)\n"
                     "rule returns_dtype: torch.relu(x).dtype => x.dtype\n"
                     "rule out_of_range: torch.relu(x) => x.transpose(0, 5)\n"
                     "rule unknown_helper: torch.relu(x) => @nope(x)\n"
                     "rule guard_raises: torch.relu(x) => x where x.shape[7] == 1\n", encoding="utf-8")
    assert main(["verify", str(rules), "--examples", "20", "--no-prove"]) == 1
    out = capsys.readouterr().out
    heads = [line.split(": ", 3)[1:3] for line in out.splitlines() if line.startswith(str(rules))]
    assert heads == [["keyword_capture", "sound (20 examples)"], ["returns_dtype", "inconclusive"],
                     ["out_of_range", "unsound"], ["unknown_helper", "error"], ["guard_raises", "inconclusive"]]
    assert out.endswith("5 rules: 1 sound, 1 unsound, 2 inconclusive, 1 error (seed 0)\n")
