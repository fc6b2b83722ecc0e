"""Fixtures: Sandbox handles of the unchanged k8s-agent-sandbox client in
direct mode, pointed at forge serve's agent-sandbox face (FORGE_AS_URL,
FORGE_AS_TOKEN, FORGE_AS_TOKEN_B set by scripts/test-agentsandbox.sh)."""
import os
import uuid

import pytest
from kubernetes import client as k8s
from k8s_agent_sandbox.sandbox import Sandbox
from k8s_agent_sandbox.k8s_helper import K8sHelper
from k8s_agent_sandbox.models import SandboxDirectConnectionConfig

URL = os.environ["FORGE_AS_URL"]
TOKEN = os.environ["FORGE_AS_TOKEN"]
TOKEN_B = os.environ["FORGE_AS_TOKEN_B"]
MAX_FILE = int(os.environ["FORGE_AS_MAX_FILE_SIZE"])


def helper():
    # Direct mode talks to api_url only; the client asks the Kubernetes API
    # for the pod IP as a routing hint and carries on without it. Point it
    # at a closed loopback port so that hint fails at once.
    cfg = k8s.Configuration()
    cfg.host = "http://127.0.0.1:9"
    cfg.retries = 0
    return K8sHelper(api_client=k8s.ApiClient(cfg))


def open_sandbox(sandbox_id=None, token=TOKEN, namespace="default"):
    headers = {"Authorization": "Bearer " + token} if token else {}
    conn = SandboxDirectConnectionConfig(api_url=URL, extra_headers=headers)
    return Sandbox(claim_name="claim-" + (sandbox_id or "x"), sandbox_id=sandbox_id or "sb-" + uuid.uuid4().hex[:10],
                   namespace=namespace, connection_config=conn, k8s_helper=helper())


@pytest.fixture
def sandbox():
    sb = open_sandbox()
    yield sb
    sb.close_connection()
