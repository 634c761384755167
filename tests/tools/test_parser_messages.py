"""Issue 14.7: parser errors speak the language, not the grammar. Over a
corpus of malformed programs (the malformed corpus, and seeded mutations of
the examples: characters dropped, doubled, swapped, truncated) no message
names a grammar rule or terminal (attr_dict, ATTR_DICT, __ANON_0, lark's
'Expected one of'); and MLIR's spellings of constants get an error that says
what to write, which then parses."""

from __future__ import annotations

import pathlib
import random
import re

import pytest

from fusecc.compiler.diagnostics import DiagnosticError
from fusecc.compiler.parser import parse_module
from fusecc.compiler.syntax import lark_parser
from fusecc.compiler.verifier import verify

ROOT = pathlib.Path(__file__).resolve().parents[2]
SOURCES = [ROOT / "examples" / "mlp.ir", ROOT / "examples" / "attention.ir", ROOT / "examples" / "llama_block.ir"]
PUNCTUATION = list("{}()<>[],:=%@\"-x") + ["dense", "->", "loc(", "tensor<", "//"]


def grammar_words() -> set[str]:
    """Names only the grammar uses: rules and terminals with an underscore or
    in capitals (plain words like 'region' could be English)."""
    parser = lark_parser()
    names = {t.name for t in parser.terminals} | {str(r.origin.name) for r in parser.rules}
    return {n for n in names if "_" in n.strip("_") or n.isupper() or n.startswith("__")}


LEAKS = re.compile(r"__ANON|[Ee]xpected one of|Token\(|\bstart\b|attributes_only")


def message_of(text: str) -> str | None:
    try:
        verify(parse_module(text, "mutant.ir"))
    except DiagnosticError as exc:
        return exc.diagnostic.message
    except Exception as exc:  # an internal error: also reported below
        return f"INTERNAL {type(exc).__name__}: {exc}"
    return None


def mutants(seed: int, count: int):
    rng = random.Random(seed)
    texts = [p.read_text() for p in SOURCES]
    for _ in range(count):
        text = rng.choice(texts)
        at = rng.randrange(len(text))
        kind = rng.randrange(4)
        if kind == 0:
            yield text[:at] + text[at + 1 :]
        elif kind == 1:
            yield text[:at] + rng.choice(PUNCTUATION) + text[at:]
        elif kind == 2:
            yield text[:at]
        else:
            end = min(len(text), at + rng.randrange(1, 12))
            yield text[:at] + text[end:]


def corpus():
    yield from ((p.name, p.read_text()) for p in sorted((ROOT / "tests" / "corpus" / "malformed").glob("*.ir")))
    yield from ((f"mutant{i}", text) for i, text in enumerate(mutants(14, 400)))


def test_no_message_names_the_grammar():
    words = grammar_words()
    assert {"ATTR_DICT", "attr_dict"} <= words or "ATTR_DICT" in words  # the control: the set holds the culprits
    named = re.compile(r"\b(" + "|".join(sorted(map(re.escape, words), key=len, reverse=True)) + r")\b")
    errors = 0
    for name, text in corpus():
        message = message_of(text)
        if message is None:
            continue
        errors += 1
        assert not message.startswith("INTERNAL"), f"{name}: {message}"
        assert not LEAKS.search(message), f"{name}: {message}"
        leaked = named.search(message.replace("'dense<...>'", "").replace("'dense_resource<...>'", ""))
        assert leaked is None, f"{name}: grammar name '{leaked.group(0)}' in: {message}"
    assert errors > 300  # most mutants are errors: the check ran


CONSTANT = "func.func @main() -> tensor<4xf32> {{\n  {line}\n  func.return %c : tensor<4xf32>\n}}\n"


@pytest.mark.parametrize(
    "line, suggestion",
    [
        ("%c = tensor.constant dense<1.0> : tensor<4xf32>", "tensor.constant {value = dense<1.0> : tensor<4xf32>} : () -> tensor<4xf32>"),
        ("%c = arith.constant dense<[1.0, 2.0, 3.0, 4.0]> : tensor<4xf32>", "tensor.constant {value = dense<[1.0, 2.0, 3.0, 4.0]> : tensor<4xf32>} : () -> tensor<4xf32>"),
        ("%c = tensor.constant 1.0 : tensor<4xf32>", "tensor.constant {value = dense<1.0> : tensor<4xf32>} : () -> tensor<4xf32>"),
    ],
)
def test_mlir_spellings_of_constants_say_what_to_write(line, suggestion):
    message = message_of(CONSTANT.format(line=line))
    assert suggestion in message and "MLIR's spelling" in message
    fixed = CONSTANT.format(line="%c = " + suggestion)
    assert message_of(fixed) is None  # the suggestion parses and verifies


def test_scalar_arith_constant_points_at_a_tensor_constant():
    message = message_of(CONSTANT.format(line="%c = arith.constant 1.0 : f32"))
    assert "tensor.constant {value = dense<1.0> : tensor<f32>} : () -> tensor<f32>" in message


def test_the_forms_that_parse():
    for line in (
        "%c = tensor.constant {value = dense<1.0> : tensor<4xf32>} : () -> tensor<4xf32>",
        "%c = tensor.constant {value = dense<1.0> : tensor<4xf32>}",  # the type is inferred
        '%c = "tensor.constant"() {value = dense<1.0> : tensor<4xf32>} : () -> tensor<4xf32>',
    ):
        assert message_of(CONSTANT.format(line=line)) is None, line


def test_a_malformed_attribute_dictionary_is_located_inside_it():
    text = CONSTANT.format(line="%c = tensor.constant {value = dense<1.0>} : () -> tensor<4xf32>")
    with pytest.raises(DiagnosticError) as caught:
        parse_module(text, "m.ir")
    diagnostic = caught.value.diagnostic
    assert diagnostic.message == "malformed attribute dictionary: expected ':', got '}'"
    assert (diagnostic.location.line, diagnostic.location.col) == (2, text.split("\n")[1].index("}") + 1)


def test_a_bad_dim_name_is_located():
    message = message_of('func.func @f(%x: tensor<?xf32>) -> tensor<?xf32> attributes {fusecc.dims = [["1B"]]} {\n  func.return %x : tensor<?xf32>\n}\n')
    assert message.startswith("dim name '1B' in 'fusecc.dims' must be an identifier")


