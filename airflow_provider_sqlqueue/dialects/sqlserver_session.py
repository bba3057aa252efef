"""SQL Server: what a pooled connection's session is brought back to after a handler had it.

There is no ``sp_reset_connection`` to call over ODBC (it travels as a flag of the TDS protocol that the
drivers set for their own connection pooling, and pyodbc has no call for it), so the transport restores, in
one batch, each ``SET`` option its statements rely on. Babelfish accepts every one of them.
"""

from __future__ import annotations

# What a returned connection's session is brought back to (Dialect.reset_session), each SET the transport
# relies on: READ COMMITTED (receivers' READPAST is refused under SNAPSHOT and READ UNCOMMITTED, and Babelfish
# runs SNAPSHOT as repeatable read), waiting for locks without limit (LOCK_TIMEOUT -1, the server's default:
# Babelfish's receivers wait for each other), a failed statement that leaves its transaction for the
# transport to end (XACT_ABORT OFF, the drivers' default), no row counts (NOCOUNT ON, as prepare_connection
# sets), the normal deadlock priority, and the options SQL Server requires for writing a table with a
# filtered index, as the queue tables' Expires index is. The isolation level comes first: Babelfish
# refuses to change it after a statement of the transaction has run. IMPLICIT_TRANSACTIONS is left alone:
# FreeTDS runs pyodbc's manual commit with it (SET IMPLICIT_TRANSACTIONS ON), Driver 18 does not.
RESET_SESSION = (
    "SET TRANSACTION ISOLATION LEVEL READ COMMITTED; SET LOCK_TIMEOUT -1; SET XACT_ABORT OFF; "
    "SET NOCOUNT ON; SET DEADLOCK_PRIORITY NORMAL; SET ANSI_NULLS ON; SET ANSI_PADDING ON; "
    "SET ANSI_WARNINGS ON; SET CONCAT_NULL_YIELDS_NULL ON; SET QUOTED_IDENTIFIER ON; "
    "SET NUMERIC_ROUNDABORT OFF"
)
