"""Secrets in the URL of an image content part, and what the part becomes then.

An ``image_url`` part's URL is text the provider receives: a presigned link
(``X-Amz-Signature=...``), an API key in the query, ``user:password@`` in the
authority, or a ``data:`` URL whose payload is text (``text/plain``, JSON, SVG).
Cutting the secret out of the URL would leave a link that no longer loads, and
a provider refuses a request whose image it cannot fetch, so every later call
of the session would fail. Such a part is replaced whole by a text part holding
``[REDACTED:image_url]``; the report names what was found in the URL. Raster
``data:`` URLs (``image/png;base64,...``) hold pixels, not text, and are left
alone: scanning their base64 would only find look-alikes.
"""

from __future__ import annotations

import base64
import binascii
import urllib.parse
from collections import Counter
from typing import Any

from nanobot_redact.patterns import IMAGE_KIND, marker
from nanobot_redact.scanner import Scanner

__all__ = ["image_url_of", "redact_image_part"]

# Media types whose data: URL payload is text a secret can be written in.
_TEXT_TYPES = ("text/", "application/json", "application/xml", "image/svg+xml")
_TEXT_SUFFIXES = ("+json", "+xml")


def image_url_of(part: dict[str, Any]) -> tuple[str, str] | None:
    """The URL of an image part and its field path, or None when `part` has none.

    Both shapes are read: ``{"image_url": {"url": ...}}`` (chat completions)
    and ``{"image_url": "..."}`` (some clients and the Responses API).
    """
    value = part.get("image_url")
    if isinstance(value, str):
        return value, "image_url"
    if isinstance(value, dict) and isinstance(value.get("url"), str):
        return value["url"], "image_url.url"
    return None


def redact_image_part(part: dict[str, Any], url: str, scanner: Scanner) -> tuple[Any, Counter[str]]:
    """The part to send instead of `part`, and the kinds of secret its `url` holds.

    With nothing found, `part` itself comes back with an empty count.
    """
    found = _secrets_in_url(url, scanner)
    if not found:
        return part, found
    return {"type": "text", "text": marker(IMAGE_KIND)}, found


def _secrets_in_url(url: str, scanner: Scanner) -> Counter[str]:
    if url[:5].lower() != "data:":
        return scanner.redact(url)[1]
    header, comma, payload = url[5:].partition(",")
    if not comma:
        return scanner.redact(url)[1]
    params = header.split(";")
    media_type = params[0].strip().lower() or "text/plain"
    if not (media_type.startswith(_TEXT_TYPES) or media_type.endswith(_TEXT_SUFFIXES)):
        return Counter()
    if "base64" in (p.strip().lower() for p in params[1:]):
        try:
            text = base64.b64decode(payload, validate=False).decode("utf-8", errors="replace")
        except (binascii.Error, ValueError):
            text = payload
    else:
        text = urllib.parse.unquote(payload, errors="replace")
    return scanner.redact(text)[1]
