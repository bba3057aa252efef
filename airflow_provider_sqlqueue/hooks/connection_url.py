"""What an Airflow connection may put into the URL SqlQueueHook builds of it.

Two rules: no ODBC driver (a shared library) chosen by whoever edits the connection, in any form a consumer
of the URL will decode (SQLAlchemy 2.0 percent-decodes ``odbc_connect``); and the password hidden in every
form the URL can carry it (raw, ODBC-quoted, URL-encoded).
"""

from __future__ import annotations

from urllib.parse import quote, quote_plus, unquote_plus

import sqlalchemy
from sqlalchemy.engine import URL, make_url

from ..model.errors import ConfigurationError
from ..transport.odbc_string import odbc_pairs, odbc_value

# Keywords that make the ODBC driver manager load a shared library (DRIVER, or one named by a DSN) or write
# a file (SAVEFILE). Whoever may edit a connection must not choose them (SqlQueueHook._check_driver_keywords).
DRIVER_KEYWORDS = ("DRIVER", "DSN", "FILEDSN", "SAVEFILE")
DRIVER_SETTING = "[providers.odbc] allow_driver_in_extra"

# libpq options that write a file, or read settings or passwords from a file of the connection's choosing;
# sslkey as ``engine:key`` loads an OpenSSL engine, a shared library. Refused in a connection's extras unless
# the deployment sets FILE_OPTIONS_SETTING (libpq_option_refusal).
LIBPQ_FILE_OPTIONS = {
    "sslkeylogfile": "writes the TLS session keys to that file",
    "passfile": "reads passwords from that file",
    "service": "reads any connection setting, these included, from a service file",
}
FILE_OPTIONS_SETTING = "[sqlqueue] allow_file_options_in_extra"

SECRET_ODBC_KEYWORDS = ("PWD", "PASSWORD")
SECRET_QUERY_KEYS = ("password", "pwd")


def secret_forms(secret: str) -> set[str]:
    """Every form in which ``secret`` can appear in a URL, an ODBC string or a log line: raw, as an ODBC
    value (braced, ``}`` doubled), and each of those URL-encoded the ways SQLAlchemy and urllib encode."""
    forms: set[str] = set()
    try:
        written = odbc_value(secret)
    except ConfigurationError:  # no ODBC string can hold it, so it never stands in one
        written = secret
    for text in (secret, written):
        forms |= {text, quote(text, safe=""), quote(text), quote(text, safe=" +"), quote_plus(text)}
    return forms


def _hide_odbc_secrets(odbc: str) -> str:
    return ";".join(
        f"{key}={'***' if key in SECRET_ODBC_KEYWORDS else _shown(value)}" for key, value in odbc_pairs(odbc)
    )


def _shown(value: str) -> str:
    try:
        return odbc_value(value)
    except ConfigurationError:
        return "{?}"


class SecretHidingURL(URL):
    """A SQLAlchemy URL whose ``str`` and ``repr`` hide the password wherever it sits: in the password
    field (as SQLAlchemy does), in a ``password``/``pwd`` query parameter, and as ``PWD`` inside the
    ``odbc_connect`` string, where SQLAlchemy would show it URL-encoded. ``str`` hides it under SQLAlchemy
    1.4 too, whose own ``str`` of a URL shows the password."""

    __slots__ = ()

    def __str__(self) -> str:
        return self.render_as_string(hide_password=True)

    def render_as_string(self, hide_password: bool = True) -> str:
        if not hide_password:
            return super().render_as_string(hide_password=False)
        query: dict[str, str | tuple[str, ...]] = {}
        for key, value in self.query.items():
            values = (value,) if isinstance(value, str) else tuple(value)
            if key.lower() in SECRET_QUERY_KEYS:
                values = tuple("***" for _ in values)
            elif key.lower() == "odbc_connect":
                values = tuple(_hide_odbc_secrets(text) for text in values)
            query[key] = values[0] if len(values) == 1 else values
        shown = URL.create(
            self.drivername, self.username, self.password, self.host, self.port, self.database, query
        )
        return shown.render_as_string(hide_password=True)


def driver_in_extra_allowed() -> bool:
    """The odbc provider's rule, honoured here too: may a connection choose the ODBC driver?

    A driver is a shared library that every worker and the triggerer load, so by default only the code
    (the hook's ``driver``, or ``hook_params``) and the deployment (``default_odbc_driver``) choose it.
    """
    from airflow.providers.common.compat.sdk import conf

    return conf.getboolean("providers.odbc", "allow_driver_in_extra", fallback=False)


def percent_decoded_forms(text: str) -> list[str]:
    """``text`` percent-decoded as ``unquote_plus`` decodes (``+`` a space), once, twice, ... until nothing
    changes: what a consumer that decodes an ODBC string hands the driver manager. SQLAlchemy 2.0's pyodbc
    dialect decodes ``odbc_connect`` once more after the URL's own decoding (2.1 no longer does), so
    ``PWD=x%3BDRIVER%3D/lib.so`` reaches the driver manager there as ``PWD=x;DRIVER=/lib.so``.

    Ends: a round that does not shorten the string only turned ``+`` into spaces, and the next round can
    find a ``+`` only by decoding ``%2B``, which shortens it."""
    forms: list[str] = []
    current = text
    while (decoded := unquote_plus(current)) != current:
        forms.append(decoded)
        current = decoded
    return forms


def odbc_string_sqlalchemy_hands_over(url: URL) -> str:
    """The ODBC string the installed SQLAlchemy's pyodbc dialect would pass to ``pyodbc.connect`` for
    ``url``, asked of the dialect itself (no driver is imported or loaded)."""
    arguments, _ = url.get_dialect()().create_connect_args(url)
    return str(arguments[0])


def sqlalchemy_decodes_odbc_connect() -> bool:
    """Whether the installed SQLAlchemy percent-decodes ``odbc_connect`` (2.0 does, 2.1 does not)."""
    probe = URL.create("mssql+pyodbc", query={"odbc_connect": "A=%3B"})
    return odbc_string_sqlalchemy_hands_over(probe) != "A=%3B"


def file_options_in_extra_allowed() -> bool:
    """May a PostgreSQL connection's extras name files for libpq to write or read settings from?"""
    from airflow.providers.common.compat.sdk import conf

    return conf.getboolean("sqlqueue", "allow_file_options_in_extra", fallback=False)


def libpq_option_refusal(key: str, value: str) -> str | None:
    """Why libpq option ``key=value`` from a connection would write a file, read settings from one or load
    a library; None when it does none of these. ``sslkey`` holding a ``:`` names an OpenSSL engine, which
    libpq loads (outside Windows every colon counts, whatever comes before it)."""
    name = key.strip().lower()
    if name in LIBPQ_FILE_OPTIONS:
        return LIBPQ_FILE_OPTIONS[name]
    if name == "sslkey" and ":" in value:
        return "names an OpenSSL engine (engine:key), a shared library that libpq loads"
    return None


# The parts of a SQLAlchemy URL, by the Airflow connection field each is written from.
URL_FIELDS = {
    "host": "Host",
    "port": "Port",
    "database": "Schema",
    "username": "Login",
    "password": "Password",
}


def reparsed(url: URL) -> URL:
    """``url`` as whoever reads its text gets it: rendered with its password, as ``get_uri()`` renders it,
    and parsed by the installed SQLAlchemy's ``make_url``, as ``create_engine(hook.get_uri())``, the Spark
    jobs (``SQLQUEUE_URL``) and ``open_transport`` of a string parse it."""
    return make_url(url.render_as_string(hide_password=False))


def _changed_parts(url: URL) -> list[str]:
    back = reparsed(url)
    return [part for part in (*URL_FIELDS, "query") if getattr(back, part) != getattr(url, part)]


def _option_named(key: str) -> str:
    why = LIBPQ_FILE_OPTIONS.get(key.lower())
    return f"{key}=" if why is None else f"{key}= (which {why})"


def reparse_refusal(url: URL) -> str | None:
    """Why ``url`` would not come back as it is when its text is parsed again, naming the connection
    fields responsible but no value; None when host, port, database, login, password and query all come
    back unchanged.

    SQLAlchemy 2.0 writes a database name as it is, and neither 2.0 nor 2.1 escapes a host, so a ``?`` in
    the Schema or Host field began the URL's query: Schema ``postgres?passfile=/other.pgpass`` passed every
    check of the extras and came back from ``get_uri()`` as the libpq option ``passfile``. Asking the
    installed SQLAlchemy itself, instead of listing characters, keeps the check true to the release that
    renders the URL."""
    changed = _changed_parts(url)
    if not changed:
        return None
    # Each field alone in a plain URL, to name the one responsible (a bad Host changes the port, database
    # and query that follow it too).
    plain = URL.create(url.drivername, username="u", password="p", host="h", port=1, database="d")
    culprits = [
        f"its {name} field"
        for part, name in URL_FIELDS.items()
        if getattr(url, part) is not None and _changed_parts(plain.set(**{part: getattr(url, part)}))
    ]
    if url.query and _changed_parts(plain.set(query=url.query)):
        culprits.append("its extras")
    if not culprits:  # only the fields together fail: name each field that does not come back
        culprits = [f"its {URL_FIELDS.get(part, 'extras')} field" for part in changed]
    read_as = ""
    if "its Password field" not in culprits:  # option names only, and never ones a password made
        added = sorted(set(reparsed(url).query) - set(url.query))
        if added:
            read_as = f", and would set the query option {', '.join(map(_option_named, added))}"
    return (
        f"{' and '.join(culprits)} would not come back as written when the URL SQLAlchemy "
        f"{sqlalchemy.__version__} renders of the connection (get_uri(), the Spark jobs' SQLQUEUE_URL) is "
        f"parsed again{read_as}. A Host field holds one host name or address and a Schema field one database "
        "name: SQLAlchemy reads a '?', '/', '@' or ':' in them as the URL's own separators"
    )
