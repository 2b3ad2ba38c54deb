"""Scrub secrets from any text that came from outside before afc keeps it or shows it.

A provider may quote the API key back in an error ("Incorrect API key provided: Bearer
sk-..."), an exception may carry a URL with credentials, a receiver may echo a header. afc
passes such text through ``scrub`` where it enters (``ProviderError``, every ``AfcError``:
storage, ledger and usage messages) and again where it leaves (the CLI's messages, log lines,
``--json``, tables, ``afc show``, webhook envelopes), so no secret reaches the ledger, a
terminal, a script or a webhook receiver.

What is removed:

- the values of the configured secrets: the providers' API keys, ``AWS_SECRET_ACCESS_KEY`` and
  ``AWS_SESSION_TOKEN``, the webhook secrets a manifest names (``register``), and any
  environment variable whose name ends in ``KEY``, ``TOKEN``, ``SECRET`` or ``PASSWORD``, and
  libpq's ``PGPASSWORD``, and the password in a proxy variable's URL (``_proxy_passwords``; its user name where the
  password is empty)
  (values of 8 characters or more and no plain word, so ordinary words are not blanked: below);
- token shapes, whoever's they are: ``Bearer …``, ``Key …`` (fal), ``Basic …`` (the base64
  of any ``user:password``, however short the password), ``sk-…`` (OpenAI),
  ``r8_…`` (Replicate), ``AIza…`` (Google), ``whsec_…``, credentials in a URL
  (``https://user:pass@host``) and key-like query parameters (``?key=…``, ``?api-key=…``, ``?code=…``, ``X-Amz-Signature``,
  Azure's SAS ``sig=``, which OpenAI's image URLs carry, ``X-Goog-Signature``), and the
  secret in the path of a Slack or Discord webhook URL (``/services/T…/B…/<secret>``,
  ``/api/webhooks/<id>/<token>``).

Each is replaced by ``<redacted>`` (no square brackets: rich would read them as markup).

A weak password is masked only where it stands as a credential. A value shorter than
``MIN_SECRET_CHARS``, or a plain word (letters only, shorter than ``WORD_CHARS``:
``PGPASSWORD=postgres``, ``postgresql://afc:password@db/afc``), is not looked for in ordinary
text: masked wherever that word stood, it made every ledger message read '<redacted>ql://...'
and a job 'password-reset' '<redacted>-reset' in every table and --json, and the gap itself
told the password to whoever read it. Such a password is masked where a text holds it as a
credential, by the shapes below: a URL's ``user:password@``, a ``?password=`` parameter, and
a ``Basic`` header's base64 (a proxy quoting back its ``Proxy-Authorization``). A password
that a provider or proxy quotes back in prose ('password afc rejected') is shown: no service
afc calls holds a database password, and a word is guessed as easily as it is read. A value
with a digit or a symbol, or of ``WORD_CHARS`` letters or more (a pass phrase), is no word of
prose and is masked wherever it stands.

How a value is found, since an echo is not always the value as it was sent:

- the token shapes are matched first, so a fal ``Key id:secret`` echo is removed whole before
  the id alone would be (the id removed first left the secret's part outside any shape);
- a value is matched in any letter case, with zero-width characters removed from the text,
  and also base64-encoded at each of the three byte alignments (a Basic-auth style
  ``user:key`` echo), hex-encoded and percent-encoded character by character; a text that
  holds a value only once its percent-escapes, HTML character references or JSON escapes
  (``\\u0073``) are decoded, or its lines joined (a key printed in short lines, broken by a
  line feed, a CR or both; its base64 wrapped at 76 columns), is scrubbed decoded;
- a run of ``PARTIAL_CHARS`` or more consecutive characters of a provider key, an AWS secret,
  a webhook secret or the serve token, or of its base64 or hex (an echo cut short,
  ``sk-...abc***``, a header's base64 cut at a column, or broken by a line break) is removed
  too, looked for last in the text as decoded (so a value decoded is
  found whole first). Only those: the value of any other ``*_KEY`` variable may be a path
  or a word, and a piece of it would blank ordinary text.

Not looked for, as no provider, proxy or gateway afc calls writes them (outside audit 56c): a
value base64-encoded twice, or split by blanks or markup (``<br>``) rather than line breaks,
or in fullwidth or other compatibility characters (``ｓｋ－…``), or a bare value
percent-encoded twice (only its runs of ``PARTIAL_CHARS`` go; twice-encoded inside a URL's
``?token=`` it goes whole, by the shape). The echoes seen are the value as sent, JSON
(escaped once, or again inside a gateway's message), HTML, percent-encoding, a header's
base64, cut short, and lines wrapped: each is handled above.
"""

from __future__ import annotations

import base64
import html
import os
import re
from typing import Any
from urllib.parse import SplitResult, unquote, urlsplit

REDACTED = "<redacted>"
MIN_SECRET_CHARS = 8
# an unpadded Basic token this long is taken for one cut short (``_basic``), not for prose
CUT_BASIC_CHARS = 12
# a value of letters only shorter than this is a word (``_a_word``): masked as a credential only
WORD_CHARS = 16
PARTIAL_CHARS = 12  # this many consecutive characters of a known key are taken as the key
SECRET_ENVS = (
    "OPENAI_API_KEY",
    "REPLICATE_API_TOKEN",
    "FAL_KEY",
    "GEMINI_API_KEY",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AFC_SERVE_TOKEN",
)
# (PGPASSWORD, libpq's, is named whole: afc's PostgreSQL ledger messages point the user to it)
_SECRET_NAME = re.compile(
    r"(?:^|_)(?:API_?KEY|KEY|TOKEN|SECRET|PASSWORD|PASSWD)$|^PGPASSWORD$", re.I
)

# the names of a URL's query parameters that carry a credential
_KEY_PARAMS = (
    r"key|api_key|apikey|token|access_token|secret|password|passwd|pwd|sslpassword|"
    r"x-amz-signature|x-amz-credential|x-amz-security-token|signature|sig|"
    r"x-goog-signature|x-goog-credential|"
    # named as the secret variables are (``_SECRET_NAME``): api-key, auth_token,
    # client_secret, private_token; and an Azure Function's key (?code=), which its
    # webhook URLs carry
    r"[A-Za-z0-9._-]*[_-](?:key|token|secret|password|passwd)|code"
)
_KEY_PARAM_NAME = re.compile(_KEY_PARAMS, re.I)
_URL_CREDENTIALS = re.compile(r"(?<=://)[^/\s:@\"']*:[^\s@]+@(?:[^\s@/?#\"']*@)*")
# a webhook secret (Standard Webhooks' whsec_ and base64: ``webhooks.secret_problem``)
_WEBHOOK_SECRET = re.compile(r"\bwhsec_[A-Za-z0-9+/=]{4,}")


def _basic(found: re.Match[str]) -> str:
    """A ``Basic`` credential masked (``_SHAPES``), or the text as it was where its token is
    not the base64 of a ``user:password``. Only a token as an encoder writes one, padded to a
    multiple of four characters, holding a user name and a password, one of them possibly
    empty where the other is of ``MIN_SECRET_CHARS`` or more (a key sent as ``KEY:`` or
    ``:TOKEN``): padded by afc, a word or number after 'basic' in prose decoded to text with a
    colon, 'One' to ':w', 'Only' to ':yr', '2486' to 'ۏ:', and 'too basic One more pass' in a
    reviewer's reason or a provider's message was kept as 'too basic <redacted> more pass'."""
    token = found.group(3)
    if len(token) % 4:
        if len(token) < CUT_BASIC_CHARS:
            return found.group()
        # a long token cut short (a message cut before it was scrubbed,
        # ``providers.base.bounded``): the whole groups before the cut are a 'user:pass'
        # all the same, shown as they came where the decode failed. Only a long one: a
        # word after 'basic' in prose is as short as it is unpadded
        token = token[: len(token) - len(token) % 4]
    try:
        said = base64.b64decode(token, validate=True).decode()
    except ValueError:  # not base64, or not UTF-8 (binascii.Error, UnicodeDecodeError)
        return found.group()
    user, colon, password = said.partition(":")
    if not colon or not said.isprintable():
        return found.group()
    if not (user or len(password) >= MIN_SECRET_CHARS) or not (
        password or len(user) >= MIN_SECRET_CHARS
    ):
        return found.group()
    return found.group(1) + found.group(2) + REDACTED


_SHAPES: list[tuple[re.Pattern[str], Any]] = [
    # Authorization schemes: Bearer (OpenAI, Replicate), Key id:secret (fal), Token (old
    # Replicate); "Key" and "Token" only capitalised, as in a header, so prose is left alone.
    # A bearer token holds a digit, a symbol other than '-' or a capital past its first
    # letter: lowercase letters and hyphens after "bearer" are prose ("a flag bearer
    # marching", "the ring bearer standing"), which prompts hold and every table, --json and
    # report showed masked. (A configured key is masked by its value, whatever its shape:
    # ``_literal``.)
    (
        re.compile(
            r"\b((?i:bearer))(\s+)(?=[0-9._~+/=]|[A-Za-z\-][a-z\-]*[A-Z0-9._~+/=])"
            r"[A-Za-z0-9._~+/=\-]{8,}"
        ),
        r"\1\2" + REDACTED,
    ),
    (re.compile(r"\b(Key)(\s+)[A-Za-z0-9_\-]{6,}:[A-Za-z0-9_\-]{6,}"), r"\1\2" + REDACTED),
    # Basic (a proxy's Proxy-Authorization, a URL's user:password as httpx sends it): the
    # base64 of a 'user:password', whatever its length (a proxy password of fewer than
    # MIN_SECRET_CHARS, quoted back in a 407, was shown and kept: base64 hides nothing);
    # only what decodes to printable text with a colon, so "Basic Training" is prose
    (re.compile(r"\b((?i:basic))(\s+)([A-Za-z0-9+/]{2,}={0,2})(?![A-Za-z0-9+/=])"), _basic),
    (re.compile(r"\b(Token)(\s+)[A-Za-z0-9_\-]{16,}"), r"\1\2" + REDACTED),
    (re.compile(r"\bsk-[A-Za-z0-9_\-]{6,}"), "sk-" + REDACTED),
    (re.compile(r"\br8_[A-Za-z0-9]{6,}"), "r8_" + REDACTED),
    (re.compile(r"\bAIza[0-9A-Za-z_\-]{10,}"), REDACTED),
    (_WEBHOOK_SECRET, "whsec_" + REDACTED),
    # https://user:password@host (a password may hold '/': an AWS secret often does; and a
    # quote, which a URL's userinfo allows and libpq takes: a PostgreSQL ledger's password
    # with one was shown from the quote on); the user name may be empty (https://:pass@host,
    # which libpq and HTTP clients read as a password with no user name); and an '@' in the
    # password not percent-encoded (p@ss): HTTP clients split at the authority's last '@', so
    # each further '@' up to a '/', '?', '#' or blank is the password's too, masked whole
    (_URL_CREDENTIALS, REDACTED + "@"),
    # a webhook URL that is its own credential, its secret in the path: Slack's incoming
    # webhook (/services/T…/B…/<secret>, and its workflows' and triggers'), Discord's
    # (/api/webhooks/<id>/<token>); the team, channel and webhook ids are kept, to tell
    # receivers apart
    (re.compile(r"(/services/T[A-Z0-9]{6,}/B[A-Z0-9]{6,}/)[A-Za-z0-9]{8,}"), r"\1" + REDACTED),
    (
        re.compile(
            r"(\b(?i:hooks\.slack(?:-gov)?\.com)/(?:workflows|triggers)/T[A-Z0-9]{6,}/"
            r"(?:[A-Za-z0-9]+/)*)[A-Za-z0-9]{8,}(?![A-Za-z0-9/])"
        ),
        r"\1" + REDACTED,
    ),
    (re.compile(r"(/api/(?:v\d+/)?webhooks/\d{15,25}/)[A-Za-z0-9_\-]{20,}"), r"\1" + REDACTED),
    # ?key=..., &api_key=..., X-Amz-Signature=...; a value masked already is matched as the
    # mask alone: a text scrubbed twice (a message naming a masked URL, scrubbed where it
    # leaves) kept the mask and lost what followed it, 'db?password=<redacted> connection
    # failed' for '...<redacted>: connection failed'
    (
        re.compile(
            r"([?&](?:" + _KEY_PARAMS + r")=)"
            # a backslash is masked with the character after it, and a value starts with no
            # escaped quote, as it starts with no quote: in a JSON document's text
            # (``emit_json``) a value that began with a quote ('?token="abc"', a prompt's or
            # a reviewer's note's) reads '\"abc', and its backslash masked alone left the
            # quote unescaped, the --json document no longer JSON
            r"(?:" + re.escape(REDACTED) + r"|(?:\\[^\"]|[^&\s\"'#\\])(?:\\.|[^&\s\"'#\\])*)",
            re.I,
        ),
        r"\1" + REDACTED,
    ),
]

_ZERO_WIDTH = re.compile("[\u00ad\u200b-\u200d\u2060\ufeff]")

_extra_envs: set[str] = set()
# secrets held in no environment variable (``register_value``)
_extra_values: frozenset[str] = frozenset()
_values: list[str] | None = None
_literal: re.Pattern[str] | None = None
_pieces: frozenset[str] = frozenset()  # every PARTIAL_CHARS-long piece of a known key, lowered
_runs: re.Pattern[str] | None = None  # runs of the known keys' characters long enough to hold one


# C0 controls but the line break and tab, DEL and C1 controls: a terminal acts on them (ESC
# starts a sequence that recolours, moves the cursor up to rewrite lines, retitles the window,
# writes the clipboard; a carriage return writes over the line)
# and the invisible format characters (Unicode's Cf, and the line and paragraph separators):
# a bidirectional override (U+202E) shows a reviewer's note or a prompt reversed or reordered
# ('too dark \u202egnol' read 'too dark long'), a zero-width space or a tag character hides
# text. The zero-width joiner and non-joiner (U+200C, U+200D) are kept: an emoji sequence and
# Persian or Indic writing need them, and they move nothing
_CONTROLS = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u00ad\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891"
    "\u08e2\u180e\u200b\u200e\u200f\u2028-\u202e\u2060-\u2064\u2066-\u206f\ud800-\udfff"
    "\ufeff\ufff9-\ufffb\U000110bd\U000110cd\U00013430-\U0001343f\U0001bca0-\U0001bca3"
    "\U0001d173-\U0001d17a\U000e0001\U000e0020-\U000e007f]"
)


def _escape(found: re.Match[str]) -> str:
    code = ord(found.group())
    return (
        f"\\x{code:02x}"
        if code <= 0xFF
        else f"\\u{code:04x}"
        if code <= 0xFFFF
        else f"\\U{code:08x}"
    )


def visible(text: Any) -> Any:
    """``text`` with each control character a terminal would act on written as ``\\xNN``,
    and each invisible format character (a bidirectional override, a zero-width space) as
    ``\\uNNNN``: outside text (a provider's error message, a storage server's, a reviewer's
    note) shown on a terminal or kept in a log that is read on one. Anything not a string
    is returned as it is."""
    if not isinstance(text, str) or not _CONTROLS.search(text):
        return text
    return _CONTROLS.sub(_escape, text)


def register(env_name: str) -> None:
    """Treat this environment variable's value as a secret too (a webhook's ``secret_env``)."""
    if env_name not in _extra_envs:
        _extra_envs.add(env_name)
        reset()


def register_value(value: str | None) -> None:
    """Treat ``value`` itself as a secret, as a configured key is (its encodings and pieces
    too): one afc sends that no environment variable holds, such as the AWS session token
    botocore read from a profile, an SSO cache or the instance's role (storage/s3.py)."""
    global _values, _extra_values
    if value and len(value.strip()) >= MIN_SECRET_CHARS and value not in _extra_values:
        _extra_values = _extra_values | {value}  # a new set: one read meanwhile stays whole
        # read again at the next scrub; the secrets read so far stay in use until then (not
        # ``reset``: a thread scrubbing meanwhile would find them half gone)
        _values = None


def reset() -> None:
    """Forget the secret values read so far (the environment changed)."""
    global _values, _literal, _pieces, _runs
    _values = None
    _literal = None
    _pieces = frozenset()
    _runs = None


def environment_without_secrets() -> dict[str, str]:
    """This process's environment without the variables ``scrub`` takes as secrets (the
    provider keys, the AWS secret and session token, the webhook secrets registered so far,
    any ``*_KEY``/``*_TOKEN``/``*_SECRET``/``*_PASSWORD`` and PGPASSWORD) nor the proxy
    variables, nor any variable whose value holds a URL with a password (``AFC_LEDGER``'s
    PostgreSQL URL, a studio's ``DATABASE_URL``) or a webhook secret (``whsec_``, whatever
    its variable's name, registered or not yet): for a child process that needs none of them
    and makes no network call, the file helper (afc_cli/offload.py). It inherited them all,
    readable in its /proc/PID/environ and in any crash report of it."""
    known = set(SECRET_ENVS) | _extra_envs
    return {
        name: value
        for name, value in os.environ.items()
        if name not in known
        and not _SECRET_NAME.search(name)
        and name.lower() not in _PROXY_ENVS
        and not _URL_CREDENTIALS.search(value)
        # a webhook's secret under any name: a manifest's secret_env is registered once the
        # manifest is read, after the helper is started (and a worker's, at a later claim)
        and not _WEBHOOK_SECRET.search(value)
    }


def encodings(value: str) -> set[str]:
    """The forms in which an echo may carry ``value`` besides itself: hex, every character
    percent-encoded, and base64 at each of the three alignments a value can have inside a
    longer encoded text (the characters that depend on the neighbouring bytes left out).
    Of its UTF-8 bytes, and of its Latin-1 bytes where they differ: a Basic header carries
    those (aiohttp's ``BasicAuth``, which sends a proxy's credentials, as browsers and curl
    do), and a proxy password with an 'ä' quoted back so was shown and kept."""
    forms: set[str] = set()
    for raw in {value.encode(), *_latin1(value)}:
        forms |= {raw.hex(), "".join(f"%{byte:02x}" for byte in raw)}
        for shift in range(3):
            encoded = base64.b64encode(bytes(shift) + raw).decode()
            core = encoded[-(-8 * shift // 6) : 8 * (shift + len(raw)) // 6]
            if len(core) >= MIN_SECRET_CHARS:
                forms |= {core, core.replace("+", "-").replace("/", "_")}
    return forms


def _latin1(value: str) -> list[bytes]:
    """``value``'s Latin-1 bytes, where it has any (none outside Latin-1)."""
    try:
        return [value.encode("latin-1")]
    except UnicodeEncodeError:
        return []


def _secret_values() -> list[str]:
    global _values, _literal, _pieces, _runs
    if _values is None:
        known = set(SECRET_ENVS) | _extra_envs
        names = known | {name for name in os.environ if _SECRET_NAME.search(name)}
        values: set[str] = set()
        pieces: set[str] = set()
        # (its value, whether its pieces are matched too: ``PARTIAL_CHARS``)
        found = [(os.environ.get(name) or "", name in known) for name in names]
        found += [(value, True) for value in _extra_values]
        found += [(value, True) for value in _proxy_passwords()]
        found += [(value, True) for value in _url_credentials()]
        for value, whole_known in found:
            for part in (value, *value.split(":")):  # fal keys are "id:secret"
                part = part.strip()
                if len(part) < MIN_SECRET_CHARS or _a_word(part):
                    continue
                forms = encodings(part)
                values |= {part, *forms}
                if whole_known:
                    # of its base64 and hex too (not its percent-encoding: decoded first): a
                    # header's base64 cut short ('QmVhcmVyIHNrLXBy...') held the key's only
                    # in part, and was shown and kept
                    for form in (part, *(f for f in forms if not f.startswith("%"))):
                        low = form.lower()
                        pieces |= {
                            low[i : i + PARTIAL_CHARS] for i in range(len(low) - PARTIAL_CHARS + 1)
                        }
        # longest first, so a key is removed whole before any part of it; lowered, as the
        # text is matched lowered (re.I over many alternatives took five times as long)
        ordered = sorted({value.lower() for value in values}, key=len, reverse=True)
        chars = {char for piece in pieces for char in piece + piece.upper()}
        # each set whole before the next, the runs before the pieces that need them and the
        # values last: a thread scrubbing meanwhile (an S3 call's, ``register_value``) sees
        # the old secrets or the new ones, never pieces without their runs
        _literal = re.compile("|".join(re.escape(v) for v in ordered)) if ordered else None
        _runs = (
            re.compile(
                "[" + "".join(re.escape(c) for c in sorted(chars)) + f"]{{{PARTIAL_CHARS},}}"
            )
            if chars
            else None
        )
        _pieces = frozenset(pieces)
        _values = ordered
    return _values


def _a_word(value: str) -> bool:
    """Whether ``value`` is a plain word (letters only, shorter than ``WORD_CHARS``): a
    password such as ``postgres`` or ``password``, masked where it stands as a credential only
    (module docstring)."""
    return value.isalpha() and len(value) < WORD_CHARS


# the proxy variables, read in either case (``ALL_PROXY`` too: afc's calls do not use it, but
# its password is a password all the same)
_PROXY_ENVS = ("http_proxy", "https_proxy", "all_proxy")


def _url_credentials() -> list[str]:
    """The credentials in the URL variables of the environment (a provider's base URL with its key
    in its query, ``OPENAI_BASE_URL=https://gw/v1?api-key=...``, a password in one's user
    part), as written and percent-decoded. Masked only where a text showed them in URL form,
    an answer quoting the key alone (an error 'invalid key: ...') had it shown and kept
    (outside audit 55g)."""
    found = []
    for name, value in os.environ.items():
        # the URL variables only (OPENAI_BASE_URL, FAL_QUEUE_URL, AWS_ENDPOINT_URL...): any
        # other value naming a URL in passing (pytest's PYTEST_CURRENT_TEST, a test id
        # holding one) had its text after '?key=' taken for a key
        if not name.upper().endswith("_URL") or "://" not in value:
            continue
        if "?" not in value and "@" not in value:
            continue
        parts = _split_url(value)
        if parts is None:
            continue
        given = [parts.password] if parts.password else []
        for param in parts.query.split("&"):
            name, _, item = param.partition("=")
            if item and _KEY_PARAM_NAME.fullmatch(unquote(name)):
                given.append(item)
        for item in given:
            found += [item, unquote(item)]
    return found


def _proxy_passwords() -> list[str]:
    """The passwords in the proxy variables' URLs (``http://user:PASSWORD@proxy:3128``), as
    written and percent-decoded. afc sends one to its proxy as ``Proxy-Authorization: Basic
    base64(user:PASSWORD)``; masked only where a text showed it in its URL, a proxy quoting
    that header back (or the password) in its 407 had it shown and kept. Where the password
    is empty, the user name is the credential (``http://APIKEY:@proxy.zyte.com:8011``, Zyte's
    form): a proxy naming the key it refused had it shown and kept."""
    passwords = []
    for name, value in os.environ.items():
        if name.lower() in _PROXY_ENVS and "@" in value:
            parts = _split_url(value)
            password = None if parts is None else parts.password or parts.username
            passwords += [password, unquote(password)] if password else []
            if password and parts is not None:
                passwords += basic_tokens(
                    unquote(parts.username or ""), unquote(parts.password or "")
                )
    return passwords


def basic_tokens(user: str, password: str) -> list[str]:
    """The ``Basic`` tokens a ``user:password`` is sent as: the base64 of its UTF-8 bytes, and
    of its Latin-1 bytes where they differ, which aiohttp's ``BasicAuth`` sends (afc's provider
    calls through a proxy, as browsers and curl do). The ``Basic`` shape (``_basic``) reads a
    token as UTF-8 only, so that prose after the word 'Basic' ('Basic Overview') is not taken
    for Latin-1 credentials: a password with an 'ä' that is a plain word or shorter than
    ``MIN_SECRET_CHARS``, not looked for on its own (``_a_word``), was shown as it came where a
    proxy quoted that header back. Looked for as this token, whole."""
    said = f"{user}:{password}"
    return [base64.b64encode(said.encode()).decode()] + [
        base64.b64encode(raw).decode() for raw in _latin1(said) if raw != said.encode()
    ]


def _split_url(value: str) -> SplitResult | None:
    """``value`` split as a URL (one written without its scheme, as a proxy variable may be:
    ``user:PASSWORD@proxy:3128``, read as the authority), or None where it is not one."""
    try:
        return urlsplit(value.strip() if "://" in value else "//" + value.strip())
    except ValueError:
        return None


def _partial(text: str) -> str:
    """``text`` with every run of a known key's characters at least ``PARTIAL_CHARS`` long
    replaced (``_pieces``)."""
    assert _runs is not None
    low = _lowered(text)
    spans: list[list[int]] = []
    # only where the text has a run of the keys' characters long enough to hold a piece
    # (a message's words are shorter): the C regex finds those, Python looks inside them
    for run in _runs.finditer(text):
        for i in range(run.start(), run.end() - PARTIAL_CHARS + 1):
            if low[i : i + PARTIAL_CHARS] in _pieces:
                if spans and i <= spans[-1][1]:
                    spans[-1][1] = i + PARTIAL_CHARS
                else:
                    spans.append([i, i + PARTIAL_CHARS])
    for start, end in reversed(spans):
        text = text[:start] + REDACTED + text[end:]
    return text


def _lowered(text: str) -> str:
    """``text`` in lower case, character for character: a character whose lower case is
    longer (``İ``) stays as it is, so positions in the result are positions in ``text``."""
    low = text.lower()
    if len(low) == len(text):
        return low
    return "".join(char if len(char.lower()) != 1 else char.lower() for char in text)


def _literals(text: str) -> str:
    """``text`` with the secret values (``_literal``) replaced, matched in any letter case."""
    assert _literal is not None
    low = _lowered(text)
    out, at = [], 0
    for found in _literal.finditer(low):
        out += (text[at : found.start()], REDACTED)
        at = found.end()
    return "".join(out) + text[at:] if out else text


# What each of ``_SHAPES`` needs in a text to match at all (its scheme's word, its prefix,
# '://', a path's '/services/T' or '/api/', a query's '?' or '&'), with the same letter-case
# rules; and what each of ``_DECODERS`` needs to change a text. A text with neither is
# scrubbed by the secret values alone: the fourteen shapes tried on every string of a
# listing (a job's key, its output's path, a row's JSON) took half of 'afc status --json'
# (12,000 jobs: 1.4 s of 2.4 s) and found nothing in afc's own names. A shape added to
# ``_SHAPES`` must add what it needs here (tests/test_audit57g_scrub_hint.py checks each)
_SHAPE_HINT = re.compile(
    r"(?i:bearer|basic|hooks\.slack)|Key|Token|sk-|r8_|AIza|whsec_|://|/services/T|/api/|[?&]"
)
# the same, as substrings: the regex, its case-blind alternatives tried at each character,
# took 9 us a text of 'afc status --json', the substrings 1.2 us. In ASCII text the
# case-blind ones are the lowered text's substrings (only 'ſ' and the Kelvin sign, not
# ASCII, match 's' and 'k' otherwise); other text is searched with the regex
_SHAPE_NEEDS = (
    "Key",
    "Token",
    "sk-",
    "r8_",
    "AIza",
    "whsec_",
    "://",
    "/services/T",
    "/api/",
    "?",
    "&",
)
_SHAPE_NEEDS_ANY_CASE = ("bearer", "basic", "hooks.slack")


def _shape_hinted(text: str) -> bool:
    """Whether ``text`` holds what one of ``_SHAPES`` needs to match (``_SHAPE_HINT``)."""
    if not text.isascii():
        return _SHAPE_HINT.search(text) is not None
    if any(need in text for need in _SHAPE_NEEDS):
        return True
    low = text.lower()
    return any(need in low for need in _SHAPE_NEEDS_ANY_CASE)


_DECODE_HINT = re.compile(r"[%&\\\r\n\u00ad\u200b-\u200d\u2060\ufeff]")
shape_scans = 0  # texts the shapes were tried on: what the hint spares is counted (tests)


def _scrubbed(text: str) -> str:
    """``text`` without token shapes and secret values, whole (``_pieces`` are looked for
    last, once, by ``scrub``)."""
    global shape_scans
    shape_scans += 1
    for pattern, replacement in _SHAPES:
        text = pattern.sub(replacement, text)
    if _literal is not None:
        text = _literals(text)
    return text


def _has_piece(text: str) -> bool:
    return bool(_pieces) and len(text) >= PARTIAL_CHARS and _partial(text) != text


def _without_zero_width(text: str) -> str:
    return _ZERO_WIDTH.sub("", text)


# an escape written once or escaped again (a JSON text held in a JSON string, and so on)
_JSON_ESCAPE = re.compile(r"(?<!\\)\\+(?:u([0-9A-Fa-f]{4})|x([0-9A-Fa-f]{2})|(/))")


def _json_unescaped(text: str) -> str:
    """``text`` with its JSON (and Python) escapes left as text decoded: ``\\u0073``,
    ``\\x73``, ``\\/``, however many backslashes each has. A gateway's message holding the
    upstream's JSON answer as a string, or an encoder that escapes every character, quoted a
    key no run of twelve characters reached (``\\u0073\\u006b...``)."""
    return _JSON_ESCAPE.sub(
        lambda m: chr(int(m.group(1) or m.group(2), 16)) if m.group(3) is None else "/", text
    )


# a line break as it is, or written as a JSON escape (once or escaped again: ``\\r\\n``),
# found only where a run of backslashes starts: tried at each of a run's backslashes, a
# pattern scans the rest of it, and a text of thousands of them (or of blanks, when the
# blanks around a break were part of the pattern) took seconds of the run's loop to scrub.
# A carriage return alone is a break too (an old Mac's line ending, a terminal dump's): a key
# quoted back in lines of ten broken so was shown and kept whole
_LINE_BREAK = re.compile(r"\r\n?|\n|(?<!\\)\\+r(?:\\+n)?|(?<!\\)\\+n")


def _lines_joined(text: str) -> str:
    """``text`` with its lines joined (a line feed, a CR or both), the blanks and tabs around
    each break left out: a key printed in short lines, or the base64 of its header wrapped at
    76 columns (MIME's), is whole only so. A line break written as a JSON escape is joined
    too: in a JSON text held as a string (a gateway's message quoting the upstream's answer)
    the wrapped base64's breaks are a backslash and an ``n``, and the key's base64, split
    where no encoded form crosses, was kept and shown whole."""
    lines = _LINE_BREAK.split(text)
    if len(lines) == 1:
        return text
    joined = [lines[0].rstrip(" \t"), *(line.strip(" \t") for line in lines[1:-1])]
    return "".join([*joined, lines[-1].lstrip(" \t")])


# what may hide a value: zero-width characters inside it, percent-escapes, HTML references,
# JSON escapes, line breaks (each returns a text with none of them as it is, at once)
_DECODERS = (_without_zero_width, unquote, html.unescape, _json_unescaped, _lines_joined)


def token_shaped(text: str) -> bool:
    """Whether ``text`` holds one of the token shapes ``scrub`` removes whoever's they are
    (``sk-…``, ``r8_…``, ``AIza…``, ``whsec_…``, ...). afc's own names must not: a job key or
    batch of that shape (``sk-shot-000123``) was shown as ``sk-<redacted>`` in every table,
    ``--json`` and ``afc outputs`` path, so the manifest refuses it (afc_cli/manifest.py)."""
    return any(pattern.search(text) for pattern, _ in _SHAPES)


def scrub(text: Any, *, decode: bool = True) -> Any:
    """``text`` without secret values or token shapes (module docstring); anything not a
    string is returned as it is. ``decode``: a text that holds a value only once decoded
    (``_DECODERS``) is kept decoded and scrubbed; otherwise it keeps its characters (an emoji's
    zero-width joiner, a prompt's ``%``). Off for a serialised document (``emit_json``), whose
    escapes decoded would break it; its strings were scrubbed one by one before."""
    if not isinstance(text, str) or not text:
        return text
    _secret_values()
    if not _shape_hinted(text) and not (decode and _DECODE_HINT.search(text)):
        # no shape can match and no decoder changes it (``_SHAPE_HINT``): only the values
        # and their pieces are looked for, as they are below
        out = _literals(text) if _literal is not None else text
        return _partial(out) if _pieces and len(out) >= PARTIAL_CHARS else out
    out = _scrubbed(text)
    if decode:
        for decoder in _DECODERS:
            decoded = decoder(out)
            if decoded != out:
                again = _scrubbed(decoded)
                if again != decoded or _has_piece(decoded):
                    out = again
    # pieces last, in the text as finally decoded: taken out first, a percent-encoded
    # session token's runs of twelve went and its shorter runs between '%2F' and '%2B' stayed,
    # the text decoded no longer holding the token whole ('abcdefghij%2F<redacted>')
    if _pieces and len(out) >= PARTIAL_CHARS:
        out = _partial(out)
    return out


# the characters a JSON document's text (``json.dumps(..., indent=2)``) has between its values:
# the quotes around each string, a comma, a line break and blanks, brackets, a string's
# escapes' backslash. (A colon stands only between a quote and a blank.)
_JSON_STRUCTURE = re.compile(r'["\\,{}\[\]\s]')
_structure_free: tuple[Any, Any, bool] = (None, None, False)


def json_structure_free() -> bool:
    """Whether no secret value nor piece holds one of ``_JSON_STRUCTURE``'s characters: then
    none can be found across two values of a JSON document, and a document whose strings
    need no escapes holds a secret only where one of its strings or numbers does
    (``jsonout._settled``)."""
    global _structure_free
    values, pieces = _secret_values(), _pieces
    held = _structure_free
    if held[0] is not values or held[1] is not pieces:
        free = not any(_JSON_STRUCTURE.search(text) for text in (*values, *pieces))
        held = _structure_free = (values, pieces, free)
    return held[2]


def longest_secret() -> int:
    """The length of the longest secret value ``scrub`` looks for, in any of its forms (its
    percent-encoding the longest): how much of a text's end may hold the start of a secret
    the text was cut in (``providers.base.bounded``)."""
    values = _secret_values()
    return len(values[0]) if values else 0


def scrub_data(value: Any, _seen: dict[str, str] | None = None) -> Any:
    """``scrub`` applied to every string inside a JSON-like value (dicts, lists), their keys
    included (a provider's usage object is the provider's to name). Each distinct string is
    scrubbed once a call (``_seen``): the rows of ``afc status --json`` repeat their keys and
    most values, and scrubbing each of 10,000 rows' strings anew took most of the command."""
    seen: dict[str, str] = {} if _seen is None else _seen
    if isinstance(value, dict):
        return {_once(key, seen): scrub_data(item, seen) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [scrub_data(item, seen) for item in value]
    return _once(value, seen)


def _once(value: Any, seen: dict[str, str]) -> Any:
    """``scrub(value)``, a string looked up in ``seen`` first (the same text scrubs alike
    within one call: the secrets it is checked against do not change meanwhile)."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        # a number holding a secret of digits, or a piece of a key's (its hex form's pieces
        # are often digits): masked as a string here, since a JSON text's scrub masked it in
        # place, '"size": <redacted>', no longer JSON. One shorter than any secret holds none
        text = repr(value)
        if len(text) < MIN_SECRET_CHARS or scrub(text, decode=False) == text:
            return value
        return REDACTED
    if not isinstance(value, str):
        return value  # scrub leaves anything but a string as it is
    done = seen.get(value)
    if done is None:
        done = seen[value] = scrub(value)
    return done


def map_leaves(value: Any, leaf: Any) -> Any:
    """``leaf`` applied to every value inside a JSON-like value that is neither a dict nor a
    list, the dicts and lists kept (a tuple becomes a list, as in JSON)."""
    if isinstance(value, dict):
        return {key: map_leaves(item, leaf) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [map_leaves(item, leaf) for item in value]
    return leaf(value)
