# Run by save_tool inside a session's sandbox, in a private namespace: finds the
# source of the function f (inspect.getsource, or, for a function defined in an
# earlier cell, among the cells the agent kept) and leaves it in `out`.
import ast
import inspect

if not inspect.isfunction(f):
    raise TypeError("%s is a %s, not a function defined with def" % (name, type(f).__name__))
code = f.__code__
if code.co_freevars:
    raise ValueError("%s uses variables of an enclosing function (%s); define it at the top level" % (name, ", ".join(code.co_freevars)))


def consts(c):
    yield c
    for k in c.co_consts:
        if inspect.iscode(k):
            yield from consts(k)


out = None
if code.co_filename != "<cell>":
    out = inspect.getsource(f)
else:
    for cell in reversed(cells):
        try:
            tree = ast.parse(cell)
            compiled = compile(cell, "<cell>", "exec")
        except (SyntaxError, ValueError):
            continue
        same = [k for k in consts(compiled) if k.co_name == code.co_name and k.co_firstlineno == code.co_firstlineno and k.co_code == code.co_code]
        if not same:
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == code.co_name:
                first = min([node.lineno] + [d.lineno for d in node.decorator_list])
                if first == code.co_firstlineno and node.col_offset == 0:
                    if node.decorator_list:
                        raise ValueError("%s is decorated; save_tool takes a plain function (forge adds @tool)" % name)
                    out = ast.get_source_segment(cell, node)
                    break
        if out is not None:
            break
if out is None:
    raise LookupError("the source of %s is not available (was it defined before the session was restored?); define it again and retry" % name)
