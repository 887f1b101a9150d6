"""A local Ray for the fleet tests: 2 CPUs, a small object store, files inside the test folder.

Started once per test session through :func:`cdml_edge.retrain.fleet.ray_session` (the code
the CLI runs), with the test S3 credentials in the environment while Ray starts, so its
workers can reach the loopback S3 server that the S3 tests start later.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

_TEST_AWS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


@pytest.fixture(scope="session")
def ray_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    from cdml_edge.retrain.fleet import RaySettings, ray_session

    temp = tmp_path_factory.mktemp("ray")
    settings = RaySettings(num_cpus=2, object_store_bytes=128 << 20, temp_dir=str(temp))
    saved = {k: os.environ.get(k) for k in _TEST_AWS}
    os.environ.update(_TEST_AWS)
    session = ray_session(settings, quiet=True)
    try:
        session.__enter__()
    finally:  # the workers keep the values they started with; the tests do not
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    try:
        yield
    finally:
        session.__exit__(None, None, None)
