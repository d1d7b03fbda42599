r"""How command-line text becomes a hyper-parameter value (``--set``, config files)."""
import math
from typing import Annotated

import pytest

from pyg_fedgraph.experiment import parse_value
from pyg_fedgraph.hparams import Range, parse_text, schema


def _lr(lr: Annotated[float, Range(gt=0.0)] = 0.1) -> None:
    pass


@pytest.mark.parametrize("text", ["nan", "NaN", "NAN", "-nan", "+nan", " nan "])
def test_every_spelling_of_nan_parses_to_nan(text):
    assert math.isnan(parse_text(text))
    assert math.isnan(parse_value(text))


@pytest.mark.parametrize("text,value", [
    ("inf", math.inf), ("INF", math.inf), ("+inf", math.inf), ("Infinity", math.inf),
    ("infinity", math.inf), ("-inf", -math.inf), ("-Infinity", -math.inf)])
def test_every_spelling_of_infinity_parses_to_infinity(text, value):
    assert parse_text(text) == value
    assert parse_value(text) == value


@pytest.mark.parametrize("text,wording", [
    ("nan", "nan"), ("NaN", "nan"), ("-nan", "nan"),
    ("inf", "inf"), ("Infinity", "inf"), ("INF", "inf"), ("-inf", "-inf")])
def test_non_finite_values_get_one_wording_whatever_the_spelling(text, wording):
    # JSON reads NaN and Infinity, not nan and inf: those once got "expected a float > 0,
    # got 'nan'" while NaN got "expected a finite number, got nan".
    with pytest.raises(ValueError) as error:
        schema(_lr)["lr"].parse(text, "--set lr")
    assert str(error.value) == f"--set lr: expected a finite number, got {wording}"


def test_other_text_is_unchanged():
    assert parse_text("0.1") == 0.1
    assert parse_text("[1, 2]") == [1, 2]
    assert parse_text("True") is True
    assert parse_text("none") is None
    # Words that only begin like a non-finite spelling stay strings.
    assert parse_text("nano") == "nano"
    assert parse_text("information") == "information"
    assert parse_value("sgd") == "sgd"
