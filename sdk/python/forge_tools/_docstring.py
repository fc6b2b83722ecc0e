"""Docstring parsing: a tool's description and its parameters' descriptions.

Three styles are understood, detected per docstring: Google ("Args:"), NumPy
("Parameters" underlined with dashes) and reST/Sphinx (":param x:"). Only
what a schema needs is extracted: the free text before the first section,
one description per parameter (or attribute, for classes) and the text of
the Returns section.
"""

from __future__ import annotations

import inspect
import re
from typing import Dict, List, Optional

__all__ = ["Docstring", "parse"]


class Docstring:
    """What a docstring says about a function or class."""

    __slots__ = ("description", "params", "returns", "style")

    def __init__(self, description: str = "", params: Optional[Dict[str, str]] = None, returns: str = "", style: str = "plain"):
        self.description = description
        self.params: Dict[str, str] = {} if params is None else params
        self.returns = returns
        self.style = style


_GOOGLE_PARAMS = {
    "args", "arguments", "parameters", "params", "keyword args", "keyword arguments",
    "other parameters", "attributes", "kwargs",
}
_GOOGLE_RETURNS = {"returns", "return", "yields", "yield"}
_GOOGLE_SECTIONS = _GOOGLE_PARAMS | _GOOGLE_RETURNS | {
    "raises", "raise", "except", "exceptions", "example", "examples", "note", "notes",
    "see also", "warning", "warnings", "warns", "todo", "references", "methods",
    "attention", "caution", "danger", "error", "hint", "important", "tip", "seealso",
}
_GOOGLE_HEADER = re.compile(r"^([A-Za-z][A-Za-z ]*):\s*$")
# "name (type): text", "name: text", "*args: text".
_GOOGLE_ITEM = re.compile(r"^\*{0,2}([A-Za-z_][A-Za-z0-9_]*)\s*(?:\([^)]*\))?\s*:\s*(.*)$")
_NUMPY_RULE = re.compile(r"^\s*-{3,}\s*$")
_NUMPY_ITEM = re.compile(r"^\*{0,2}([A-Za-z_][A-Za-z0-9_]*(?:\s*,\s*\*{0,2}[A-Za-z_][A-Za-z0-9_]*)*)\s*(?::.*)?$")
_REST_FIELD = re.compile(r"^:([A-Za-z_]+)((?:\s+[^:]+?)?)\s*:\s*(.*)$")
_REST_ANY = re.compile(r"^[ \t]*:[A-Za-z_]+(?:[ \t]+[^:\n]+?)?[ \t]*:", re.M)
_NUMPY_ANY = re.compile(r"^[ \t]*\S[^\n]*\n[ \t]*-{3,}[ \t]*$", re.M)
_GOOGLE_ANY = re.compile(r"^([A-Za-z][A-Za-z ]*):[ \t]*$", re.M)
_REST_PARAM_KINDS = {"param", "parameter", "arg", "argument", "key", "keyword", "ivar", "var", "cvar"}
_REST_RETURN_KINDS = {"return", "returns"}


def parse(doc: Optional[str]) -> Docstring:
    """Parses doc (None or empty gives an empty Docstring)."""
    if not doc or not doc.strip():
        return Docstring()
    text = inspect.cleandoc(doc)
    lines = text.splitlines()
    # One search over the text per style: decorating many tools must stay cheap.
    if _REST_ANY.search(text):
        return _parse_rest(lines)
    if _NUMPY_ANY.search(text):
        return _parse_numpy(lines)
    m = _GOOGLE_ANY.search(text)
    while m is not None:
        if m.group(1).lower() in _GOOGLE_SECTIONS:
            return _parse_google(lines)
        m = _GOOGLE_ANY.search(text, m.end())
    return Docstring(description=_join(lines), style="plain")


def _is_google_header(line: str) -> bool:
    m = _GOOGLE_HEADER.match(line.strip())
    return bool(m) and m.group(1).lower() in _GOOGLE_SECTIONS and not line[:1].isspace()


def _join(lines: List[str]) -> str:
    """Joins lines into text: lines of a paragraph with spaces, paragraphs with a blank line."""
    paragraphs: List[str] = []
    current: List[str] = []
    for ln in lines:
        if ln.strip():
            current.append(ln.strip())
        elif current:
            paragraphs.append(" ".join(current))
            current = []
    if current:
        paragraphs.append(" ".join(current))
    return "\n\n".join(paragraphs)


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _parse_google(lines: List[str]) -> Docstring:
    out = Docstring(style="google")
    i = 0
    while i < len(lines) and not _is_google_header(lines[i]):
        i += 1
    out.description = _join(lines[:i])
    while i < len(lines):
        name = _GOOGLE_HEADER.match(lines[i].strip()).group(1).lower()  # type: ignore[union-attr]
        i += 1
        body: List[str] = []
        while i < len(lines) and not _is_google_header(lines[i]):
            body.append(lines[i])
            i += 1
        if name in _GOOGLE_PARAMS:
            _google_items(body, out.params)
        elif name in _GOOGLE_RETURNS and not out.returns:
            text = _join(body)
            # "str: the thing" names the type first; keep the text.
            m = re.match(r"^[\w\[\], .|]+:\s+(.*)$", text, re.S)
            out.returns = m.group(1) if m else text
    return out


def _google_items(body: List[str], params: Dict[str, str]) -> None:
    base = min((_indent(ln) for ln in body if ln.strip()), default=0)
    name = None
    text: List[str] = []
    for ln in body + [""]:
        m = _GOOGLE_ITEM.match(ln.strip()) if ln.strip() and _indent(ln) == base else None
        if m:
            if name:
                params.setdefault(name, _join(text))
            name, text = m.group(1), [m.group(2)]
        elif name and ln.strip():
            text.append(ln)
    if name:
        params.setdefault(name, _join(text))


def _parse_numpy(lines: List[str]) -> Docstring:
    out = Docstring(style="numpy")
    sections: List[tuple] = []  # (name, start of body)
    for i in range(len(lines) - 1):
        if lines[i].strip() and _NUMPY_RULE.match(lines[i + 1]):
            sections.append((lines[i].strip().lower(), i))
    out.description = _join(lines[: sections[0][1]])
    for k, (name, start) in enumerate(sections):
        end = sections[k + 1][1] if k + 1 < len(sections) else len(lines)
        body = lines[start + 2 : end]
        if name in ("parameters", "other parameters", "attributes", "keyword arguments"):
            _numpy_items(body, out.params)
        elif name in ("returns", "yields") and not out.returns:
            items: Dict[str, str] = {}
            _numpy_items(body, items)
            texts = [t for t in items.values() if t]
            out.returns = texts[0] if len(texts) == 1 else _join(body)
    return out


def _numpy_items(body: List[str], params: Dict[str, str]) -> None:
    base = min((_indent(ln) for ln in body if ln.strip()), default=0)
    names: List[str] = []
    text: List[str] = []

    def flush() -> None:
        for n in names:
            params.setdefault(n, _join(text))

    for ln in body:
        if ln.strip() and _indent(ln) == base:
            flush()
            m = _NUMPY_ITEM.match(ln.strip())
            head = m.group(1) if m else ln.strip()
            names = [n.strip().lstrip("*") for n in head.split(",")]
            text = []
        elif names:
            text.append(ln)
    flush()


def _parse_rest(lines: List[str]) -> Docstring:
    out = Docstring(style="rest")
    first = next(i for i, ln in enumerate(lines) if _REST_FIELD.match(ln.strip()))
    out.description = _join(lines[:first])
    fields: List[tuple] = []  # (kind, arg, text lines)
    for ln in lines[first:]:
        m = _REST_FIELD.match(ln.strip())
        if m and not ln[:1].isspace():
            fields.append((m.group(1).lower(), m.group(2).strip(), [m.group(3)]))
        elif fields:
            fields[-1][2].append(ln)
    for kind, arg, text in fields:
        if kind in _REST_PARAM_KINDS and arg:
            # ":param int count:" puts the type before the name.
            params_name = arg.split()[-1].lstrip("*")
            out.params.setdefault(params_name, _join(text))
        elif kind in _REST_RETURN_KINDS and not out.returns:
            out.returns = _join(text)
    return out
