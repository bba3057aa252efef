-- babelfish: the statements that differ from golden/sqlserver/everything_at_once.sql
-- (every other statement is the SQL Server one). Review against the reference's statements.
-- SQL Server statements for the queue address x [y]] 'z';--@[s@]]x]@[c]]@[]
-- resolved parts: {"table": "x [y]] 'z';--", "schema": "s@]x", "catalog": "c]@["}
-- Golden file: tests/test_sqlserver_golden.py; SQLQUEUE_UPDATE_GOLDEN=1 rewrites it.

-- table_exists
-- params: ["s@]x", "x [y]] 'z';--"]
SELECT t.object_id FROM [c]]@[].sys.tables t JOIN [c]]@[].sys.schemas s ON s.schema_id = t.schema_id WHERE s.name = ? AND t.name = ?

-- index_exists Index_RowVersion
-- params: ["[c]]@[].[s@]]x].[x [y]]]] 'z';--]", "Index[_]RowVersion%"]
SELECT index_id FROM [c]]@[].sys.indexes WHERE object_id = OBJECT_ID(?) AND name LIKE ?

-- index_exists Index_Expires
-- params: ["[c]]@[].[s@]]x].[x [y]]]] 'z';--]", "Index[_]Expires%"]
SELECT index_id FROM [c]]@[].sys.indexes WHERE object_id = OBJECT_ID(?) AND name LIKE ?

-- receive_batch
DELETE FROM [c]]@[].[s@]]x].[x [y]]]] 'z';--] OUTPUT deleted.[Id], deleted.[CorrelationId], deleted.[ReplyToAddress], GETUTCDATE() AS [Now], deleted.[Headers], deleted.[Body], deleted.[RowVersion], deleted.[Expires] WHERE [RowVersion] IN (SELECT TOP(?) [RowVersion] FROM [c]]@[].[s@]]x].[x [y]]]] 'z';--] WITH (UPDLOCK, READPAST, ROWLOCK) ORDER BY [RowVersion])

-- move_due_delayed_batch
DELETE FROM [c]]@[].[s@]]x].[x [y]]]] 'z';--] OUTPUT deleted.[Headers], deleted.[Body], deleted.[Due], deleted.[RowVersion] WHERE [RowVersion] IN (SELECT TOP(?) [RowVersion] FROM [c]]@[].[s@]]x].[x [y]]]] 'z';--] WITH (UPDLOCK, READPAST, ROWLOCK) WHERE [Due] <= GETUTCDATE() ORDER BY [Due])
