"""The k8s-agent-sandbox client 1.0.8, unchanged, against forge's
agent-sandbox face (server/agentsandbox): commands, files, limits, isolation."""
import pytest
from k8s_agent_sandbox.exceptions import SandboxRequestError

from conftest import MAX_FILE, open_sandbox


def test_run_command(sandbox):
    r = sandbox.commands.run("echo 'Hello World'")
    assert (r.stdout, r.exit_code, r.timed_out) == ("Hello World\n", 0, False)


def test_python_and_exit_codes(sandbox):
    r = sandbox.commands.run("python3 -c 'import sys; print(6*7); sys.exit(3)'")
    assert (r.stdout, r.exit_code) == ("42\n", 3)
    r = sandbox.commands.run("python3 -c 'import sys; sys.stderr.write(\"oops\")'")
    assert (r.stderr, r.exit_code) == ("oops", 0)


def test_missing_executable_is_a_failed_command(sandbox):
    r = sandbox.commands.run("no-such-program --flag")
    assert r.exit_code == 1 and "Failed to execute command" in r.stderr, r


def test_files_round_trip_and_later_commands_see_them(sandbox):
    sandbox.files.write("data/in.txt", "line one\nline two\n")
    blob = bytes(range(256)) * 64
    sandbox.files.write("/data/blob.bin", blob)  # a leading slash is relative too
    r = sandbox.commands.run("wc -l data/in.txt")
    assert r.stdout.split()[0] == "2", r
    assert sandbox.files.read("data/blob.bin") == blob
    assert sandbox.files.exists("data/in.txt") and not sandbox.files.exists("data/nope")
    sandbox.commands.run("python3 -c \"open('data/out.csv','w').write('a,b\\n1,2\\n')\"")
    assert sandbox.files.read("data/out.csv") == b"a,b\n1,2\n"
    entries = {e.name: e for e in sandbox.files.list("data")}
    assert set(entries) == {"in.txt", "blob.bin", "out.csv"}
    assert entries["blob.bin"].size == len(blob) and entries["blob.bin"].type == "file"
    top = {e.name: e.type for e in sandbox.files.list("")}
    assert top.get("data") == "directory"


def test_read_missing_file_is_404(sandbox):
    with pytest.raises(SandboxRequestError) as e:
        sandbox.files.read("nothing-here.txt")
    assert e.value.status_code == 404


def test_paths_cannot_leave_the_workspace(sandbox):
    with pytest.raises(SandboxRequestError) as e:
        sandbox.files.read("../etc/passwd", allow_unsafe_paths=True)
    assert e.value.status_code == 403
    with pytest.raises(SandboxRequestError) as e:
        sandbox.files.write("../escape.txt", b"x", allow_unsafe_paths=True)
    assert e.value.status_code == 403
    # A symlink made by a command, pointing out of the workspace.
    assert sandbox.commands.run("ln -s /etc out").exit_code == 0
    for call in (lambda: sandbox.files.read("out/passwd"), lambda: sandbox.files.list("out"),
                 lambda: sandbox.files.write("out/x", b"x")):
        with pytest.raises(SandboxRequestError) as e:
            call()
        assert e.value.status_code == 403


def test_command_timeout(sandbox):
    r = sandbox.commands.run("sleep 30", command_timeout=1)
    assert r.timed_out and r.exit_code == 124, r
    # The session survives: the next command runs.
    assert sandbox.commands.run("echo still-here").stdout == "still-here\n"


PROBE = """
import os
print(os.getuid())
print(sorted(os.listdir("/sys/class/net")))
print([open("/proc/%s/cmdline" % p, "rb").read().split(b"\\0")[0].decode() for p in os.listdir("/proc") if p.isdigit()])
"""


def test_commands_run_inside_a_forge_sandbox(sandbox):
    # Not root, no network but loopback, and forge (which holds the API and
    # the token) is not among the processes it can see.
    sandbox.files.write("probe.py", PROBE)
    r = sandbox.commands.run("python3 probe.py")
    assert r.exit_code == 0, r
    uid, nets, procs = r.stdout.splitlines()
    assert uid != "0" and nets == "['lo']", r.stdout
    assert "python3" in procs and "forge" not in procs.replace("/opt/forge/agent/", ""), procs
    r = sandbox.commands.run("touch /usr/evil")
    assert r.exit_code != 0 and "Read-only" in r.stderr, r


def test_sandboxes_are_separate_sessions():
    a, b = open_sandbox(), open_sandbox()
    a.files.write("mine.txt", b"a's")
    assert a.files.exists("mine.txt") and not b.files.exists("mine.txt")


def test_other_tenant_with_the_same_sandbox_id_sees_nothing():
    from conftest import TOKEN_B
    a = open_sandbox("shared-id")
    b = open_sandbox("shared-id", token=TOKEN_B)
    a.files.write("secret.txt", b"tenant a")
    assert not b.files.exists("secret.txt")


def test_no_token_is_refused():
    with pytest.raises(SandboxRequestError) as e:
        open_sandbox(token=None).commands.run("echo hi")
    assert e.value.status_code == 401


def test_upload_over_the_limit_is_refused(sandbox):
    with pytest.raises(SandboxRequestError) as e:
        sandbox.files.write("big.bin", b"x" * (MAX_FILE + 1))
    assert e.value.status_code == 413
