"""Argument validation against the inputSchema: a violation names the field path."""

import dataclasses
import enum
from typing import Dict, List, Literal, Optional, Tuple

import pytest

from conftest import require_pydantic
from forge_tools import InvalidArguments, get_tool, tool
from forge_tools._jsonschema import SchemaError, validate


class Mode(enum.Enum):
    FAST = "fast"
    SLOW = "slow"


@dataclasses.dataclass
class Point:
    x: float
    y: float = 0.0


@tool
def target(
    name: str,
    count: int = 1,
    flag: bool = False,
    mode: Mode = Mode.FAST,
    kind: Literal["a", "b"] = "a",
    points: List[Point] = (),  # type: ignore[assignment]
    pair: Tuple[int, str] = (0, ""),
    scores: Dict[str, float] = None,  # type: ignore[assignment]
    maybe: Optional[Point] = None,
) -> None: ...


@pytest.mark.parametrize("arguments,field,message", [
    ({}, "arguments.name", "is required"),
    ({"name": 3}, "arguments.name", "expected string, got integer"),
    ({"name": "n", "count": "3"}, "arguments.count", "expected integer, got string"),
    ({"name": "n", "count": 1.5}, "arguments.count", "expected integer, got number"),
    ({"name": "n", "count": True}, "arguments.count", "expected integer, got boolean"),
    ({"name": "n", "flag": 1}, "arguments.flag", "expected boolean, got integer"),
    ({"name": "n", "mode": "medium"}, "arguments.mode", 'expected one of "fast", "slow", got "medium"'),
    ({"name": "n", "kind": "c"}, "arguments.kind", 'expected one of "a", "b", got "c"'),
    ({"name": "n", "points": [{"x": 1}, {"x": "2"}]}, "arguments.points[1].x", "expected number, got string"),
    ({"name": "n", "points": [{"y": 1}]}, "arguments.points[0].x", "is required"),
    ({"name": "n", "points": [{"x": 1, "z": 0}]}, "arguments.points[0].z", "is not an accepted property (accepted: x, y)"),
    ({"name": "n", "pair": [1]}, "arguments.pair", "expected at least 2 items, got 1"),
    ({"name": "n", "pair": [1, "a", 2]}, "arguments.pair", "expected at most 2 items, got 3"),
    ({"name": "n", "pair": ["1", "a"]}, "arguments.pair[0]", "expected integer, got string"),
    ({"name": "n", "scores": {"a": 1, "b c": "x"}}, 'arguments.scores["b c"]', "expected number, got string"),
    ({"name": "n", "maybe": {"x": "no"}}, "arguments.maybe.x", "expected number, got string"),
    ({"name": "n", "maybe": 3}, "arguments.maybe", "expected object or null, got integer"),
    ({"name": "n", "extra": 1}, "arguments.extra", "is not an accepted property"),
])
def test_invalid_arguments_name_the_field(arguments, field, message):
    with pytest.raises(InvalidArguments) as err:
        get_tool(target).call(arguments)
    assert err.value.field == field
    assert message in err.value.reason, err.value.reason
    assert str(err.value) == f"invalid arguments for tool 'target': {field}: {err.value.reason}"


def test_valid_arguments_pass():
    res = get_tool(target).call({
        "name": "n", "count": 2.0, "mode": "slow", "points": [{"x": 1}], "pair": [1, "a"], "scores": {"a": 1},
        "maybe": None,
    })
    assert res["isError"] is False


def test_arguments_must_be_an_object():
    with pytest.raises(InvalidArguments, match="arguments: expected object, got array"):
        get_tool(target).call([1])


def test_pydantic_constraints_are_validated():
    pydantic = require_pydantic()

    class Order(pydantic.BaseModel):
        sku: str = pydantic.Field(pattern=r"^[A-Z]{3}$")
        qty: int = pydantic.Field(gt=0, le=10)

    @tool
    def buy(order: Order) -> None: ...

    t = get_tool(buy)
    for order, field, message in [
        ({"sku": "abc", "qty": 1}, "arguments.order.sku", "does not match the pattern"),
        ({"sku": "ABC", "qty": 0}, "arguments.order.qty", "expected a number > 0"),
        ({"sku": "ABC", "qty": 11}, "arguments.order.qty", "expected a number <= 10"),
    ]:
        with pytest.raises(InvalidArguments) as err:
            t.call({"order": order})
        assert err.value.field == field and message in err.value.reason


@pytest.mark.parametrize("schema,value,ok", [
    ({"type": "integer"}, 3.0, True),
    ({"type": "integer"}, True, False),
    ({"type": "number"}, 1, True),
    ({"const": 1}, True, False),
    ({"const": 1}, 1.0, True),
    ({"enum": [False]}, 0, False),
    ({"type": ["string", "null"]}, None, True),
    ({"type": "array", "uniqueItems": True}, [1, 1.0], False),
    ({"type": "array", "uniqueItems": True}, [1, True], True),
    ({"oneOf": [{"type": "integer"}, {"type": "number"}]}, 1, False),
    ({"oneOf": [{"type": "integer"}, {"type": "string"}]}, 1, True),
    ({"allOf": [{"minimum": 1}, {"maximum": 3}]}, 4, False),
    ({"not": {"type": "null"}}, None, False),
    ({"multipleOf": 0.1}, 0.3, True),
    ({"multipleOf": 2}, 3, False),
    ({"minLength": 2}, "é", False),
    ({"propertyNames": {"pattern": "^a"}}, {"b": 1}, False),
    ({"patternProperties": {"^x": {"type": "integer"}}, "additionalProperties": False}, {"x1": 1}, True),
    ({"patternProperties": {"^x": {"type": "integer"}}, "additionalProperties": False}, {"y": 1}, False),
    ({"$defs": {"n": {"type": "integer"}}, "$ref": "#/$defs/n"}, "x", False),
    (True, object(), True),
    (False, 1, False),
    ({"format": "email"}, "not an email", True),  # format is an annotation in 2020-12
])
def test_validator(schema, value, ok):
    if ok:
        validate(schema, value)
    else:
        with pytest.raises(SchemaError):
            validate(schema, value)


def test_deep_nesting_is_an_error_not_a_crash():
    value = []
    for _ in range(1000):
        value = [value]
    schema = {"$defs": {"a": {"type": "array", "items": {"$ref": "#/$defs/a"}}}, "$ref": "#/$defs/a"}
    with pytest.raises(SchemaError, match="nests too deeply"):
        validate(schema, value)
