-- babelfish: the statements that differ from golden/sqlserver/table_spaces_and_dots.sql
-- (every other statement is the SQL Server one). Review against the reference's statements.
-- SQL Server statements for the queue address order queue. v2@[dbo]
-- resolved parts: {"table": "order queue. v2", "schema": "dbo", "catalog": null}
-- Golden file: tests/test_sqlserver_golden.py; SQLQUEUE_UPDATE_GOLDEN=1 rewrites it.

-- table_exists
-- params: ["dbo", "order queue. v2"]
SELECT t.object_id FROM sys.tables t JOIN sys.schemas s ON s.schema_id = t.schema_id WHERE s.name = ? AND t.name = ?

-- index_exists Index_RowVersion
-- params: ["[dbo].[order queue. v2]", "Index[_]RowVersion%"]
SELECT index_id FROM sys.indexes WHERE object_id = OBJECT_ID(?) AND name LIKE ?

-- index_exists Index_Expires
-- params: ["[dbo].[order queue. v2]", "Index[_]Expires%"]
SELECT index_id FROM sys.indexes WHERE object_id = OBJECT_ID(?) AND name LIKE ?

-- receive_batch
DELETE FROM [dbo].[order queue. v2] OUTPUT deleted.[Id], deleted.[CorrelationId], deleted.[ReplyToAddress], GETUTCDATE() AS [Now], deleted.[Headers], deleted.[Body], deleted.[RowVersion], deleted.[Expires] WHERE [RowVersion] IN (SELECT TOP(?) [RowVersion] FROM [dbo].[order queue. v2] WITH (UPDLOCK, READPAST, ROWLOCK) ORDER BY [RowVersion])

-- subscribe
-- params: ["Sales@[dbo]@[sqlqueue]", "Sales", "Sales.Events.OrderPlaced", "Sales@[dbo]@[sqlqueue]", "Sales@[dbo]@[sqlqueue]", "Sales.Events.OrderPlaced", "Sales", "Sales", "Sales.Events.OrderPlaced"]
UPDATE [dbo].[order queue. v2] WITH (UPDLOCK, SERIALIZABLE) SET [QueueAddress] = ? WHERE [Endpoint] = ? AND [Topic] = ? AND [QueueAddress] <> ?; INSERT INTO [dbo].[order queue. v2] ([QueueAddress], [Topic], [Endpoint]) SELECT ?, ?, ? WHERE NOT EXISTS (SELECT 1 FROM [dbo].[order queue. v2] WITH (UPDLOCK, SERIALIZABLE) WHERE [Endpoint] = ? AND [Topic] = ?)
