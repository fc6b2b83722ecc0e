"""Descriptions from docstrings: Google, NumPy and reST, as a table."""

import dataclasses

import pytest

from forge_tools import get_tool, tool
from forge_tools._docstring import parse

GOOGLE = """Fetches rows.

    Longer explanation
    over two lines.

    Args:
        table (str): The table
            to read.
        limit: How many rows.
        *columns: Column names.

    Returns:
        list: The rows, in order.

    Raises:
        KeyError: never documented as a parameter.
    """

NUMPY = """Fetches rows.

    Longer explanation
    over two lines.

    Parameters
    ----------
    table : str
        The table
        to read.
    limit : int, optional
        How many rows.
    x, y : float
        Coordinates.

    Returns
    -------
    list
        The rows, in order.

    Examples
    --------
    >>> fetch("t")
    """

REST = """Fetches rows.

    Longer explanation
    over two lines.

    :param table: The table
        to read.
    :type table: str
    :param int limit: How many rows.
    :returns: The rows, in order.
    :rtype: list
    :raises KeyError: when absent.
    """

PLAIN = """Fetches rows.

    Longer explanation
    over two lines.
    """

DESCRIPTION = "Fetches rows.\n\nLonger explanation over two lines."


@pytest.mark.parametrize("doc,style,params,returns", [
    (GOOGLE, "google", {"table": "The table to read.", "limit": "How many rows.", "columns": "Column names."}, "The rows, in order."),
    (NUMPY, "numpy", {"table": "The table to read.", "limit": "How many rows.", "x": "Coordinates.", "y": "Coordinates."}, "The rows, in order."),
    (REST, "rest", {"table": "The table to read.", "limit": "How many rows."}, "The rows, in order."),
    (PLAIN, "plain", {}, ""),
    ("One line.", "plain", {}, ""),
    (None, "plain", {}, ""),
], ids=["google", "numpy", "rest", "plain", "one line", "none"])
def test_parse(doc, style, params, returns):
    d = parse(doc)
    assert d.style == style
    assert d.description == ("One line." if doc == "One line." else "" if doc is None else DESCRIPTION)
    assert d.params == params
    assert d.returns == returns


def _google(table: str, limit: int = 10) -> list: ...
def _numpy(table: str, limit: int = 10) -> list: ...
def _rest(table: str, limit: int = 10) -> list: ...


_google.__doc__, _numpy.__doc__, _rest.__doc__ = GOOGLE, NUMPY, REST


@pytest.mark.parametrize("fn", [_google, _numpy, _rest], ids=["google", "numpy", "rest"])
def test_tool_descriptions(fn):
    """Summary -> the tool's description, parameters -> property descriptions, Returns -> the result's."""
    t = get_tool(tool(fn))
    assert t.description == DESCRIPTION
    props = t.input_schema["properties"]
    assert props["table"]["description"] == "The table to read."
    assert props["limit"]["description"] == "How many rows."
    assert t.output_schema["properties"]["result"]["description"] == "The rows, in order."


@dataclasses.dataclass
class Numpy:
    """A record.

    Attributes
    ----------
    a : int
        The a.
    """

    a: int


@dataclasses.dataclass
class Rest:
    """A record.

    :ivar a: The a.
    """

    a: int


@pytest.mark.parametrize("cls", [Numpy, Rest])
def test_class_attribute_descriptions(cls):
    @tool
    def f(r: cls) -> None: ...  # type: ignore[valid-type]

    s = get_tool(f).input_schema["properties"]["r"]
    assert s["description"] == "A record."
    assert s["properties"]["a"]["description"] == "The a."
