"""fca.Client's projects, API keys and webhooks (issue 23's RPCs) against a
real fca-server with keys in its database (`--auth`) and webhooks allowed to
127.0.0.1, where a receiver in this process takes the deliveries."""

import hashlib
import hmac
import http.server
import json
import subprocess
import threading
import time
import warnings

import pytest

import fca
from conftest import MODEL, SERVER_BIN, SOURCE, SPEC, Server


def create_key(db, user, role="user"):
    """A key stored by `fca-server --create_api_key` (printed on stdout)."""
    out = subprocess.run([SERVER_BIN, f"--db={db}", f"--create_api_key={user}", f"--role={role}"],
                         capture_output=True, text=True, check=True)
    return out.stdout.strip()


class Receiver(http.server.ThreadingHTTPServer):
    """Takes webhook POSTs on 127.0.0.1: (headers, body) each, in order."""

    def __init__(self):
        received = self.received = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                received.append((dict(self.headers), body))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args):
                pass

        super().__init__(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """(server, {user: fca.Client}) with alice and bob as users, root as admin."""
    workdir = tmp_path_factory.mktemp("projects")
    db = workdir / "fca.sqlite"
    keys = {user: create_key(db, user, role) for user, role in
            (("alice", "user"), ("bob", "user"), ("root", "admin"))}
    server = Server(workdir, flags=["--http_listen=", "--auth", "--webhook_allow=127.0.0.1"])
    clients = {user: fca.Client(server.address, token=key) for user, key in keys.items()}
    data = tmp_path_factory.mktemp("data")
    (data / "eval.txt").write_bytes((SOURCE / "docs" / "fca.md").read_bytes())
    (data / "calib.txt").write_bytes((SOURCE / "docs" / "architecture.md").read_bytes())
    yield server, clients, data
    for c in clients.values():
        c.close()
    server.stop()


def test_projects_members_roles_and_project_arguments(lab):
    _, c, data = lab
    alice, bob, root = c["alice"], c["bob"], c["root"]
    with pytest.raises(fca.PermissionDenied):  # admins create shared projects
        alice.create_project("lab")
    created = root.create_project("lab", owner="alice")
    assert created["name"] == "lab" and created["personal"] is False
    assert {"alice", "lab"} <= set(alice.projects().name)
    assert alice.projects().set_index("name").loc["lab"].role == "OWNER"
    with pytest.raises(fca.AlreadyExists):
        root.create_project("lab", owner="alice")
    with pytest.raises(fca.NotFound):  # bob is no member: the project does not exist for him
        bob.project("lab")
    with pytest.raises(ValueError):
        alice.add_member("lab", "bob", "boss")
    members = alice.add_member("lab", "bob", "reader")["members"]
    assert {"user": "bob", "role": "READER"} in members
    # The full spelling is taken too.
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # bob has a key: no warning
        assert alice.add_member("lab", "bob", "PROJECT_ROLE_READER")["members"] == members
    # dave has none: added, with a warning saying so.
    with pytest.warns(UserWarning, match="dave has no API key yet"):
        alice.add_member("lab", "dave", "reader")
    alice.remove_member("lab", "dave")
    assert "lab" in set(bob.projects().name)

    alice.upload(data / "eval.txt", project="lab")
    alice.upload(data / "calib.txt", project="lab")
    assert set(alice.datasets(project="lab").name) == {"eval.txt", "calib.txt"}
    assert "eval.txt" not in set(alice.datasets().name)  # the personal project holds none
    with pytest.raises(fca.PermissionDenied):  # a reader uploads nothing
        bob.upload(b"hello", name="b.txt", project="lab")
    job = alice.submit([MODEL], eval="eval.txt", calib="calib.txt", project="lab", **SPEC)
    assert job.message.project == "lab"
    assert list(bob.jobs(project="lab").id) == [job.id]  # a reader sees the project's jobs
    assert job.id not in set(alice.jobs(project="alice").id)
    with pytest.raises(fca.NotFound):  # the personal project has no such datasets
        alice.submit([MODEL], eval="eval.txt", calib="calib.txt", **SPEC)

    with pytest.raises(fca.FailedPrecondition):  # the last owner stays
        alice.remove_member("lab", "alice")
    assert all(m["user"] != "bob" for m in alice.remove_member("lab", "bob")["members"])
    with pytest.raises(fca.NotFound):
        bob.jobs(project="lab")
    job.cancel().wait(progress=False, raise_on_failure=False)
    assert alice.delete_project("lab") == {"jobs_deleted": 1, "datasets_deleted": 2,
                                           "webhooks_deleted": 0}
    with pytest.raises(fca.NotFound):
        alice.project("lab")


def test_keys_create_rotate_revoke(lab):
    server, c, _ = lab
    alice, root = c["alice"], c["root"]
    created = alice.create_key()
    assert created["user"] == "alice" and created["state"] == "active"
    assert created["secret"].startswith(created["prefix"])
    with fca.Client(server.address, token=created["secret"]) as own:
        assert MODEL in set(own.models().name)
    listed = alice.keys().set_index("id")
    assert listed.loc[created["id"]].state == "active"
    assert set(listed.user) == {"alice"}  # a user lists their own keys only
    assert {"alice", "bob", "root"} <= set(root.keys().user)
    with pytest.raises(fca.PermissionDenied):  # a user creates no key for another
        alice.create_key(user="bob")

    rotated = alice.rotate_key(created["id"], grace_seconds=0)
    assert rotated["replaced"]["id"] == created["id"] and rotated["id"] != created["id"]
    with pytest.raises(fca.Unauthenticated):  # no grace: the old key is refused at once
        fca.Client(server.address, token=created["secret"]).models()
    with fca.Client(server.address, token=rotated["secret"]) as new:
        assert MODEL in set(new.models().name)
    assert alice.revoke_key(rotated["id"])["state"] == "revoked"
    with pytest.raises(fca.Unauthenticated) as e:
        fca.Client(server.address, token=rotated["secret"]).models()
    assert "revoked" in str(e.value)
    with pytest.raises(fca.NotFound):
        alice.revoke_key(10**9)


def test_webhooks_deliver_a_signed_job_end(lab):
    _, c, data = lab
    bob = c["bob"]
    receiver = Receiver()
    try:
        url = f"http://127.0.0.1:{receiver.server_address[1]}/hook"
        hook = bob.add_webhook(url)
        assert hook["project"] == "bob" and len(hook["secret"]) == 64
        assert list(bob.webhooks().url) == [url]
        with pytest.raises(fca.PermissionDenied):  # a host outside --webhook_allow
            bob.add_webhook("http://example.org/hook")
        bob.upload(data / "eval.txt")
        bob.upload(data / "calib.txt")
        job = bob.submit([MODEL], eval="eval.txt", calib="calib.txt", **SPEC)
        job.cancel().wait(progress=False, raise_on_failure=False)
        # Delivered by the server's sender thread: wait for it (a generous
        # bound, not a timing assertion).
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            deliveries = bob.webhook_deliveries(hook["id"])
            if len(deliveries) and deliveries.state.iloc[0] != "PENDING":
                break
            time.sleep(0.5)
        assert list(deliveries.job_id) == [job.id]
        assert deliveries.state.iloc[0] == "DELIVERED"
        assert deliveries.attempts.iloc[0][0]["http_status"] == 204
        headers, body = receiver.received[0]
        signed = f'{headers["X-Fca-Timestamp"]}.{headers["X-Fca-Delivery"]}.'.encode() + body
        signature = "sha256=" + hmac.new(hook["secret"].encode(), signed, hashlib.sha256).hexdigest()
        assert headers["X-Fca-Signature-256"] == signature
        assert json.loads(body)["job_id"] == job.id
        bob.remove_webhook(hook["id"])
        assert len(bob.webhooks()) == 0
        with pytest.raises(fca.NotFound):
            bob.remove_webhook(hook["id"])
    finally:
        receiver.shutdown()
