"""Expired or invalid temporary credentials (STS session tokens) are access errors.

S3 answers a request signed with an expired session token ``400 ExpiredToken`` (an unknown
or malformed one ``400 InvalidToken``, one to renew ``400 TokenRefreshRequired``), not
``403``. They were a bare :class:`S3Error` ("GET ... failed: ExpiredToken (HTTP 400)"),
which ``except S3AccessError:`` missed and which said nothing of the credentials. The loopback
proxy answers with S3's own error document; nothing is retried.
"""

from __future__ import annotations

import pytest
from helpers.s3_server import S3Server

from cdml_edge.archive.s3 import RetryPolicy, S3AccessError, open_s3_source

BUCKET = "sts-bucket"
KEY = "train/w-1.zip"
POLICY = RetryPolicy(attempts=3, base_delay=0.01, max_delay=0.02, botocore_attempts=1)


@pytest.mark.parametrize("code", ["ExpiredToken", "InvalidToken", "TokenRefreshRequired"])
def test_a_rejected_session_token_is_an_access_error(s3_server: S3Server, code: str) -> None:
    s3_server.put(BUCKET, KEY, b"PK\x05\x06" + bytes(18))
    proxy = s3_server.proxy
    proxy.reset()
    proxy.fail_next(5, status=400, code=code)
    try:
        with pytest.raises(S3AccessError) as info:
            open_s3_source(
                f"s3://{BUCKET}/{KEY}", endpoint_url=proxy.url, retry=POLICY, index_cache=False
            )
        assert proxy.count("GET") == 1  # no retry mends it
    finally:
        proxy.reset()
    err = info.value
    assert (err.bucket, err.key, err.status) == (BUCKET, KEY, 400)
    message = str(err)
    assert f"s3://{BUCKET}/{KEY}" in message and code in message and "credentials" in message
