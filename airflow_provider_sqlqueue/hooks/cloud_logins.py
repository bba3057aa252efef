"""Token logins of the clouds these engines run on, as the official providers offer them.

- SQL Server / Azure SQL: Microsoft Entra ID through the ``Authentication`` keyword of Microsoft's ODBC
  Driver 18, which fetches (and renews) the token itself for each connection it opens. Only the driver's
  non-interactive values are accepted (:data:`ENTRA_AUTHENTICATION`): whoever edits a connection chooses
  how the worker logs in, never a library, a sign-in window or a value the driver does not know.
- PostgreSQL on Amazon RDS / Aurora: an IAM authentication token as the password, as the postgres
  provider's ``iam`` extra does (``aws_conn_id``, default ``aws_default``). A token is valid for 15
  minutes, so the hook's transport asks for a new one for each new connection (its connection factory).
  The Amazon provider (boto3) is not a dependency of this package: it is imported only when a token is
  needed, and its absence is a clear error naming what to install.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ..model.errors import ConfigurationError

# Microsoft's ODBC Driver 18 ``Authentication`` values a worker can use (their spelling as the driver
# documents them). ActiveDirectoryPassword is deprecated by Microsoft but still accepted by the driver.
ENTRA_AUTHENTICATION = {
    value.lower(): value
    for value in (
        "SqlPassword",
        "ActiveDirectoryPassword",
        "ActiveDirectoryServicePrincipal",
        "ActiveDirectoryMsi",
        "ActiveDirectoryIntegrated",
    )
}
_NOT_ON_A_WORKER = {
    "activedirectoryinteractive": "opens a sign-in window (Windows only), which a worker cannot answer",
    "activedirectorydefault": "is Microsoft.Data.SqlClient's, not the ODBC driver's; use ActiveDirectoryMsi",
    "activedirectorymanagedidentity": "is Microsoft.Data.SqlClient's; the ODBC driver has ActiveDirectoryMsi",
    "activedirectorydevicecodeflow": "waits for someone to sign in on another device",
}

IAM_REFUSED_EXTRAS = {
    "redshift": "queues need PostgreSQL (FOR UPDATE SKIP LOCKED), which Redshift is not",
    "redshift-serverless": "queues need PostgreSQL (FOR UPDATE SKIP LOCKED), which Redshift is not",
    "azure_conn_id": "an Entra ID token for Azure Database for PostgreSQL is not supported by SqlQueueHook",
}


def entra_authentication(value: object, conn_id: str) -> str:
    """``value`` as the ODBC driver spells it, if it is an allowed ``Authentication``; else a clear error."""
    text = str(value).strip().removeprefix("{").removesuffix("}").strip()
    allowed = ENTRA_AUTHENTICATION.get(text.lower())
    if allowed is not None:
        return allowed
    why = _NOT_ON_A_WORKER.get(text.lower(), "is not one of the values SqlQueueHook accepts")
    raise ConfigurationError(
        f"connection {conn_id!r}: Authentication={text!r} {why}. Allowed (Microsoft ODBC Driver 18): "
        f"{', '.join(ENTRA_AUTHENTICATION.values())}"
    )


def check_entra_authentication(pairs: Iterable[tuple[str, str]], conn_id: str) -> None:
    """Refuse an ``AUTHENTICATION`` among ``pairs`` (an ODBC string's) that is not allowed; an empty one
    (the driver's "unset") is allowed."""
    for key, value in pairs:
        if key == "AUTHENTICATION" and value.strip():
            entra_authentication(value, conn_id)


def is_true(value: Any) -> bool:
    """An extra's boolean, as connections store them: a JSON bool or the text ``true``."""
    return value is True or str(value).strip().lower() in ("true", "1", "yes")


def check_iam_extras(extra: dict[str, Any], login: str | None, host: str | None, conn_id: str) -> None:
    """What an ``iam`` PostgreSQL connection needs: a Login (the database user the token is for) and a
    Host (the RDS endpoint it is signed for), and none of the postgres provider's extras this hook lacks."""
    for key, why in IAM_REFUSED_EXTRAS.items():
        if extra.get(key) and (key == "azure_conn_id" or is_true(extra[key])):
            raise ConfigurationError(f"connection {conn_id!r}: iam with {key!r}: {why}")
    if not login or not host:
        raise ConfigurationError(
            f"connection {conn_id!r}: an IAM login needs the database user in Login and the RDS or Aurora "
            "endpoint in Host (the token is signed for both)"
        )


# libpq options that choose where a connection goes (or the service file that may), or as whom it logs in. An
# RDS IAM token is signed for the connection's Host, Port and Login, and libpq sends the password to the
# server these options name: with ``hostaddr=<address>;port=<port>`` a listener there received the token.
IAM_DESTINATION_OPTIONS = {
    "host": "names another server than the Host the token is signed for",
    "hostaddr": "sends the connection, and the token, to another address than the Host's",
    "port": "sends the connection, and the token, to another port than the Port the token is signed for",
    "service": "reads host, hostaddr, port and user from a service file",
    "servicefile": "names the service file libpq reads host, hostaddr, port and user from",
    "user": "logs in as another user than the Login the token is signed for",
}


def check_iam_options(options: Mapping[str, str], conn_id: str) -> None:
    """Refuse, on an ``iam`` connection, a libpq option from its extras (``connect_options`` or the libpq
    extras) that would send the token elsewhere than the Host, Port and Login it is signed for. Refused
    whatever the deployment allows otherwise: a token sent elsewhere is a login to the RDS database for
    whoever listens there, for 15 minutes."""
    for key in options:
        name = key.strip().lower()
        if name in IAM_DESTINATION_OPTIONS:
            raise ConfigurationError(
                f"connection {conn_id!r}: iam with {name}= in its extras (connect_options): it "
                f"{IAM_DESTINATION_OPTIONS[name]}. The token is signed for the Host, Port and Login fields "
                "and libpq sends it wherever its options point, so an iam connection may not set these "
                "options; put the RDS or Aurora endpoint in Host and Port"
            )


def rds_iam_token(aws_conn_id: str, host: str, port: int, user: str) -> str:
    """A fresh RDS IAM authentication token (signed locally with the AWS connection's credentials, valid
    for 15 minutes) for ``user`` at ``host:port``."""
    try:
        from airflow.providers.amazon.aws.hooks.base_aws import AwsBaseHook
    except ImportError as missing:
        raise ConfigurationError(
            "an 'iam' PostgreSQL connection needs the Amazon provider (boto3) on the workers and the "
            f"triggerer: pip install 'airflow-provider-sqlqueue[aws]' ({missing})"
        ) from missing
    client = AwsBaseHook(aws_conn_id=aws_conn_id, client_type="rds").conn
    return str(client.generate_db_auth_token(DBHostname=host, Port=port, DBUsername=user))
