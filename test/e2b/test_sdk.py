"""The official E2B Python SDKs (e2b, e2b-code-interpreter; pinned in requirements.txt) against
forge's E2B face, as a program written for E2B would use them: nothing here knows it talks to
forge but the environment scripts/test-e2b.sh sets (conftest.py). Each test is quick and makes
its own sandboxes, so they run in any order.
"""

import base64
import os
import threading
import time
import uuid

import pytest
from e2b import (
    AuthenticationException,
    CommandExitException,
    NotFoundException,
    SandboxException,
    SandboxQuery,
    TimeoutException,
)
from e2b_code_interpreter import AsyncSandbox, Sandbox

from conftest import LIFETIME

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def wait_for(pred, timeout, what):
    """Polls pred until it is true, failing with what after timeout seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.2)
    pytest.fail(f"{what}: not within {timeout} s")


# ---------------------------------------------------------------- the code interpreter


def test_run_code_is_stateful(sandbox):
    assert sandbox.run_code("x = 1").error is None
    sandbox.run_code("x += 1")
    execution = sandbox.run_code("x")
    assert execution.error is None
    assert execution.text == "2"
    # The main result's text is the value's repr, a str's without its quotes (as Jupyter's).
    assert sandbox.run_code("'forge'").text == "forge"
    assert sandbox.run_code("{'a': 1}").text == "{'a': 1}"


def test_run_code_output_and_cwd(sandbox):
    execution = sandbox.run_code("import os, sys\nprint('hello')\nprint('oops', file=sys.stderr)\nos.environ['HOME']")
    assert execution.error is None
    assert "".join(execution.logs.stdout) == "hello\n"
    assert "".join(execution.logs.stderr) == "oops\n"
    assert execution.text == "/home/user"
    # Relative paths land in /home/user, the session's workspace.
    sandbox.run_code("open('rel.txt', 'w').write('here')")
    assert sandbox.files.read("/home/user/rel.txt") == "here"


def test_run_code_envs(sandbox):
    execution = sandbox.run_code("import os; os.environ.get('FORGE_TEST_E2B_VAR')", envs={"FORGE_TEST_E2B_VAR": "v1"})
    assert execution.text == "v1"


def test_run_code_errors(sandbox):
    execution = sandbox.run_code("1 / 0")
    assert execution.error is not None
    assert execution.error.name == "ZeroDivisionError"
    assert "division by zero" in execution.error.value
    assert "ZeroDivisionError" in execution.error.traceback
    assert execution.results == []

    execution = sandbox.run_code("print('before')\nundefined_name")
    assert execution.error.name == "NameError"
    assert "undefined_name" in execution.error.value
    assert "".join(execution.logs.stdout) == "before\n"

    execution = sandbox.run_code("def f(:\n  pass")
    assert execution.error.name == "SyntaxError"
    # The session goes on after an error.
    assert sandbox.run_code("1 + 1").text == "2"


def test_run_code_streams(sandbox):
    """on_stdout/on_stderr/on_result are called, and output arrives as it is printed."""
    got = {"stdout": [], "stderr": [], "result": [], "error": []}
    first_at = []

    def on_stdout(msg):
        if not first_at:
            first_at.append(time.monotonic())
        got["stdout"].append(msg.line)

    code = (
        "import sys, time\n"
        "print('first', flush=True)\n"
        "print('warn', file=sys.stderr, flush=True)\n"
        "time.sleep(1.5)\n"
        "print('second')\n"
        "41 + 1\n"
    )
    execution = sandbox.run_code(
        code,
        on_stdout=on_stdout,
        on_stderr=lambda msg: got["stderr"].append(msg.line),
        on_result=lambda result: got["result"].append(result),
        on_error=lambda err: got["error"].append(err),
    )
    done = time.monotonic()
    assert execution.error is None
    assert "".join(got["stdout"]) == "first\nsecond\n"
    assert "".join(got["stderr"]) == "warn\n"
    assert [r.text for r in got["result"]] == ["42"]
    assert got["error"] == []
    assert done - first_at[0] > 1.0, "the first line came only at the end: not streamed"

    sandbox.run_code("1/0", on_error=lambda err: got["error"].append(err))
    assert [e.name for e in got["error"]] == ["ZeroDivisionError"]


def test_matplotlib_png(sandbox):
    """The default template (code-interpreter-v1) is forge's data image: matplotlib is there."""
    execution = sandbox.run_code(
        "import matplotlib.pyplot as plt\n"
        "plt.plot([1, 2, 3], [1, 4, 9])\n"
        "plt.title('forge')\n"
        "plt.show()\n"
    )
    assert execution.error is None
    assert len(execution.results) >= 1
    result = execution.results[0]
    assert "png" in list(result.formats())
    assert base64.b64decode(result.png).startswith(PNG_MAGIC)
    # The figure's repr comes beside its image, as from E2B's Jupyter.
    assert result.text.startswith("<Figure size "), result.text


def test_rich_results(sandbox):
    """text, html, svg and json results from the objects' _repr_*_ methods (as in Jupyter)."""
    svg = '<svg xmlns="http://www.w3.org/2000/svg" width="4" height="4"><rect width="4" height="4"/></svg>'
    sandbox.run_code(
        "class Rich:\n"
        "    def _repr_html_(self): return '<b>bold</b>'\n"
        f"    def _repr_svg_(self): return {svg!r}\n"
        "    def _repr_json_(self): return {'k': [1, 2]}\n"
        "    def __repr__(self): return 'Rich()'\n"
    )
    execution = sandbox.run_code("Rich()")
    assert execution.error is None
    main = [r for r in execution.results if r.is_main_result]
    assert len(main) == 1
    result = main[0]
    assert result.html == "<b>bold</b>"
    assert result.svg == svg
    assert result.json == {"k": [1, 2]}
    assert result.text == "Rich()"
    assert {"html", "svg", "json", "text"} <= set(result.formats())

    # display() shows an object without being the cell's value.
    execution = sandbox.run_code("display(Rich())\nNone")
    assert execution.error is None
    assert [r.is_main_result for r in execution.results] == [False]
    assert execution.results[0].html == "<b>bold</b>"


def test_run_code_timeout(sandbox):
    start = time.monotonic()
    with pytest.raises(TimeoutException):
        sandbox.run_code("import time\ntime.sleep(60)", timeout=2)
    assert time.monotonic() - start < 10
    # The abandoned run is interrupted: the sandbox answers again soon.
    execution = sandbox.run_code("'alive'", timeout=30)
    assert execution.text == "alive"


# ---------------------------------------------------------------- files


def test_files_write_read_list(sandbox):
    info = sandbox.files.write("/home/user/a.txt", "hello forge")
    assert info.path == "/home/user/a.txt"
    assert info.name == "a.txt"
    sandbox.files.write("b.bin", b"\x00\x01\xff")  # relative: under /home/user
    assert sandbox.files.read("/home/user/a.txt") == "hello forge"
    assert bytes(sandbox.files.read("/home/user/b.bin", format="bytes")) == b"\x00\x01\xff"
    names = {e.name: e for e in sandbox.files.list("/home/user")}
    assert {"a.txt", "b.bin"} <= set(names)
    assert names["a.txt"].path == "/home/user/a.txt"
    assert names["a.txt"].size == len("hello forge")
    # The code sees what the file API wrote, and the file API what the code wrote.
    assert sandbox.run_code("open('/home/user/a.txt').read()").text == "hello forge"
    sandbox.run_code("open('/home/user/c.txt', 'w').write('from code')")
    assert sandbox.files.read("/home/user/c.txt") == "from code"


def test_filesystem_operations(sandbox):
    assert sandbox.files.make_dir("/home/user/d/e")
    assert not sandbox.files.make_dir("/home/user/d/e")  # exists already
    sandbox.files.write("/home/user/d/e/f.txt", "x")
    assert sandbox.files.exists("/home/user/d/e/f.txt")
    assert not sandbox.files.exists("/home/user/nope.txt")
    info = sandbox.files.get_info("/home/user/d/e/f.txt")
    assert info.name == "f.txt" and info.size == 1
    moved = sandbox.files.rename("/home/user/d/e/f.txt", "/home/user/d/g.txt")
    assert moved.path == "/home/user/d/g.txt"
    assert sandbox.files.read("/home/user/d/g.txt") == "x"
    sandbox.files.remove("/home/user/d/g.txt")
    assert not sandbox.files.exists("/home/user/d/g.txt")
    with pytest.raises(NotFoundException):
        sandbox.files.read("/home/user/d/g.txt")


# ---------------------------------------------------------------- commands


def test_commands_run(sandbox):
    result = sandbox.commands.run("echo out; echo err >&2; pwd")
    assert result.exit_code == 0
    assert result.stdout == "out\n/home/user\n"
    assert result.stderr == "err\n"
    # Commands and code share /home/user.
    sandbox.commands.run("echo from-bash > shared.txt")
    assert sandbox.run_code("open('shared.txt').read()").text == "from-bash\n"
    result = sandbox.commands.run("echo $FORGE_TEST_E2B_VAR", envs={"FORGE_TEST_E2B_VAR": "cmd"})
    assert result.stdout == "cmd\n"


def test_commands_exit_code(sandbox):
    with pytest.raises(CommandExitException) as info:
        sandbox.commands.run("echo partial; echo bad >&2; exit 3")
    assert info.value.exit_code == 3
    assert info.value.stdout == "partial\n"
    assert info.value.stderr == "bad\n"
    with pytest.raises(CommandExitException) as info:
        sandbox.commands.run("no-such-command-forge")
    assert info.value.exit_code == 127


def test_commands_stream(sandbox):
    lines = []
    first_at = []

    def on_stdout(data):
        if not first_at:
            first_at.append(time.monotonic())
        lines.append(data)

    result = sandbox.commands.run("echo one; sleep 1.5; echo two", on_stdout=on_stdout)
    done = time.monotonic()
    assert result.exit_code == 0
    assert "".join(lines) == "one\ntwo\n"
    assert done - first_at[0] > 1.0, "the first line came only at the end: not streamed"


def test_code_contexts(sandbox):
    sandbox.run_code("x = 'default'")
    a = sandbox.create_code_context()
    sandbox.files.make_dir("sub")
    b = sandbox.create_code_context(cwd="/home/user/sub")
    assert [c.id for c in sandbox.list_code_contexts()][-2:] == [a.id, b.id]
    assert sandbox.run_code("x = 'a'", context=a).error is None
    # Each context has its own variables ...
    assert sandbox.run_code("x", context=b).error.name == "NameError"
    assert sandbox.run_code("x", context=a).text == "a"
    assert sandbox.run_code("x").text == "default"
    assert sandbox.run_code("import os; os.getcwd()", context=b).text.endswith("/sub")
    # ... and the sandbox's files are the same for all.
    sandbox.run_code("open('/home/user/ctx.txt', 'w').write('from a')", context=a)
    assert sandbox.run_code("open('/home/user/ctx.txt').read()").text == "from a"
    sandbox.restart_code_context(a)
    assert sandbox.run_code("x", context=a).error.name == "NameError"
    assert sandbox.run_code("x").text == "default"
    sandbox.remove_code_context(b.id)
    assert b.id not in [c.id for c in sandbox.list_code_contexts()]
    with pytest.raises(Exception, match="not found"):
        sandbox.run_code("1", context=b)


def test_commands_stdin(sandbox):
    handle = sandbox.commands.run("cat; echo end", background=True, stdin=True)
    sandbox.commands.send_stdin(handle.pid, "hello\n")
    sandbox.commands.send_stdin(handle.pid, b"bytes\x00\xff\n")
    sandbox.commands.close_stdin(handle.pid)
    result = handle.wait()
    assert result.exit_code == 0
    assert result.stdout == "hello\nbytes\x00\ufffd\nend\n"
    # Input is bounded; the error names the limit.
    handle = sandbox.commands.run("sleep 30", background=True, stdin=True)
    with pytest.raises(SandboxException, match="262144 bytes"):
        sandbox.commands.send_stdin(handle.pid, b"x" * (256 * 1024 + 1))
    # A command started without stdin takes none.
    plain = sandbox.commands.run("sleep 30", background=True)
    with pytest.raises(SandboxException, match="stdin=True"):
        sandbox.commands.send_stdin(plain.pid, "x")
    assert handle.kill() is True
    assert plain.kill() is True


def test_commands_kill_signal(sandbox):
    handle = sandbox.commands.run("echo started; sleep 30", background=True)
    assert next(iter(handle))[0] == "started\n"  # (stdout, stderr, pty)
    assert sandbox.commands.kill(handle.pid) is True
    with pytest.raises(CommandExitException) as info:
        handle.wait()
    assert info.value.exit_code == -1
    assert sandbox.commands.kill(handle.pid) is False  # gone already
    # A command no stream follows any more is signalled just the same.
    detached = sandbox.commands.run("sleep 1; echo alive > alive.txt; sleep 30", background=True)
    detached.disconnect()
    wait_for(lambda: sandbox.files.exists("alive.txt"), 15, "the detached command running on")
    assert [p.pid for p in sandbox.commands.list()] == [detached.pid]
    assert sandbox.commands.kill(detached.pid) is True
    wait_for(lambda: sandbox.commands.list() == [], 15, "the killed command leaving the list")


def test_command_does_not_block_run_code(sandbox):
    handle = sandbox.commands.run("sleep 20; echo late", background=True)
    start = time.monotonic()
    assert sandbox.run_code("1 + 1").text == "2"
    assert sandbox.commands.run("echo beside").stdout == "beside\n"
    sandbox.files.write("while.txt", "written")
    assert time.monotonic() - start < 5, "run_code, commands and files waited for the running command"
    assert [p.pid for p in sandbox.commands.list()] == [handle.pid]
    handle.kill()


def test_command_survives_disconnect_and_connect(sandbox):
    handle = sandbox.commands.run("for i in 1 2 3 4 5 6; do echo tick $i; sleep 0.3; done", background=True)
    assert next(iter(handle))[0] == "tick 1\n"
    handle.disconnect()  # the SDK leaves: the command goes on
    again = sandbox.commands.connect(handle.pid)
    result = again.wait()
    assert result.exit_code == 0
    assert result.stdout.endswith("tick 6\n")
    assert sandbox.commands.list() == []


# ---------------------------------------------------------------- the control plane


def test_two_sandboxes_keep_separate_state():
    a = Sandbox.create(timeout=LIFETIME)
    b = Sandbox.create(timeout=LIFETIME)
    try:
        assert a.sandbox_id != b.sandbox_id
        a.run_code("x = 'a'")
        b.run_code("x = 'b'")
        a.files.write("/home/user/who.txt", "a")
        assert a.run_code("x").text == "a"
        assert b.run_code("x").text == "b"
        assert not b.files.exists("/home/user/who.txt")
        # Both at once.
        results = {}
        threads = [
            threading.Thread(target=lambda s=s, k=k: results.__setitem__(k, s.run_code("import time; time.sleep(0.5); x").text))
            for k, s in (("a", a), ("b", b))
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert results == {"a": "a", "b": "b"}
    finally:
        a.kill()
        b.kill()


def test_connect_sees_the_same_sandbox(sandbox):
    sandbox.run_code("kept = 7")
    again = Sandbox.connect(sandbox.sandbox_id)
    assert again.sandbox_id == sandbox.sandbox_id
    assert again.run_code("kept * 6").text == "42"


def test_kill_list_and_info():
    tag = uuid.uuid4().hex
    made = [Sandbox.create(timeout=LIFETIME, metadata={"suite": tag, "n": str(i)}) for i in range(3)]
    try:
        info = made[0].get_info()
        assert info.sandbox_id == made[0].sandbox_id
        assert info.metadata == {"suite": tag, "n": "0"}
        assert info.state.value == "running"
        assert info.end_at > info.started_at

        # Paging: two, then one.
        pager = Sandbox.list(query=SandboxQuery(metadata={"suite": tag}), limit=2)
        first = pager.next_items()
        assert len(first) == 2
        assert pager.has_next
        second = pager.next_items()
        assert len(second) == 1
        assert not pager.has_next
        assert {s.sandbox_id for s in first + second} == {s.sandbox_id for s in made}

        assert Sandbox.kill(made[0].sandbox_id) is True
        assert Sandbox.kill(made[0].sandbox_id) is False  # gone already
        assert not made[0].is_running()
        listed = Sandbox.list(query=SandboxQuery(metadata={"suite": tag})).next_items()
        assert {s.sandbox_id for s in listed} == {s.sandbox_id for s in made[1:]}
        with pytest.raises(NotFoundException):
            Sandbox.connect(made[0].sandbox_id)
    finally:
        for s in made:
            s.kill()


def test_set_timeout_and_metrics(sandbox):
    before = sandbox.get_info().end_at
    sandbox.set_timeout(LIFETIME + 60)
    assert sandbox.get_info().end_at > before
    assert isinstance(sandbox.get_metrics(), list)


def test_sandbox_timeout_reaper():
    sbx = Sandbox.create(timeout=3)
    try:
        assert sbx.is_running()
        assert sbx.run_code("1").text == "1"
        wait_for(lambda: not sbx.is_running(), 15, "a sandbox of timeout=3 still running")
        with pytest.raises(NotFoundException):
            Sandbox.connect(sbx.sandbox_id)
    finally:
        sbx.kill()


def test_pause_and_resume(sandbox):
    sandbox.run_code("kept = 'across pause'")
    sandbox.files.write("/home/user/p.txt", "file kept")
    assert sandbox.pause() is True
    assert Sandbox.get_info(sandbox.sandbox_id).state.value == "paused"
    resumed = Sandbox.connect(sandbox.sandbox_id)
    assert resumed.get_info().state.value == "running"
    assert resumed.files.read("/home/user/p.txt") == "file kept"
    assert resumed.run_code("kept").text == "across pause"


# ---------------------------------------------------------------- tenants


def test_tenant_isolation(sandbox, key_b):
    sandbox.run_code("secret = 'tenant a'")
    sid = sandbox.sandbox_id
    with pytest.raises(NotFoundException):
        Sandbox.connect(sid, api_key=key_b)
    with pytest.raises(NotFoundException):
        Sandbox.get_info(sid, api_key=key_b)
    listed = Sandbox.list(api_key=key_b).next_items()
    assert sid not in {s.sandbox_id for s in listed}
    assert Sandbox.kill(sid, api_key=key_b) is False
    # Tenant A's sandbox is untouched.
    assert sandbox.is_running()
    assert sandbox.run_code("secret").text == "tenant a"
    # And tenant B's own sandboxes are B's.
    b = Sandbox.create(timeout=LIFETIME, api_key=key_b)
    try:
        assert b.run_code("'secret' in globals()").text == "False"
        assert sid not in {s.sandbox_id for s in Sandbox.list(api_key=key_b).next_items()}
        assert b.sandbox_id not in {s.sandbox_id for s in Sandbox.list().next_items()}
    finally:
        b.kill()


# ---------------------------------------------------------------- bad input


def test_unknown_sandbox():
    with pytest.raises(NotFoundException):
        Sandbox.connect("0123456789abcdef0123456789abcdef")
    with pytest.raises(NotFoundException):
        Sandbox.get_info("no-such-sandbox")
    assert Sandbox.kill("0123456789abcdef0123456789abcdef") is False


def test_wrong_key():
    with pytest.raises(AuthenticationException):
        Sandbox.create(api_key="forge_not_a_token", timeout=LIFETIME)
    with pytest.raises(AuthenticationException):
        Sandbox.list(api_key="forge_not_a_token").next_items()


def test_unknown_template():
    with pytest.raises(SandboxException) as info:
        Sandbox.create(template="forge-no-such-template", timeout=LIFETIME)
    assert "forge-no-such-template" in str(info.value)
    assert "forge env build" in str(info.value)


def test_path_outside_home_user(sandbox):
    for path in ("/etc/forge-e2b.txt", "/home/user/../../etc/forge-e2b.txt", "/tmp/x.txt"):
        with pytest.raises(SandboxException) as info:
            sandbox.files.write(path, "x")
        assert "/home/user" in str(info.value), path
    with pytest.raises(SandboxException) as info:
        sandbox.files.read("/etc/passwd")
    assert "/home/user" in str(info.value)


def test_oversized_upload(sandbox, max_file_size):
    with pytest.raises(SandboxException):
        sandbox.files.write("/home/user/big.bin", b"\0" * (max_file_size + 1))
    assert not sandbox.files.exists("/home/user/big.bin")
    # One at the limit goes in.
    sandbox.files.write("/home/user/ok.bin", b"\1" * max_file_size)
    assert sandbox.files.get_info("/home/user/ok.bin").size == max_file_size


def test_upload_over_the_body_cap(sandbox):
    # Past the server's cap on request bodies (not only volumes.max_file_size): E2B's error
    # shape still, so the SDK's exception carries forge's message, not a problem+json document.
    with pytest.raises(SandboxException) as info:
        sandbox.files.write("/home/user/huge.bin", b"\0" * (8 << 20))
    assert str(info.value).startswith("413: the request body is over"), str(info.value)[:300]


# ---------------------------------------------------------------- refused: what cannot map


def test_internet_access_refused():
    with pytest.raises(SandboxException) as info:
        Sandbox.create(allow_internet_access=True, timeout=LIFETIME)
    assert "egress" in str(info.value)
    # False is what forge gives anyway: accepted.
    sbx = Sandbox.create(allow_internet_access=False, timeout=LIFETIME)
    sbx.kill()


def test_root_refused(sandbox):
    with pytest.raises((SandboxException, AuthenticationException)) as info:
        sandbox.commands.run("id -u", user="root")
    assert "root" in str(info.value).lower()


def test_get_host_does_not_pretend(sandbox):
    """get_host is computed by the SDK alone (no request): forge cannot route a sandbox's ports,
    so whatever the SDK computes must not name forge's own listener as if it did."""
    try:
        host = sandbox.get_host(8080)
    except SandboxException:
        return
    listener = os.environ["E2B_SANDBOX_URL"].split("://", 1)[1].rstrip("/")
    assert host != listener and not host.startswith(listener)


# ---------------------------------------------------------------- the async SDK


async def test_async_sdk(async_sandbox):
    sbx = async_sandbox
    await sbx.run_code("y = 20")
    execution = await sbx.run_code("y + 1")
    assert execution.text == "21"
    execution = await sbx.run_code("raise ValueError('async bad')")
    assert execution.error.name == "ValueError"
    assert execution.error.value == "async bad"

    out = []
    await sbx.run_code("print('streamed')", on_stdout=lambda m: out.append(m.line))
    assert out == ["streamed\n"]

    await sbx.files.write("/home/user/async.txt", "async data")
    assert await sbx.files.read("/home/user/async.txt") == "async data"
    assert "async.txt" in {e.name for e in await sbx.files.list("/home/user")}

    result = await sbx.commands.run("cat async.txt")
    assert result.stdout == "async data"
    with pytest.raises(CommandExitException) as info:
        await sbx.commands.run("exit 5")
    assert info.value.exit_code == 5

    assert await sbx.is_running()


async def test_async_two_sandboxes_and_kill(key_b):
    import asyncio

    a, b = await asyncio.gather(AsyncSandbox.create(timeout=LIFETIME), AsyncSandbox.create(timeout=LIFETIME))
    try:
        await asyncio.gather(a.run_code("v = 1"), b.run_code("v = 2"))
        ra, rb = await asyncio.gather(a.run_code("v"), b.run_code("v"))
        assert (ra.text, rb.text) == ("1", "2")
        with pytest.raises(NotFoundException):
            await AsyncSandbox.connect(a.sandbox_id, api_key=key_b)
        assert await AsyncSandbox.kill(a.sandbox_id) is True
        assert not await a.is_running()
        assert await b.is_running()
    finally:
        await a.kill()
        await b.kill()
