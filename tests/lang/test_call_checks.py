"""Every call in a pattern or a replacement is checked against its target's signature when the file loads.

A call no overload of its target takes (a keyword it does not have, a positional argument too many, a
required argument left out) is a load error with the caret on the argument at fault, or on the call when
one is missing; a capture spelt one edit from True, False or None is one too.  Calls each kind of target
takes still load.
"""

from __future__ import annotations

import pytest

import fxrules
from fxrules import FxrLoadError

MODULE_RULE = """\
rule r:
    given:
        m: nn.Linear
    pattern:
        return m(x, y)
    replace:
        return x
"""


def _only_diagnostic(text: str) -> str:
    with pytest.raises(FxrLoadError) as info:
        fxrules.parse(text, "calls.fxr")
    assert len(info.value.diagnostics) == 1, str(info.value)
    return str(info.value)


@pytest.mark.parametrize(("text", "expected"), [
    pytest.param(
        "rule r: torch.relu(x) => torch.clamp_min(x)\n",
        "calls.fxr:1:26: error: torch.clamp_min() is missing the required argument 'min'\n"
        "    rule r: torch.relu(x) => torch.clamp_min(x)\n"
        "                             ^\n"
        "  hint: its parameters are (input, min)",
        id="missing-argument-in-replacement"),
    pytest.param(
        "rule r: torch.clamp(x, mn=0.0) => x\n",
        "calls.fxr:1:24: error: torch.clamp() has no parameter 'mn'\n"
        "    rule r: torch.clamp(x, mn=0.0) => x\n"
        "                           ^\n"
        "  hint: did you mean 'min'?",
        id="unknown-keyword-of-a-torch-function"),
    pytest.param(
        "rule r: torch.add(x, y, alfa=2) => x\n",
        "calls.fxr:1:25: error: torch.add() has no parameter 'alfa'\n"
        "    rule r: torch.add(x, y, alfa=2) => x\n"
        "                            ^\n"
        "  hint: did you mean 'alpha'?",
        id="unknown-keyword-in-pattern"),
    pytest.param(
        "rule r: x.sum(dimm=-1) => x\n",
        "calls.fxr:1:15: error: Tensor.sum() has no parameter 'dimm'\n"
        "    rule r: x.sum(dimm=-1) => x\n"
        "                  ^\n"
        "  hint: did you mean 'dim'?",
        id="unknown-keyword-of-a-method"),
    pytest.param(
        "rule r: torch.relu(x, y, z) => x\n",
        "calls.fxr:1:23: error: torch.relu() takes at most 1 positional argument but 3 were given\n"
        "    rule r: torch.relu(x, y, z) => x\n"
        "                          ^\n"
        "  hint: its parameters are (input)",
        id="too-many-positional"),
    pytest.param(
        "rule r: x.transpose(0, 1, 2) => x\n",
        "calls.fxr:1:27: error: Tensor.transpose() takes 2 positional arguments but 3 were given\n"
        "    rule r: x.transpose(0, 1, 2) => x\n"
        "                              ^\n"
        "  hint: its parameters are (input, dim0, dim1)",
        id="too-many-positional-to-a-method"),
    pytest.param(
        "rule r: aten.add.Tensor(x, y, alfa=2) => x\n",
        "calls.fxr:1:31: error: aten.add.Tensor() has no parameter 'alfa'\n"
        "    rule r: aten.add.Tensor(x, y, alfa=2) => x\n"
        "                                  ^\n"
        "  hint: did you mean 'alpha'?",
        id="aten-overload"),
    pytest.param(
        "rule r: aten.mm(x) => x\n",
        "calls.fxr:1:9: error: aten.mm() is missing the required argument 'mat2'\n"
        "    rule r: aten.mm(x) => x\n"
        "            ^\n"
        "  hint: its parameters are (input, mat2, out_dtype)",
        id="aten-packet"),
    pytest.param(
        "rule r: softmax(x, dm=-1) => x\n",
        "calls.fxr:1:20: error: softmax() has no parameter 'dm'\n"
        "    rule r: softmax(x, dm=-1) => x\n"
        "                       ^\n"
        "  hint: did you mean 'dim'?",
        id="family"),
    pytest.param(
        "rule r: operator.add(x, y, z) => x\n",
        "calls.fxr:1:28: error: operator.add() takes 2 positional arguments but 3 were given\n"
        "    rule r: operator.add(x, y, z) => x\n"
        "                               ^\n"
        "  hint: its parameters are (a, b)",
        id="operator-function"),
    pytest.param(
        "rule r: F.gelu(x, approximation='tanh') => x\n",
        "calls.fxr:1:19: error: F.gelu() has no parameter 'approximation'\n"
        "    rule r: F.gelu(x, approximation='tanh') => x\n"
        "                      ^\n"
        "  hint: did you mean 'approximate'?",
        id="python-function"),
    pytest.param(
        MODULE_RULE,
        "calls.fxr:5:21: error: nn.Linear() takes 1 positional argument but 2 were given\n"
        "            return m(x, y)\n"
        "                        ^\n"
        "  hint: its parameters are (input)",
        id="module-forward"),
    pytest.param(
        "rule r: F.relu(x, inplace=Ture) => torch.relu(x)\n",
        "calls.fxr:1:27: error: 'Ture' would be a capture matching anything; did you mean True?\n"
        "    rule r: F.relu(x, inplace=Ture) => torch.relu(x)\n"
        "                              ^\n"
        "  hint: declare 'Ture' in given: if a capture is meant",
        id="capture-spelt-like-True"),
    pytest.param(
        "rule r: F.dropout(x, 0.1, Flase) => x\n",
        "calls.fxr:1:27: error: 'Flase' would be a capture matching anything; did you mean False?\n"
        "    rule r: F.dropout(x, 0.1, Flase) => x\n"
        "                              ^\n"
        "  hint: declare 'Flase' in given: if a capture is meant",
        id="capture-spelt-like-False"),
    pytest.param(
        "rule r: torch.relu(x) => F.relu(x, inplace=Nnoe)\n",
        "calls.fxr:1:44: error: 'Nnoe' is not bound by the pattern\n"
        "    rule r: torch.relu(x) => F.relu(x, inplace=Nnoe)\n"
        "                                               ^\n"
        "  hint: did you mean None?",
        id="replacement-name-spelt-like-None"),
])
def test_a_call_its_target_cannot_take_is_a_load_error_at_the_argument(text: str, expected: str) -> None:
    assert _only_diagnostic(text) == expected


def test_a_declared_capture_spelt_like_a_constant_is_taken_as_meant() -> None:
    ruleset = fxrules.parse("rule r:\n    given:\n        Ture: bool\n    pattern:\n"
                            "        return F.relu(x, inplace=Ture)\n    replace:\n        return F.relu(x, Ture)\n")
    assert [rule.name for rule in ruleset] == ["r"]


def test_short_captures_near_a_constant_are_taken_as_meant() -> None:
    """``one`` is one letter from ``None`` but an ordinary capture name."""
    assert len(fxrules.parse("rule r: x * one => x * one\n")) == 1


GOOD_CALLS = [
    # torch functions, by position, by keyword, sizes loose or as a list, Python wrappers with *args
    "torch.clamp(x, min=0.0)", "torch.clamp(x, 0, 6)", "torch.add(x, y, alpha=2)", "torch.sum(x, -1)",
    "torch.sum(x, dim=-1, keepdim=True)", "torch.zeros(2, 3) + x", "torch.zeros([2, 3]) + x",
    "torch.einsum('ij,jk->ik', x, y)", "torch.meshgrid(x, y)", "torch.cat([x, y], dim=1)",
    # NumPy spellings torch's argument parser accepts
    "x.sum(axis=1)", "x.sum(-1, keepdims=True)",
    # methods, with sizes loose or packed, and overloads chosen by the arguments
    "x.view(2, 3)", "x.view(-1)", "x.squeeze(0, 1)", "x.resize_(2, 3)", "x.flip(0, 1)",
    "x.reshape(2, -1)", "x.permute(0, 2, 1)", "x.to(torch.float16)",
    "x.to(device='cpu')", "x.size(1)", "x.max(dim=1)", "x.max()", "x.transpose(-1, -2)",
    "x.softmax(dim=-1)", "x.contiguous(memory_format=torch.channels_last)",
    # aten overloads and packets, operators, families, Python functions
    "aten.add.Tensor(x, y, alpha=2)", "aten.add(x, y)", "aten.sum.dim_IntList(x, [1])", "operator.getitem(x, 0)",
    "x[:, 0]", "-x", "x @ y", "softmax(x, -1)", "softmax(x, dim=-1)", "sum(x, -1, keepdim=True)", "add(x, y)",
    "F.relu(x, inplace=True)", "F.gelu(x, approximate='tanh')", "F.layer_norm(x, [4], y, z, 1e-5)",
    "F.scaled_dot_product_attention(x, y, z, is_causal=True)", "torch.sum(x, ...)", "F.dropout(x, ...)",
]


@pytest.mark.parametrize("call", GOOD_CALLS)
def test_calls_every_kind_of_target_takes_still_load(call: str) -> None:
    ruleset = fxrules.parse(f"rule r:\n    pattern:\n        return ({call}) * 3\n    replace:\n        return x\n")
    assert [rule.name for rule in ruleset] == ["r"]


def test_module_calls_bind_to_forward() -> None:
    text = MODULE_RULE.replace("m(x, y)", "m(x)")
    assert [rule.name for rule in fxrules.parse(text)] == ["r"]


def test_calls_of_an_allowed_callable_are_checked_against_its_signature() -> None:
    with pytest.raises(FxrLoadError) as info:
        fxrules.parse("rule r: torch.sqrt(x) => colorsys.rgb_to_hsv(x, x)\n", "calls.fxr", allow=["colorsys"])
    assert str(info.value) == (
        "calls.fxr:1:26: error: colorsys.rgb_to_hsv() is missing the required argument 'b'\n"
        "    rule r: torch.sqrt(x) => colorsys.rgb_to_hsv(x, x)\n"
        "                             ^\n"
        "  hint: its parameters are (r, g, b)")


def test_only_a_pattern_notes_arguments_compared_as_written() -> None:
    """A call without a signature (``x.T`` is ``getattr(x, "T")``) is noted as compared as written when the
    pattern matches it; a replacement builds it and compares nothing, so it adds no note."""
    in_pattern = fxrules.parse("rule r: torch.relu(x.T) => torch.relu(x)\n").rules[0]
    in_replacement = fxrules.parse("rule r: torch.neg(x) => torch.relu(x.T)\n").rules[0]
    assert in_pattern.notes == ("arguments of getattr are compared as written (no signature)",)
    assert in_replacement.notes == ()


# ---------------------------------------------------------------- facts found once per target stay its own

FAMILY_FIRSTS = """\
family sm = nn.Softmax | torch.softmax
family act = nn.ReLU | F.relu
family ts = torch.softmax | nn.Softmax
rule a: sm(x, 1, 2) => x
rule b: act(x, True, 1) => x
rule c: ts(x, 1, 2, 3, 4) => x
rule d: torch.softmax(x, 1, 2, 3) => x
"""


def test_a_family_binds_to_its_own_first_member_and_a_member_to_its_own_signature() -> None:
    """A family whose first member is a module class takes the class's forward and constructor parameters,
    another class's family takes that class's, a family of the same members in another order takes its
    first member's, and a member called by itself takes its own: none borrows another's signature."""
    with pytest.raises(FxrLoadError) as info:
        fxrules.parse(FAMILY_FIRSTS, "calls.fxr")
    assert str(info.value) == (
        "calls.fxr:4:18: error: sm() takes 2 positional arguments but 3 were given\n"
        "    rule a: sm(x, 1, 2) => x\n"
        "                     ^\n"
        "  hint: its parameters are (input, dim)\n"
        "calls.fxr:5:22: error: act() takes 2 positional arguments but 3 were given\n"
        "    rule b: act(x, True, 1) => x\n"
        "                         ^\n"
        "  hint: its parameters are (input, inplace)\n"
        "calls.fxr:6:21: error: ts() takes at most 3 positional arguments but 5 were given\n"
        "    rule c: ts(x, 1, 2, 3, 4) => x\n"
        "                        ^\n"
        "  hint: its parameters are (input, dim, dtype)\n"
        "calls.fxr:7:32: error: torch.softmax() takes at most 3 positional arguments but 4 were given\n"
        "    rule d: torch.softmax(x, 1, 2, 3) => x\n"
        "                                   ^\n"
        "  hint: its parameters are (input, dim, dtype)")


def test_two_families_of_one_module_class_bind_alike() -> None:
    """The module attribute ``dim`` binds by position and by name in both families led by ``nn.Softmax``."""
    ruleset = fxrules.parse("family sm = nn.Softmax | torch.softmax\nfamily sm2 = nn.Softmax | F.softmax\n"
                            "rule a: sm(x, 1) => sm2(x, dim=1)\nrule b: sm2(x, 1) => sm(x, dim=1)\n")
    bound = [rule.pattern[0].bound for rule in ruleset]
    assert [list(b) for b in bound if b is not None] == [["input", "dim"], ["input", "dim"]]


def test_a_call_shape_no_overload_takes_is_explained_by_its_own_keywords_and_partiality() -> None:
    """``aten.add(x, ...)`` loads (the rest of its arguments are left open) though ``aten.add(x)`` misses one;
    two unknown keywords in calls of one shape are each named."""
    with pytest.raises(FxrLoadError) as info:
        fxrules.parse("rule a: aten.add(x, ...) => x\nrule b: aten.add(x) => x\n"
                      "rule c: torch.sum(x, dimm=1) => x\nrule d: torch.sum(x, dimz=1) => x\n", "calls.fxr")
    assert str(info.value) == (
        "calls.fxr:2:9: error: aten.add() is missing the required argument 'other'\n"
        "    rule b: aten.add(x) => x\n"
        "            ^\n"
        "  hint: its parameters are (input, other, alpha)\n"
        "calls.fxr:3:22: error: torch.sum() has no parameter 'dimm'\n"
        "    rule c: torch.sum(x, dimm=1) => x\n"
        "                         ^\n"
        "  hint: did you mean 'dim'?\n"
        "calls.fxr:4:22: error: torch.sum() has no parameter 'dimz'\n"
        "    rule d: torch.sum(x, dimz=1) => x\n"
        "                         ^\n"
        "  hint: did you mean 'dim'?")


def test_functions_of_one_name_keep_their_own_signatures() -> None:
    """``F.relu`` takes ``inplace``; ``torch.relu``, named alike, does not, whichever the file names first;
    ``Tensor.log1p`` and ``torch.log1p`` share their schemas."""
    with pytest.raises(FxrLoadError) as info:
        fxrules.parse("rule a: F.relu(x, inplace=False) => x.log1p()\nrule b: torch.relu(x, inplace=False) => x\n"
                      "rule c: x.log1p() => torch.log1p(x, x)\n", "calls.fxr")
    assert str(info.value) == (
        "calls.fxr:2:23: error: torch.relu() has no parameter 'inplace'\n"
        "    rule b: torch.relu(x, inplace=False) => x\n"
        "                          ^\n"
        "  hint: its parameters are (input)\n"
        "calls.fxr:3:37: error: torch.log1p() takes at most 1 positional argument but 2 were given\n"
        "    rule c: x.log1p() => torch.log1p(x, x)\n"
        "                                        ^\n"
        "  hint: its parameters are (input)")


def test_sizes_given_loose_bind_as_one_sequence() -> None:
    """``x.view(2, 3)`` binds its ``size`` to the tuple of both sizes; ``x.view([2, 3])`` to the list."""
    loose, packed = (fxrules.parse(f"rule r: torch.relu({call}) => x\n").rules[0].pattern[0].args[0]
                     for call in ("x.view(2, 3)", "x.view([2, 3])"))
    assert list(loose.bound) == list(packed.bound) == ["input", "size"]
    assert [item.value for item in loose.bound["size"].items] == [2, 3] and loose.bound["size"].is_tuple
    assert packed.bound["size"] is packed.args[1] and not packed.bound["size"].is_tuple


def test_what_only_one_side_allows_is_decided_by_that_side() -> None:
    """A choice that a pattern may make is refused in the replacement of the same rule, and a helper that a
    replacement may call is refused in the pattern of the next."""
    with pytest.raises(FxrLoadError) as info:
        fxrules.parse("rule a:\n    pattern:\n        return torch.relu(x) | torch.neg(x)\n    replace:\n"
                      "        return torch.relu(x) | torch.neg(x)\n"
                      "rule b:\n    pattern:\n        return @h(x)\n    replace:\n        return @h(x)\n", "calls.fxr")
    assert [d.message for d in info.value.diagnostics] == [
        "alternatives 'A | B' may only appear in a pattern", "helper '@h' may only be called in a replacement"]
