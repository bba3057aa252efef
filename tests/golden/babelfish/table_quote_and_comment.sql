-- babelfish: the statements that differ from golden/sqlserver/table_quote_and_comment.sql
-- (every other statement is the SQL Server one). Review against the reference's statements.
-- SQL Server statements for the queue address o'rders;-- DROP TABLE x@[dbo]
-- resolved parts: {"table": "o'rders;-- DROP TABLE x", "schema": "dbo", "catalog": null}
-- Golden file: tests/test_sqlserver_golden.py; SQLQUEUE_UPDATE_GOLDEN=1 rewrites it.

-- table_exists
-- params: ["dbo", "o'rders;-- DROP TABLE x"]
SELECT t.object_id FROM sys.tables t JOIN sys.schemas s ON s.schema_id = t.schema_id WHERE s.name = ? AND t.name = ?

-- index_exists Index_RowVersion
-- params: ["[dbo].[o'rders;-- DROP TABLE x]", "Index[_]RowVersion%"]
SELECT index_id FROM sys.indexes WHERE object_id = OBJECT_ID(?) AND name LIKE ?

-- index_exists Index_Expires
-- params: ["[dbo].[o'rders;-- DROP TABLE x]", "Index[_]Expires%"]
SELECT index_id FROM sys.indexes WHERE object_id = OBJECT_ID(?) AND name LIKE ?

-- receive_batch
DELETE FROM [dbo].[o'rders;-- DROP TABLE x] OUTPUT deleted.[Id], deleted.[CorrelationId], deleted.[ReplyToAddress], GETUTCDATE() AS [Now], deleted.[Headers], deleted.[Body], deleted.[RowVersion], deleted.[Expires] WHERE [RowVersion] IN (SELECT TOP(?) [RowVersion] FROM [dbo].[o'rders;-- DROP TABLE x] WITH (UPDLOCK, READPAST, ROWLOCK) ORDER BY [RowVersion])

-- subscribe
-- params: ["Sales@[dbo]@[sqlqueue]", "Sales", "Sales.Events.OrderPlaced", "Sales@[dbo]@[sqlqueue]", "Sales@[dbo]@[sqlqueue]", "Sales.Events.OrderPlaced", "Sales", "Sales", "Sales.Events.OrderPlaced"]
UPDATE [dbo].[o'rders;-- DROP TABLE x] WITH (UPDLOCK, SERIALIZABLE) SET [QueueAddress] = ? WHERE [Endpoint] = ? AND [Topic] = ? AND [QueueAddress] <> ?; INSERT INTO [dbo].[o'rders;-- DROP TABLE x] ([QueueAddress], [Topic], [Endpoint]) SELECT ?, ?, ? WHERE NOT EXISTS (SELECT 1 FROM [dbo].[o'rders;-- DROP TABLE x] WITH (UPDLOCK, SERIALIZABLE) WHERE [Endpoint] = ? AND [Topic] = ?)
