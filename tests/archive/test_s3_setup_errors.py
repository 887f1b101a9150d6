"""Review cases of ``s3://`` set-up mistakes: each is a typed error naming the object.

A key id without its secret, a bucket name S3 refuses, an endpoint without its scheme, a
region that is no region: mistakes of the environment or the configuration file, met when
the first request is made. They were botocore's or Python's own exceptions (tracebacks),
or an :class:`S3TransientError` for what no retry can mend.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.s3_server import S3Server

from cdml_edge.archive.errors import ArchiveError
from cdml_edge.archive.s3 import (
    RetryPolicy,
    S3AccessError,
    S3Error,
    S3TransientError,
    open_s3_source,
)

# a policy of its own: the per-process client made for it is made under this test's settings
POLICY = RetryPolicy(attempts=1, botocore_attempts=1, connect_timeout=3.5, read_timeout=3.5)


@pytest.fixture
def no_aws_config(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No credentials or region from files or an instance role: only the environment's."""
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


def test_key_id_without_secret_is_an_access_error(
    s3_server: S3Server, no_aws_config: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    with pytest.raises(S3AccessError) as err:
        open_s3_source(
            "s3://partial/k.zip", endpoint_url=s3_server.url, index_cache=False, retry=POLICY
        )
    assert (err.value.bucket, err.value.key) == ("partial", "k.zip")
    assert "s3://partial/k.zip" in str(err.value) and "AWS_SECRET_ACCESS_KEY" in str(err.value)


def test_a_bucket_name_s3_refuses_is_no_transient_error(s3_server: S3Server) -> None:
    with pytest.raises(S3Error) as err:
        open_s3_source(
            "s3://Not_A_Bucket!/k.zip", endpoint_url=s3_server.url, index_cache=False, retry=POLICY
        )
    assert not isinstance(err.value, S3TransientError)  # retrying cannot help
    assert "Invalid bucket name" in str(err.value) and err.value.key == "k.zip"


@pytest.mark.parametrize(
    ("endpoint", "region", "words"),
    [
        ("minio.lan:9000", None, "Invalid endpoint: minio.lan:9000"),
        (None, "eu west 1", "eu west 1"),
    ],
)
def test_a_bad_endpoint_or_region_is_a_typed_error(
    s3_server: S3Server,
    no_aws_config: None,
    endpoint: str | None,
    region: str | None,
    words: str,
) -> None:
    with pytest.raises(S3Error) as err:
        open_s3_source(
            "s3://bucket/k.zip",
            endpoint_url=endpoint or s3_server.url,
            region=region,
            index_cache=False,
            retry=POLICY,
        )
    assert isinstance(err.value, ArchiveError) and not isinstance(err.value, S3TransientError)
    assert words in str(err.value) and "s3://bucket/k.zip" in str(err.value)
