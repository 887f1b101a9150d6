"""An endpoint that accepts connections and never answers (a hung proxy, a stuck gateway).

Each request times out after ``read_timeout``; botocore retries it ``botocore_attempts``
times. Our own loop retried each of those timeouts again (``attempts`` times), so a hung
endpoint cost ``attempts x botocore_attempts`` timeouts (12 x 30 s, six minutes, with the
defaults) before the first error. A timeout botocore has retried already is now final: the
error comes after ``botocore_attempts`` of them, typed, naming the object and the endpoint.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest

from cdml_edge.archive.s3 import RetryPolicy, S3TransientError, open_s3_source

# a policy of its own: the per-process client made for it has these short timeouts
POLICY = RetryPolicy(
    attempts=4, base_delay=0.01, max_delay=0.02, botocore_attempts=2, read_timeout=0.5
)


class HungServer:
    """A loopback TCP server that accepts every connection and never sends a byte."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.accepted: list[socket.socket] = []
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:  # closed
                return
            self.accepted.append(conn)

    def close(self) -> None:
        self.sock.close()
        for conn in self.accepted:
            conn.close()


@pytest.fixture
def hung() -> Iterator[HungServer]:
    server = HungServer()
    yield server
    server.close()


def test_a_hung_endpoint_fails_after_botocores_attempts(
    hung: HungServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    with pytest.raises(S3TransientError) as info:
        open_s3_source(
            "s3://bucket/train/w-1.zip", endpoint_url=hung.url, retry=POLICY, index_cache=False
        )
    err = info.value
    assert (err.bucket, err.key) == ("bucket", "train/w-1.zip")
    message = str(err)
    assert "s3://bucket/train/w-1.zip" in message and hung.url in message
    assert "timeout" in message.lower()
    # every timed-out request was a connection of its own; botocore's retries, not ours too
    assert len(hung.accepted) == POLICY.botocore_attempts, (
        f"{len(hung.accepted)} requests timed out, "
        f"not botocore's {POLICY.botocore_attempts}: our loop retried its timeouts again"
    )
    assert f"after {POLICY.botocore_attempts} attempts" in message
