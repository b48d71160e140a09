"""A Redis URL's secrets kept out of every line teamctl prints or logs: the user info (the
embedded server's URL carries a generated password, yours may too) and a `password=` in the
query, masked whatever they hold and whether or not the URL parses. Light to import: the CLI's
advice spells commands with it before any connection exists. An HTTP endpoint (a model's
api_base, an MCP server's url) is shown by `shown_url`, which keeps its address alone."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from teamctl.shared.text import flat

MASK = "***"
QUERY_PASSWORD = re.compile(r"[?&;][^?&;=#]*password=", re.IGNORECASE)
"""`password=` or `sentinel_password=` (any option ending in it) in the query."""
MISREAD_IN_USERINFO = "/?#[]"
"""Characters a URL parser never reads as part of a password: `/`, `?` and `#` end the host
part, `[` and `]` enclose an IPv6 host. Unencoded in a password, they hide its end, and the
parser's error quotes its tail as a host."""
URL_BLANKS = str.maketrans("", "", "\t\r\n")
"""What Python's URL parser drops from anywhere in a URL before it reads it."""
PERCENT_ENCODING = "/ as %2F, ? as %3F, # as %23, [ as %5B, ] as %5D, @ as %40, : as %3A, % as %25"
"""How a user or password spells the characters a URL gives a meaning."""


def redacted(url: str) -> str:
    """`url` with its user info and any query password masked, for messages and logs; never
    raises. The user info is everything between `://` and the last `@` (a password may hold
    `@`, `/`, `?`, `#`, `:` or anything else) and becomes `***` whole (a lone user may be a
    password too), or `:***` when its user is empty; a query password is masked to the end of
    the URL (an unencoded `&`, `#` or `@` in it must not show its tail either)."""
    prefix, rest = _scheme(url)
    at, secret_from = _secrets(rest)
    if at >= 0 and secret_from <= at:  # a query password before the last `@`: all is masked
        return prefix + MASK
    user = ((":" if rest.startswith(":") else "") + MASK + "@") if at >= 0 else ""
    tail = MASK if secret_from < len(rest) else ""
    return prefix + user + rest[at + 1 : secret_from] + tail


def scrubbed(text: str, url: str) -> str:
    """`text` (a parser's or a driver's error about `url`) without the URL's secrets: a parser
    may quote the part of the URL that holds them (Python's urlsplit quotes the whole host part
    when NFKC normalization would change it)."""
    _prefix, rest = _scheme(url)
    at, secret_from = _secrets(rest)
    secrets = [rest[: max(at, 0)], rest[secret_from:]]
    # Also as a parser reads them: Python's urlsplit drops tabs and line ends anywhere.
    secrets += [secret.translate(URL_BLANKS) for secret in secrets]
    for secret in sorted(filter(None, secrets), key=len, reverse=True):
        text = text.replace(secret, MASK)
    return text


def shown_url(url: str) -> str:
    """An HTTP endpoint for a message: scheme, host, port and path only, on one line. Its user
    info, query and fragment are left out whatever they hold, since keys and tokens travel
    there too (`?api-key=`, `?code=`); MASK when it has no host part to show."""
    try:
        parts = urlsplit(url)
    except ValueError:  # an unclosed IPv6 bracket, say: nothing of it is shown
        return MASK
    if not parts.netloc:
        return MASK
    return flat(f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}{parts.path}")


def has_secret(url: str) -> bool:
    """Whether `redacted` masks anything in `url`."""
    return redacted(url) != url


def misplaced_userinfo(url: str) -> bool:
    """Whether a `/`, `?`, `#`, `[` or `]` before the URL's last `@` makes a parser misread
    it: part of the password then reads as the host, port or path (a base64 password often
    holds `/`), and the parser would connect somewhere else, or quote the password in its
    error."""
    _prefix, rest = _scheme(url)
    at, _secret_from = _secrets(rest)
    return any(c in rest[: max(at, 0)] for c in MISREAD_IN_USERINFO)


def _scheme(url: str) -> tuple[str, str]:
    """The scheme with its `://` (empty without one), and the rest."""
    scheme, sep, rest = url.partition("://")
    return (scheme + sep, rest) if sep else ("", url)


def _secrets(rest: str) -> tuple[int, int]:
    """Where the user info ends in `rest` (its last `@`; -1: none), and where a query
    password's value starts (len(rest): none)."""
    query = QUERY_PASSWORD.search(rest)
    return rest.rfind("@"), query.end() if query else len(rest)
