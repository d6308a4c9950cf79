"""Redaction: what replaces secrets in everything Moat keeps or logs.

Raw inputs and outputs are never stored: they are redacted (a deny-list of secret key names
plus well-known secret value formats), canonicalized (``schemas.canonical``), and only the
digest is kept (``redacted_hash``).

URLs inside strings are redacted piece by piece, so a record still says where a call went:
userinfo, the values of query (and fragment) parameters whose names are secret, in absolute
URLs, relative references (``/p?api_key=…``) and bare query strings (``a=1&token=…``) alike,
and the secret path of well-known incoming-webhook URLs become ``[REDACTED]``; every other
byte is kept, so a URL without secrets is unchanged and its hash stays stable.

Redaction runs on untrusted text (request bodies before a key is checked, providers'
answers, log lines, workflow code), so its cost is bounded: every pattern runs in linear
time, and one call examines at most ``MAX_REDACTED_CHARS`` characters and weighs at most
``MAX_REDACTED_MATCHES`` candidates; past either bound it hides what is left rather than
look at it.
"""

from __future__ import annotations

import re
import string
from typing import Any
from urllib.parse import unquote_plus

from schemas.canonical import canonical_bytes, sha256_digest

REDACTED = "[REDACTED]"

REDACTED_KEY_PATTERNS: tuple[str, ...] = (
    "authorization",
    "api_key",
    "apikey",
    "api-key",
    "token",
    "password",
    "passwd",
    "secret",
    "credential",
    "credentials",
    "bearer",
    "private_key",
    "privatekey",
    "access_key",
    "accesskey",
    "client_secret",
    "refresh_token",
    "cookie",
    "set-cookie",
    "session",
)

# Query (and fragment) parameter names that are secrets only in a URL, where short names
# are the norm: signed-URL signatures (Azure SAS ``sig``, CloudFront ``Signature``), API
# keys (Google ``key``), OAuth authorization codes. Matched whole, case-insensitively; the
# key deny-list above also applies, by substring (``access_token``, ``X-Amz-Credential``).
URL_SECRET_PARAMS: frozenset[str] = frozenset(
    {"key", "sig", "signature", "code", "auth", "pass", "pwd", "jwt", "otp"}
)
URL_SECRET_PARAM_PATTERNS: tuple[str, ...] = (*REDACTED_KEY_PATTERNS, "signature")

# Incoming-webhook URLs whose path is the credential: (host, the public start of the path).
# Whatever follows that start is replaced; scheme, host and the start are kept.
WEBHOOK_URLS: tuple[tuple[re.Pattern[str], re.Pattern[str]], ...] = tuple(
    (re.compile(host, re.IGNORECASE), re.compile(path, re.IGNORECASE))
    for host, path in (
        (r"hooks\.slack\.com", r"/(?:services|triggers|workflows)/"),
        (r"(?:[a-z0-9-]+\.)?discord(?:app)?\.com", r"/api(?:/v\d+)?/webhooks/"),
        (r"[a-z0-9-]+\.webhook\.office\.com", r"/webhookb2/"),
        (r"outlook\.office(?:365)?\.com", r"/webhook/"),
        (r"hooks\.zapier\.com", r"/hooks/catch/"),
        (r"maker\.ifttt\.com", r"/trigger/[^/]+/with/key/"),
    )
)

# --- What redaction may cost --------------------------------------------------------------
# Every pattern below runs in time linear in its text (a literal first, possessive runs, no
# unbounded repetition that can be tried from many starts), and one call of ``redact``,
# ``redact_string`` or ``redact_text`` does a bounded amount of work whatever it is given,
# so no input can stall a gateway, pin a worker or trip the workflow deadlock detector.
MAX_REDACTED_CHARS = 4 * 1024 * 1024
"""Characters one call examines (every string, key and pass counted). Past it, what is left
is not looked at but replaced whole: a ``redact`` value's remaining leaves become
``[REDACTED]``, and ``redact_text`` keeps only what it examined."""
MAX_REDACTED_MATCHES = 4096
"""Secret candidates (URL parameters, webhook URLs) one call weighs one by one. Past it, the
string being redacted becomes ``[REDACTED]`` whole, as do the leaves after it."""
MAX_REDACTED_TEXT_CHARS = MAX_REDACTED_CHARS // 2
"""The longest free text ``redact_text`` redacts in place (room for two passes). A longer
text keeps its first ``MAX_REDACTED_TEXT_CHARS`` characters up to the last white space
among them (a token is never cut in two), redacted, then a marker saying how many
characters were dropped."""
_CUT_LOOKBACK = 64 * 1024


class _OverBudget(Exception):
    """One call has weighed as many candidates as it may (``MAX_REDACTED_MATCHES``)."""


class _Budget:
    """What one call may still do."""

    __slots__ = ("chars", "matches")

    def __init__(self) -> None:
        self.chars = MAX_REDACTED_CHARS
        self.matches = MAX_REDACTED_MATCHES

    def scan(self, text: str) -> bool:
        """Count ``text`` as examined; False once the call has examined all it may."""
        self.chars -= len(text)
        return self.chars >= 0

    def weigh(self) -> None:
        self.matches -= 1
        if self.matches < 0:
            raise _OverBudget


# --- URLs and query strings ---------------------------------------------------------------
# Characters that end a URL, or a parameter's value, in free text: white space, quotes,
# angle brackets and backticks cannot be part of a URL unescaped.
_STOP = "\\s\"'<>`"
_NAME = rf"[^=?&#{_STOP}]"
_PATH = re.compile(rf"[^?#{_STOP}]*+")
_VALUE = re.compile(rf"[^&{_STOP}]*+")
# The userinfo of an authority (``://<userinfo>@host``: up to its last ``@``), unless it is
# empty or already ``[REDACTED]``.
_USERINFO = re.compile(
    rf"://(?!(?:@|\[REDACTED\]@)[^/?#@{_STOP}]*+(?:[/?#{_STOP}]|\Z))(?:[^/?#@{_STOP}]*+@)++"
)
_USERINFO_REDACTED = f"://{REDACTED}@"
# The patterns below run on the text with ASCII letters in lower case (``_folded``): a
# case-insensitive regex costs several times more per character.
_ASCII_LOWER = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)
# A URL of ``WEBHOOK_URLS``, up to the public start of its path; then the rest of the path.
# It is looked for only in a text that holds one of the words of their hosts.
_WEBHOOK_WORDS = ("slack", "discord", "office", "zapier", "ifttt")
_WEBHOOK = re.compile(
    rf"://(?:[^/?#@{_STOP}]*+@)*+(?:"
    + "|".join(
        rf"(?:{host.pattern})(?::[^/?#{_STOP}]*+)?{path.pattern}" for host, path in WEBHOOK_URLS
    )
    + rf")([^?#{_STOP}]++)"
)
# ``name=`` where a parameter can start: after ``?``, ``&`` or ``#`` (the query or fragment
# of a URL, absolute or relative, or a bare query string), or at the start of a word
# (``access_token=…&token_type=bearer``, a form-encoded answer). Only names holding a word
# of the deny-lists (the shortest ones: ``key`` stands for ``api_key`` and the like), a
# percent sign (decoded before the test) or a character outside ASCII (whose lower case may
# be ASCII) are weighed one by one.
_DENIED_WORDS = {*URL_SECRET_PARAM_PATTERNS, *URL_SECRET_PARAMS}
_HINT_WORDS = sorted(w for w in _DENIED_WORDS if not any(o != w and o in w for o in _DENIED_WORDS))
_HINT = rf"(?={_NAME}*?(?:{'|'.join(map(re.escape, _HINT_WORDS))}|%|[^\x00-\x7f]))"
_PARAM = re.compile(rf"[?&#{_STOP}]{_HINT}({_NAME}++)=")
_FIRST_PARAM = re.compile(rf"{_HINT}({_NAME}++)=")
_URL_PARAM_STARTS = frozenset("?&#")

# Values that are secrets whatever key they sit under. Each starts with a literal (what the
# regex engine looks for first) and asserts the word boundary after it; JWTs, which cannot
# start with a literal, are found by ``_jwt_spans``.
SECRET_VALUE_PATTERNS: tuple[re.Pattern[str], ...] = tuple(
    re.compile(p)
    for p in (
        # The whole key, up to its end line (or the end of the text, when cut short).
        r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?(?:-----END [A-Z ]*PRIVATE KEY-----|\Z)",
        r"Bearer(?<!\wBearer)\s++[A-Za-z0-9\-._~+/]{8,}+=*+",
        r"Basic(?<!\wBasic)\s++[A-Za-z0-9+/]{8,}+={0,2}+",
        r"xox(?<!\wxox)[abprs]-[A-Za-z0-9-]{10,}+",  # Slack tokens
        r"xapp-(?<!\wxapp-)[A-Za-z0-9-]{10,}+",
        r"gh(?<!\wgh)[pousr]_[A-Za-z0-9]{20,}+",  # GitHub tokens
        r"github_pat_(?<!\wgithub_pat_)[A-Za-z0-9_]{20,}+",
        r"A(?<!\wA)(?:KIA|SIA)[0-9A-Z]{16}\b",  # AWS access key ids
        r"sk-(?<!\wsk-)(?:proj-|ant-)?[A-Za-z0-9_-]{16,}+",  # OpenAI / Anthropic style keys
        r"[rs](?<!\w[rs])k_(?:live|test)_[A-Za-z0-9]{16,}+",  # Stripe
        r"AIza(?<!\wAIza)[0-9A-Za-z_-]{35}\b",  # Google API keys
        r"glpat-(?<!\wglpat-)[A-Za-z0-9_-]{20,}+",  # GitLab
        r"npm_(?<!\wnpm_)[A-Za-z0-9]{36}\b",
        r"moat_(?<!\wmoat_)[a-z0-9]++_[A-Za-z0-9_-]{20,}+",  # our own API keys
        r"://[^/\s:@]++:[^/\s@]++@",  # credentials in URLs
        r"/codec/ui/[A-Za-z0-9_-]{20,}+",  # our codec endpoint's UI token, in a URL or path
    )
)
# What replaces each pattern's match in free text: the credentials of a URL keep the URL's
# ``://`` and ``@``, so that the URL is still seen as one (a webhook's path, its query).
_REPLACEMENTS = tuple(
    f"://{REDACTED}@" if p.pattern.startswith("://") else REDACTED for p in SECRET_VALUE_PATTERNS
)
# A JWT is ``eyJ…`` (8 or more characters) ``.eyJ…`` (the same) ``.…`` (8 or more). Its
# payload and signature start with a literal; the header is the run before them, which
# must hold ``eyJ`` with 8 characters after it; the whole run is replaced.
_JWT_TAIL = re.compile(r"\.eyJ[A-Za-z0-9_-]{8,}+\.[A-Za-z0-9_-]{8,}+")
_B64URL_RUN = re.compile(r"[A-Za-z0-9_-]*+")
_WHITE_SPACE = re.compile(r"\s")


def _run_end(run: re.Pattern[str], text: str, pos: int) -> int:
    """Where a run pattern (one that also matches nothing) started at ``pos`` ends."""
    match = run.match(text, pos)
    assert match is not None
    return match.end()


# Any of the deny-list's words in a lowered key, in one search (every request's input
# keys are read against it).
_SECRET_KEY_WORDS = re.compile("|".join(re.escape(word) for word in REDACTED_KEY_PATTERNS))


def is_secret_key(key: str) -> bool:
    """True when a JSON key names a secret (case-insensitive, partial match)."""
    return _SECRET_KEY_WORDS.search(key.lower()) is not None


def is_secret_value(value: str) -> bool:
    """True when a string looks like a credential of a well-known format."""
    try:
        return _is_secret_value(value, _Budget())
    except _OverBudget:
        return True


def _is_secret_value(value: str, budget: _Budget) -> bool:
    if any(p.search(value) for p in SECRET_VALUE_PATTERNS):
        return True
    spans: list[tuple[int, int]] = []
    _jwt_spans(value, budget, spans, first_only=True)
    return bool(spans)


def _jwt_spans(
    text: str, budget: _Budget, spans: list[tuple[int, int]], *, first_only: bool = False
) -> None:
    backwards = ""
    pos = 0
    while (tail := _JWT_TAIL.search(text, pos)) is not None:
        budget.weigh()
        dot = tail.start()
        backwards = backwards or text[::-1]  # the header's run, read from its end
        from_end = len(text) - dot
        start = dot - (_run_end(_B64URL_RUN, backwards, from_end) - from_end)
        eyj = text.find("eyJ", start, dot)
        if eyj != -1 and dot - eyj >= 3 + 8:
            spans.append((start, tail.end()))
            if first_only:
                return
            pos = tail.end()
        else:
            pos = dot + 1  # the payload may be the header of a JWT after it


def _redact_values(text: str, budget: _Budget) -> str:
    """``text`` with every secret value format in it replaced."""
    for pattern, replacement in zip(SECRET_VALUE_PATTERNS, _REPLACEMENTS, strict=True):
        text = pattern.sub(replacement, text)
    spans: list[tuple[int, int]] = []
    if ".eyJ" in text:
        _jwt_spans(text, budget, spans)
    return _replaced(text, spans) if spans else text


def is_secret_param(name: str) -> bool:
    """True when a URL query or fragment parameter (its decoded name) holds a secret."""
    lowered = name.lower()
    return lowered in URL_SECRET_PARAMS or any(p in lowered for p in URL_SECRET_PARAM_PATTERNS)


def redact_urls(text: str) -> str:
    """``text`` with the secret parts of every URL and query string in it replaced by
    ``[REDACTED]``; all other characters are kept as they are.

    The secret parts are: a URL's userinfo (``https://<token>@host``); the path after the
    public start of a well-known incoming-webhook URL; the value of every parameter whose
    name is secret, wherever a parameter can start: after ``?``, ``&`` or ``#`` (absolute
    URLs, relative references such as ``/p?api_key=…``, bare query strings such as
    ``a=1&access_token=…`` or ``?token=…``), by ``is_secret_param``; and at the start of the
    text or of a word (``access_token=…&token_type=bearer``), by the key deny-list
    (``is_secret_key``). A value runs to the next ``&`` or the end of the URL (white space,
    quotes, ``<``, ``>``, a backtick), so it may hold a ``#`` or a nested URL.
    """
    try:
        return _redact_urls(text, _Budget())
    except _OverBudget:
        return REDACTED


def _redact_urls(text: str, budget: _Budget) -> str:
    if "://" in text:
        text = _USERINFO.sub(_USERINFO_REDACTED, text)
    spans: list[tuple[int, int]] = []
    if "://" in text or "=" in text:
        folded = text.lower() if text.isascii() else text.translate(_ASCII_LOWER)
        if "://" in text and any(word in folded for word in _WEBHOOK_WORDS):
            _webhook_spans(text, folded, budget, spans)
        if "=" in text:
            _param_spans(text, folded, budget, spans)
    return _replaced(text, spans) if spans else text


def _webhook_spans(text: str, folded: str, budget: _Budget, spans: list[tuple[int, int]]) -> None:
    for url in _WEBHOOK.finditer(folded):
        budget.weigh()
        if text[url.start(1) : url.end(1)] != REDACTED:
            spans.append(url.span(1))


def _param_spans(text: str, folded: str, budget: _Budget, spans: list[tuple[int, int]]) -> None:
    param = _FIRST_PARAM.match(folded) or _PARAM.search(folded)
    while param is not None:
        budget.weigh()
        pos = param.end()
        name = text[param.start(1) : param.end(1)]
        decoded = unquote_plus(name) if "%" in name or "+" in name else name
        # The first name of the text starts the match; any other, the character before it.
        if text[param.start()] in _URL_PARAM_STARTS:
            secret = is_secret_param(decoded)
        else:
            secret = is_secret_key(decoded)
        if secret:
            end = _run_end(_VALUE, text, pos)
            if end > pos and text[pos:end] != REDACTED:
                spans.append((pos, end))
            pos = end
        # A value that is not secret may itself hold a URL or parameters: look inside.
        param = _PARAM.search(folded, pos)


def _replaced(text: str, spans: list[tuple[int, int]]) -> str:
    """``text`` with each span (overlapping ones merged) replaced by ``[REDACTED]``."""
    spans.sort()
    parts: list[str] = []
    kept_to = 0
    start, end = spans[0]
    for next_start, next_end in spans[1:]:
        if next_start <= end:
            end = max(end, next_end)
            continue
        parts += (text[kept_to:start], REDACTED)
        kept_to, start, end = end, next_start, next_end
    parts += (text[kept_to:start], REDACTED, text[end:])
    return "".join(parts)


_MAX_TEXT_PASSES = 8


def redact_text(text: str) -> str:
    """``text`` with every well-known secret value format replaced by ``[REDACTED]`` (for
    free text such as log lines, where there are no keys to go by), and the secret parts
    of every URL and query string in it (``redact_urls``).

    Its cost is bounded: a text longer than ``MAX_REDACTED_TEXT_CHARS`` is cut (see there),
    and a text that holds more than ``MAX_REDACTED_MATCHES`` secret candidates, or does not
    settle within the passes its budget allows, becomes ``[REDACTED]`` whole."""
    if len(text) > MAX_REDACTED_TEXT_CHARS:
        return _cut_text(text)
    # Value formats first: a parameter's value ends at white space, and redacting only the
    # start of ``token=Bearer <token>`` would hide the format that shows the rest is a
    # secret. A replacement can complete a pattern that was not there before, so the
    # passes repeat until nothing changes: redacting redacted text changes nothing.
    budget = _Budget()
    try:
        for _ in range(_MAX_TEXT_PASSES):
            if not budget.scan(text):
                break
            before = text
            text = _redact_urls(_redact_values(text, budget), budget)
            if text == before:
                return text
    except _OverBudget:
        pass
    return REDACTED


def _cut_text(text: str) -> str:
    limit = MAX_REDACTED_TEXT_CHARS - 100  # room for the marker: a cut text is not cut again
    window = text[max(0, limit - _CUT_LOOKBACK) : limit]
    space = _WHITE_SPACE.search(window[::-1])
    kept = 0 if space is None else limit - space.start()
    marker = f"[REDACTED: {len(text) - kept} more characters, not examined]"
    return (redact_text(text[:kept]) + " " if kept else "") + marker


def redact_string(value: str) -> str:
    """A string as ``redact`` leaves it: ``[REDACTED]`` when it holds a secret value of a
    well-known format, else with the secret parts of its URLs and query strings replaced
    (``redact_urls``). Its cost is bounded as ``redact``'s."""
    return _redacted_string(value, _Budget())


def _redacted_string(value: str, budget: _Budget) -> str:
    if budget.matches < 0 or not budget.scan(value):
        return REDACTED
    try:
        if _is_secret_value(value, budget):
            return REDACTED
        redacted = _redact_urls(value, budget)
        # Cutting a URL apart must not leave behind a value pattern the whole did not show.
        if redacted != value and _is_secret_value(redacted, budget):
            return REDACTED
    except _OverBudget:
        return REDACTED
    return redacted


def redact(value: Any) -> Any:
    """A deep copy of ``value`` with every secret replaced by ``"[REDACTED]"``: the value of
    every key the deny-list names, every string of a well-known secret format, and the
    secret parts of URLs and query strings (``redact_string``).

    Its cost is bounded, whatever the value: one call examines at most
    ``MAX_REDACTED_CHARS`` characters (keys and strings) and weighs at most
    ``MAX_REDACTED_MATCHES`` candidates. Past either bound, every remaining leaf (string,
    number, boolean) becomes ``[REDACTED]``: a bound can hide data, never leak a secret.
    Nothing Moat accepts reaches the bounds (request bodies and provider answers are far
    smaller)."""
    return _redacted(value, _Budget())


def _redacted(value: Any, budget: _Budget) -> Any:
    if isinstance(value, dict):
        return {
            k: (
                REDACTED
                if not budget.scan(key := str(k)) or is_secret_key(key)
                else _redacted(v, budget)
            )
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [_redacted(v, budget) for v in value]
    if isinstance(value, str):
        return _redacted_string(value, budget)
    if budget.chars < 0 or budget.matches < 0:
        return REDACTED if value is not None else None
    return value


def redacted_hash(value: Any) -> str:
    """``sha256:`` of the canonical bytes of the redacted value."""
    return sha256_digest(canonical_bytes(redact(value)))
