-- babelfish: the statements that differ from golden/sqlserver/ci_special_characters.sql
-- (every other statement is the SQL Server one). Review against the reference's statements.
-- SQL Server statements for the queue address my]table@[db@]@[n service.bus&#]
-- resolved parts: {"table": "my]table", "schema": "db@", "catalog": "n service.bus&#"}
-- Golden file: tests/test_sqlserver_golden.py; SQLQUEUE_UPDATE_GOLDEN=1 rewrites it.

-- table_exists
-- params: ["db@", "my]table"]
SELECT t.object_id FROM [n service.bus&#].sys.tables t JOIN [n service.bus&#].sys.schemas s ON s.schema_id = t.schema_id WHERE s.name = ? AND t.name = ?

-- index_exists Index_RowVersion
-- params: ["[n service.bus&#].[db@].[my]]table]", "Index[_]RowVersion%"]
SELECT index_id FROM [n service.bus&#].sys.indexes WHERE object_id = OBJECT_ID(?) AND name LIKE ?

-- index_exists Index_Expires
-- params: ["[n service.bus&#].[db@].[my]]table]", "Index[_]Expires%"]
SELECT index_id FROM [n service.bus&#].sys.indexes WHERE object_id = OBJECT_ID(?) AND name LIKE ?

-- receive_batch
DELETE FROM [n service.bus&#].[db@].[my]]table] OUTPUT deleted.[Id], deleted.[CorrelationId], deleted.[ReplyToAddress], GETUTCDATE() AS [Now], deleted.[Headers], deleted.[Body], deleted.[RowVersion], deleted.[Expires] WHERE [RowVersion] IN (SELECT TOP(?) [RowVersion] FROM [n service.bus&#].[db@].[my]]table] WITH (UPDLOCK, READPAST, ROWLOCK) ORDER BY [RowVersion])

-- move_due_delayed_batch
DELETE FROM [n service.bus&#].[db@].[my]]table] OUTPUT deleted.[Headers], deleted.[Body], deleted.[Due], deleted.[RowVersion] WHERE [RowVersion] IN (SELECT TOP(?) [RowVersion] FROM [n service.bus&#].[db@].[my]]table] WITH (UPDLOCK, READPAST, ROWLOCK) WHERE [Due] <= GETUTCDATE() ORDER BY [Due])
