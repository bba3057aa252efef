-- babelfish: the statements that differ from golden/sqlserver/schema_at_and_bracket.sql
-- (every other statement is the SQL Server one). Review against the reference's statements.
-- SQL Server statements for the queue address orders@[s@]]x]
-- resolved parts: {"table": "orders", "schema": "s@]x", "catalog": null}
-- Golden file: tests/test_sqlserver_golden.py; SQLQUEUE_UPDATE_GOLDEN=1 rewrites it.

-- table_exists
-- params: ["s@]x", "orders"]
SELECT t.object_id FROM sys.tables t JOIN sys.schemas s ON s.schema_id = t.schema_id WHERE s.name = ? AND t.name = ?

-- index_exists Index_RowVersion
-- params: ["[s@]]x].[orders]", "Index[_]RowVersion%"]
SELECT index_id FROM sys.indexes WHERE object_id = OBJECT_ID(?) AND name LIKE ?

-- index_exists Index_Expires
-- params: ["[s@]]x].[orders]", "Index[_]Expires%"]
SELECT index_id FROM sys.indexes WHERE object_id = OBJECT_ID(?) AND name LIKE ?

-- receive_batch
DELETE FROM [s@]]x].[orders] OUTPUT deleted.[Id], deleted.[CorrelationId], deleted.[ReplyToAddress], GETUTCDATE() AS [Now], deleted.[Headers], deleted.[Body], deleted.[RowVersion], deleted.[Expires] WHERE [RowVersion] IN (SELECT TOP(?) [RowVersion] FROM [s@]]x].[orders] WITH (UPDLOCK, READPAST, ROWLOCK) ORDER BY [RowVersion])

-- move_due_delayed_batch
DELETE FROM [s@]]x].[orders] OUTPUT deleted.[Headers], deleted.[Body], deleted.[Due], deleted.[RowVersion] WHERE [RowVersion] IN (SELECT TOP(?) [RowVersion] FROM [s@]]x].[orders] WITH (UPDLOCK, READPAST, ROWLOCK) WHERE [Due] <= GETUTCDATE() ORDER BY [Due])
