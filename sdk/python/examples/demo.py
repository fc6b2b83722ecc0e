"""Example tools for forge_tools; the client suites serve this file.

    PYTHONPATH=sdk/python python3 -m forge_tools serve sdk/python/examples/demo.py
"""

import asyncio
import enum
import statistics
from dataclasses import dataclass
from typing import Annotated, List, Literal, Optional, Tuple, TypedDict

from forge_tools import tool


class Color(enum.Enum):
    """A primary colour."""

    RED = "red"
    GREEN = "green"
    BLUE = "blue"


@dataclass
class Point:
    """A point in the plane.

    Attributes:
        x: Distance from the y axis.
        y: Distance from the x axis.
    """

    x: float
    y: float = 0.0


class Stats(TypedDict, total=False):
    count: int
    mean: float
    maximum: Optional[float]


@tool
def add(a: int, b: int = 1) -> int:
    """Adds two integers.

    Args:
        a: The first addend.
        b: The second addend.

    Returns:
        The sum.
    """
    return a + b


@tool(name="greet", description="Greets someone by name.")
def hello(name: Annotated[str, "Who to greet."], style: Literal["plain", "shout"] = "plain") -> str:
    text = f"Hello, {name}!"
    return text.upper() if style == "shout" else text


@tool
def summarize(values: List[float]) -> Stats:
    """Summarizes numbers.

    Parameters
    ----------
    values : list of float
        The numbers to summarize.
    """
    if not values:
        return {"count": 0, "maximum": None}
    return {"count": len(values), "mean": statistics.fmean(values), "maximum": max(values)}


@tool
def move(p: Point, by: Tuple[float, float] = (1.0, 1.0)) -> Point:
    """Moves a point.

    :param p: The point to move.
    :param by: The offset, as (dx, dy).
    """
    return Point(p.x + by[0], p.y + by[1])


@tool
def mix(colors: List[Color]) -> Color:
    """Picks the first colour of a list (a stand-in for mixing)."""
    return colors[0]


@tool
def divide(a: float, b: float) -> float:
    """Divides a by b; raises ZeroDivisionError when b is 0."""
    return a / b


@tool(timeout=0.5)
async def wait(seconds: float) -> str:
    """Sleeps, asynchronously, for some seconds (at most 0.5 before it times out)."""
    await asyncio.sleep(seconds)
    return f"waited {seconds} s"


@tool
def chatty() -> str:
    """Prints to stdout, which the server keeps off the protocol stream."""
    print("this line goes to stderr, not to the JSON-RPC stream")
    return "ok"
