"""What an object store's failure means, said first, then the store's own detail.

obstore's errors hold the whole story (the request, the HTTP status, the store's XML error, the
retries, a Rust debug dump of the error chain) in one long text; cut to a length it ended
mid-word (`<Message>The speci`) before it said what happened. Here the cause comes first in plain
words (no such bucket, access denied, connection refused by the endpoint, ...), then the detail
that names it: the store's error code and message, the request and its retries.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from upsertlake.storage.location import Location

DETAIL_CHARS = 400  # of the store's detail, cut at a word
_STATUS = re.compile(r"(?:status code|status):? (\d{3})")
_XML = re.compile(r"<(Code|Message)>([^<]*)</\1>")
_JSON_MESSAGE = re.compile(r'"message"\s*:\s*"([^"]*)"')
_REQUEST = re.compile(r"Error performing (\w+) (\S+) in [^-]+?(?:, after (\d+) retries)?[ ,-]")
_MISSING_BUCKET = {"NoSuchBucket", "ContainerNotFound", "ResourceNotFound"}
_DENIED = {"AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "AuthenticationFailed",
           "AuthorizationFailure", "AuthorizationPermissionMismatch", "ExpiredToken", "InvalidToken",
           "AllAccessDisabled", "AccountProblem", "InvalidClientTokenId"}


def describe(exc: BaseException, location: Location) -> str:
    """`exc` (an obstore error, after its retries) as `<what happened> (<the store's detail>)`."""
    text = str(exc)
    head = text.split("\n\nDebug source:", 1)[0]
    xml = dict(_XML.findall(head))
    code, message = xml.get("Code", ""), xml.get("Message", "")
    if not message and (found := _JSON_MESSAGE.search(head)):
        message = found.group(1)
    status = int(found.group(1)) if (found := _STATUS.search(head)) else None
    request = _REQUEST.search(head)
    host = urlsplit(request.group(2)).netloc if request else ""
    what = _cause(text, code, status, host, location)
    detail = []
    if code or message:
        detail.append(" ".join(": ".join(p for p in (code, message) if p).split()))
    elif status is not None:
        detail.append(f"HTTP {status}")
    if request:
        retries = f" after {request.group(3)} retries" if request.group(3) else ""
        detail.append(f"{request.group(1)} {request.group(2)}{retries}")
    if not detail:
        detail.append(_words(" ".join(head.split()), DETAIL_CHARS))
    return f"{what} ({'; '.join(detail)})"


def _cause(text: str, code: str, status: int | None, host: str, location: Location) -> str:
    bucket = "container" if location.kind == "azure" else "bucket"
    endpoint = f"the endpoint {host}" if host else "the store's endpoint"
    if code in _MISSING_BUCKET or (status == 404 and "bucket does not exist" in text.lower()):
        return f"no such {bucket} {location.bucket!r}"
    if code in _DENIED or status in (401, 403):
        return f"access denied to {bucket} {location.bucket!r}: check the credentials and their permissions"
    if "ConnectionRefused" in text or "Connection refused" in text:
        return f"connection refused by {endpoint}: nothing answers there (check the endpoint and that it is up)"
    if "dns error" in text or "failed to lookup address" in text:
        return f"{endpoint} does not resolve: no such host (check the endpoint)"
    if "TimedOut" in text or "timed out" in text or "operation timed out" in text.lower():
        return f"{endpoint} did not answer in time"
    if "certificate" in text.lower() or "tls" in text.lower():
        return f"{endpoint} failed the TLS handshake (certificate or http/https mismatch)"
    if status is not None and status >= 500:
        return f"the store failed (HTTP {status}), after its retries"
    if status is not None:
        return f"the store refused the request (HTTP {status})"
    return "the store request failed"


def _words(text: str, limit: int) -> str:
    """`text` cut at a word boundary within `limit` characters (marked with ...)."""
    if len(text) <= limit:
        return text
    return text[:limit].rsplit(" ", 1)[0] + " ..."
