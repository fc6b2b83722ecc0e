"""The package builds a wheel (setuptools, fetched by pip's build isolation) with no runtime
dependencies, and the installed wheel works on its own."""

import email
import os
import shutil
import subprocess
import sys
import zipfile

from conftest import ROOT


def test_wheel(tmp_path):
    src = tmp_path / "src"  # a copy: pip builds in the tree and leaves build/ and *.egg-info there
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info", ".pytest_cache"))
    out = tmp_path / "dist"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "--disable-pip-version-check", "-w", str(out), str(src)],
        check=True, cwd=tmp_path,
    )
    (wheel,) = out.glob("forge_tools-*.whl")
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        meta = email.message_from_bytes(z.read(next(n for n in names if n.endswith(".dist-info/METADATA"))))
    assert {"forge_tools/__init__.py", "forge_tools/__main__.py", "forge_tools/_server.py", "forge_tools/py.typed"} <= names
    assert not any(n.startswith(("tests/", "examples/")) for n in names)
    assert meta["Requires-Python"] == ">=3.9"
    runtime = [r for r in meta.get_all("Requires-Dist") or [] if "extra ==" not in r]
    assert runtime == [], runtime
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--quiet", "--disable-pip-version-check", "--target", str(target), str(wheel)],
        check=True,
    )
    env = dict(os.environ, PYTHONPATH=str(target))
    res = subprocess.run(
        [sys.executable, "-c", "import forge_tools, sys; sys.stdout.write(forge_tools.__file__)"],
        env=env, cwd=tmp_path, check=True, capture_output=True, text=True,
    )
    assert res.stdout.startswith(str(target))
