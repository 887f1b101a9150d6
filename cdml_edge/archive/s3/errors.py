"""Typed ``s3://`` errors (each names bucket and key) and the transient-error test for retries."""

from __future__ import annotations

import http.client
import re
from typing import Any

from cdml_edge.archive.errors import ArchiveError

# Error codes S3 and S3-compatible stores use for "slow down, try again".
THROTTLE_CODES = frozenset(
    {
        "SlowDown",
        "Throttling",
        "ThrottlingException",
        "RequestLimitExceeded",
        "RequestThrottled",
        "TooManyRequestsException",
        "RequestTimeout",
        "RequestTimeTooSkewed",
        "ServiceUnavailable",
        "InternalError",
    }
)


# Error codes of credentials S3 refuses; the session-token ones come with HTTP 400, not 403.
ACCESS_CODES = frozenset(
    {
        "AccessDenied",
        "InvalidAccessKeyId",
        "SignatureDoesNotMatch",
        "ExpiredToken",
        "InvalidToken",
        "TokenRefreshRequired",
    }
)


# The object named at the start of a message (``s3://bucket/key: reason``), last one first.
_NAMED = re.compile(r"(?:^|\s)s3://([^/\s]+)/(.+?): ", re.MULTILINE)


class S3Error(ArchiveError):
    """An ``s3://`` object could not be read; ``.bucket``, ``.key`` and ``.status`` say why.

    ``S3Error(message)`` (one argument, no bucket or key) is also accepted, so a DataLoader
    re-raises the error of a worker as its own type in the main process (it builds the
    exception from the worker's formatted traceback); bucket and key are then read from the
    last ``s3://bucket/key: `` in the message.
    """

    def __init__(
        self, message: str, *, bucket: str = "", key: str = "", status: int | None = None
    ) -> None:
        named = bool(bucket or key)
        if not named:
            found = _NAMED.findall(message)
            bucket, key = found[-1] if found else ("", "")
        self.bucket = bucket
        self.key = key
        self.status = status
        super().__init__(message, archive=f"s3://{bucket}/{key}" if named else None)

    def __reduce__(self) -> tuple[Any, ...]:
        named = self.archive is not None
        return (_rebuild, (type(self), self.reason, self.bucket, self.key, self.status, named))


def _rebuild(
    cls: type[S3Error],
    reason: str,
    bucket: str,
    key: str,
    status: int | None,
    named: bool = True,
) -> S3Error:
    if not named:  # made from a message alone: the message stays as it was
        err = cls(reason, status=status)
        err.bucket, err.key = bucket, key
        return err
    return cls(reason, bucket=bucket, key=key, status=status)


class S3AccessError(S3Error):
    """403: credentials missing, unknown or not allowed to read the object.

    Also an expired or invalid session token (``400 ExpiredToken``, ``InvalidToken``).
    """


class S3NotFoundError(S3Error):
    """404: no such bucket or no such key."""


class S3ObjectChangedError(S3Error):
    """412: the object was replaced while open (its ETag no longer matches)."""


class S3TransientError(S3Error):
    """5xx, throttling or a network failure that outlasted every retry."""


def client_error_status(exc: Any) -> tuple[int | None, str]:
    """HTTP status and error code of a botocore ``ClientError``."""
    response = getattr(exc, "response", None) or {}
    meta = response.get("ResponseMetadata") or {}
    error = response.get("Error") or {}
    status = meta.get("HTTPStatusCode")
    code = str(error.get("Code") or "")
    if status is None and code.isdigit():
        status = int(code)
    return (int(status) if status is not None else None), code


def is_transient(exc: BaseException) -> bool:
    """True for errors worth retrying: 5xx, throttling, timeouts, dropped connections."""
    from botocore.exceptions import (
        ClientError,
        ConnectionError,
        HTTPClientError,
        IncompleteReadError,
    )

    if isinstance(exc, ClientError):
        status, code = client_error_status(exc)
        return code in THROTTLE_CODES or (status is not None and (status >= 500 or status == 429))
    if isinstance(exc, HTTPClientError | ConnectionError | IncompleteReadError):
        return True
    from urllib3.exceptions import HTTPError as Urllib3Error  # ships with botocore

    return isinstance(exc, Urllib3Error | http.client.HTTPException | OSError)


def map_client_error(exc: Any, bucket: str, key: str, action: str) -> S3Error:
    """Turn a botocore ``ClientError`` into the typed error for its status."""
    status, code = client_error_status(exc)
    url = f"s3://{bucket}/{key}"
    detail = f"{code} (HTTP {status})" if code and str(status) != code else f"HTTP {status}"
    if status == 403 or code in ACCESS_CODES:
        return S3AccessError(
            f"access denied on {action} of {url}: {detail}; check the credentials "
            "(boto3 chain: environment, ~/.aws, instance role) and the bucket policy",
            bucket=bucket,
            key=key,
            status=status,
        )
    if status == 404 or code in {"NoSuchKey", "NoSuchBucket", "NotFound"}:
        what = "bucket" if code == "NoSuchBucket" else "object"
        return S3NotFoundError(
            f"no such {what}: {url} ({detail})", bucket=bucket, key=key, status=status
        )
    if status == 412 or code == "PreconditionFailed":
        return S3ObjectChangedError(
            f"{url} changed while open (ETag mismatch); reopen it",
            bucket=bucket,
            key=key,
            status=status,
        )
    if is_transient(exc):
        return S3TransientError(
            f"{action} of {url} failed after retries: {detail}",
            bucket=bucket,
            key=key,
            status=status,
        )
    return S3Error(f"{action} of {url} failed: {detail}", bucket=bucket, key=key, status=status)


def setup_error(exc: BaseException, bucket: str, key: str) -> S3Error:
    """The typed error for a request that could not be made at all (no retry can mend it).

    Credentials missing or incomplete (a key id without its secret) give
    :class:`S3AccessError`; a client that cannot be made (an endpoint without its scheme,
    a region that is no region) or a request botocore refuses to send (a bucket name S3
    does not allow) give :class:`S3Error`, each naming the object and botocore's reason.
    """
    from botocore.exceptions import NoCredentialsError, PartialCredentialsError

    url = f"s3://{bucket}/{key}"
    if isinstance(exc, NoCredentialsError | PartialCredentialsError):
        return S3AccessError(
            f"no credentials for {url} ({exc}; boto3 chain: environment, ~/.aws, instance role)",
            bucket=bucket,
            key=key,
        )
    return S3Error(f"cannot request {url}: {type(exc).__name__}: {exc}", bucket=bucket, key=key)
