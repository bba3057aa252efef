-- SQL Server statements for the queue address orders@[s@]]x]
-- resolved parts: {"table": "orders", "schema": "s@]x", "catalog": null}
-- Golden file: tests/test_sqlserver_golden.py; SQLQUEUE_UPDATE_GOLDEN=1 rewrites it.

-- create_table unicode_headers=True body_string=False
CREATE TABLE [s@]]x].[orders] (
    [Id] uniqueidentifier NOT NULL,
    [CorrelationId] varchar(255) NULL,
    [ReplyToAddress] varchar(255) NULL,
    [Recoverable] bit NOT NULL,
    [Expires] datetime NULL,
    [Headers] nvarchar(max) NOT NULL,
    [Body] varbinary(max) NULL,
    [RowVersion] bigint IDENTITY(1,1) NOT NULL
)

-- create_table unicode_headers=True body_string=True
CREATE TABLE [s@]]x].[orders] (
    [Id] uniqueidentifier NOT NULL,
    [CorrelationId] varchar(255) NULL,
    [ReplyToAddress] varchar(255) NULL,
    [Recoverable] bit NOT NULL,
    [Expires] datetime NULL,
    [Headers] nvarchar(max) NOT NULL,
    [Body] varbinary(max) NULL,
    [RowVersion] bigint IDENTITY(1,1) NOT NULL,
    [BodyString] AS CAST([Body] AS nvarchar(max))
)

-- create_table unicode_headers=False body_string=False
CREATE TABLE [s@]]x].[orders] (
    [Id] uniqueidentifier NOT NULL,
    [CorrelationId] varchar(255) NULL,
    [ReplyToAddress] varchar(255) NULL,
    [Recoverable] bit NOT NULL,
    [Expires] datetime NULL,
    [Headers] varchar(max) NOT NULL,
    [Body] varbinary(max) NULL,
    [RowVersion] bigint IDENTITY(1,1) NOT NULL
)

-- create_table unicode_headers=False body_string=True
CREATE TABLE [s@]]x].[orders] (
    [Id] uniqueidentifier NOT NULL,
    [CorrelationId] varchar(255) NULL,
    [ReplyToAddress] varchar(255) NULL,
    [Recoverable] bit NOT NULL,
    [Expires] datetime NULL,
    [Headers] varchar(max) NOT NULL,
    [Body] varbinary(max) NULL,
    [RowVersion] bigint IDENTITY(1,1) NOT NULL,
    [BodyString] AS CAST([Body] AS nvarchar(max))
)

-- index Index_RowVersion layout=clustered
CREATE CLUSTERED INDEX [Index_RowVersion] ON [s@]]x].[orders] ([RowVersion] ASC) WITH (ALLOW_ROW_LOCKS = ON, ALLOW_PAGE_LOCKS = ON)

-- index Index_Expires layout=clustered
CREATE NONCLUSTERED INDEX [Index_Expires] ON [s@]]x].[orders] ([Expires] ASC) INCLUDE ([Id], [RowVersion]) WITH (ALLOW_ROW_LOCKS = ON, ALLOW_PAGE_LOCKS = ON)

-- index Index_RowVersion layout=heap
CREATE NONCLUSTERED INDEX [Index_RowVersion] ON [s@]]x].[orders] ([RowVersion] ASC)

-- index Index_Expires layout=heap
CREATE NONCLUSTERED INDEX [Index_Expires] ON [s@]]x].[orders] ([Expires] ASC) INCLUDE ([Id], [RowVersion]) WHERE [Expires] IS NOT NULL

-- add_body_string
ALTER TABLE [s@]]x].[orders] ADD [BodyString] AS CAST([Body] AS nvarchar(max))

-- drop_table
DROP TABLE IF EXISTS [s@]]x].[orders]

-- open_transaction
-- params: none, executed as cursor.execute(sql): a plain batch
DECLARE @opened bit = 0; IF @@TRANCOUNT = 0 BEGIN BEGIN TRANSACTION; SET @opened = 1; END; IF @opened = 1 AND @@TRANCOUNT > 1 COMMIT TRANSACTION

-- lock_for_create
-- params: ["[sqlqueue].[s@]]x].[orders]_lock"]
DECLARE @result int; EXEC @result = sp_getapplock @Resource = ?, @LockMode = 'Exclusive', @LockOwner = 'Transaction', @LockTimeout = 60000; SELECT @result

-- table_exists
-- params: ["[s@]]x].[orders]"]
SELECT OBJECT_ID(?, 'U')

-- index_exists Index_RowVersion
-- params: ["[s@]]x].[orders]", "Index_RowVersion"]
SELECT index_id FROM sys.indexes WHERE object_id = OBJECT_ID(?) AND name = ?

-- index_exists Index_Expires
-- params: ["[s@]]x].[orders]", "Index_Expires"]
SELECT index_id FROM sys.indexes WHERE object_id = OBJECT_ID(?) AND name = ?

-- column_exists BodyString
-- params: ["[s@]]x].[orders]", "BodyString"]
SELECT COL_LENGTH(?, ?)

-- send
INSERT INTO [s@]]x].[orders] ([Id], [CorrelationId], [ReplyToAddress], [Recoverable], [Expires], [Headers], [Body]) VALUES (?, ?, ?, 1, DATEADD(millisecond, ?, DATEADD(second, ?, GETUTCDATE())), ?, ?)

-- send_batch rows=3
INSERT INTO [s@]]x].[orders] ([Id], [CorrelationId], [ReplyToAddress], [Recoverable], [Expires], [Headers], [Body]) VALUES (?, ?, ?, 1, DATEADD(millisecond, ?, DATEADD(second, ?, GETUTCDATE())), ?, ?), (?, ?, ?, 1, DATEADD(millisecond, ?, DATEADD(second, ?, GETUTCDATE())), ?, ?), (?, ?, ?, 1, DATEADD(millisecond, ?, DATEADD(second, ?, GETUTCDATE())), ?, ?)

-- insert_raw
INSERT INTO [s@]]x].[orders] ([Id], [CorrelationId], [ReplyToAddress], [Recoverable], [Expires], [Headers], [Body]) VALUES (?, ?, ?, 1, NULL, ?, ?)

-- send without Recoverable
INSERT INTO [s@]]x].[orders] ([Id], [CorrelationId], [ReplyToAddress], [Expires], [Headers], [Body]) VALUES (?, ?, ?, DATEADD(millisecond, ?, DATEADD(second, ?, GETUTCDATE())), ?, ?)

-- send_batch rows=3 without Recoverable
INSERT INTO [s@]]x].[orders] ([Id], [CorrelationId], [ReplyToAddress], [Expires], [Headers], [Body]) VALUES (?, ?, ?, DATEADD(millisecond, ?, DATEADD(second, ?, GETUTCDATE())), ?, ?), (?, ?, ?, DATEADD(millisecond, ?, DATEADD(second, ?, GETUTCDATE())), ?, ?), (?, ?, ?, DATEADD(millisecond, ?, DATEADD(second, ?, GETUTCDATE())), ?, ?)

-- insert_raw without Recoverable
INSERT INTO [s@]]x].[orders] ([Id], [CorrelationId], [ReplyToAddress], [Expires], [Headers], [Body]) VALUES (?, ?, ?, NULL, ?, ?)

-- receive_batch
WITH message AS (SELECT TOP(?) * FROM [s@]]x].[orders] WITH (UPDLOCK, READPAST, ROWLOCK) ORDER BY [RowVersion]) DELETE FROM message OUTPUT deleted.[Id], deleted.[CorrelationId], deleted.[ReplyToAddress], CASE WHEN deleted.[Expires] IS NULL OR deleted.[Expires] > GETUTCDATE() THEN 0 ELSE 1 END AS [Expired], deleted.[Headers], deleted.[Body], deleted.[RowVersion], deleted.[Expires]

-- peek_estimate
SELECT isnull(cast(max([RowVersion]) - min([RowVersion]) + 1 AS bigint), 0) FROM [s@]]x].[orders] WITH (READPAST, READCOMMITTEDLOCK)

-- peek_bounds
SELECT min([RowVersion]), max([RowVersion]) FROM [s@]]x].[orders] WITH (READPAST, READCOMMITTEDLOCK)

-- count_exact
SELECT count_big(*) FROM [s@]]x].[orders] WITH (READPAST) WHERE [Expires] IS NULL OR [Expires] > GETUTCDATE()

-- browse
SELECT TOP (?) [Id], [CorrelationId], [ReplyToAddress], [Headers], [Body], [RowVersion], [Expires] FROM [s@]]x].[orders] WITH (READPAST, READCOMMITTEDLOCK) WHERE [Expires] IS NULL OR [Expires] > GETUTCDATE() ORDER BY [RowVersion]

-- oldest_headers
SELECT TOP (1) [RowVersion], [Headers] FROM [s@]]x].[orders] WITH (READPAST, READCOMMITTEDLOCK) WHERE [Expires] IS NULL OR [Expires] > GETUTCDATE() ORDER BY [RowVersion]

-- failed_newest
SELECT TOP (?) [RowVersion], [Id], [Headers] FROM [s@]]x].[orders] WITH (READPAST, READCOMMITTEDLOCK) ORDER BY [RowVersion] DESC

-- failed_page
SELECT TOP (?) [RowVersion], [Id], [Headers] FROM [s@]]x].[orders] WITH (READPAST, READCOMMITTEDLOCK) WHERE [RowVersion] > ? ORDER BY [RowVersion]

-- failed_messages
SELECT [Id], [CorrelationId], [ReplyToAddress], [Headers], [Body], [RowVersion], [Expires] FROM [s@]]x].[orders] WITH (READPAST, READCOMMITTEDLOCK) WHERE [Id] = ? ORDER BY [RowVersion]

-- take_failed_row
DELETE FROM [s@]]x].[orders] WITH (ROWLOCK) OUTPUT deleted.[Id], deleted.[CorrelationId], deleted.[ReplyToAddress], deleted.[Headers], deleted.[Body] WHERE [RowVersion] = ?

-- count_expired
SELECT count_big(*) FROM [s@]]x].[orders] WITH (READPAST) WHERE [Expires] <= GETUTCDATE()

-- purge_expired_batch
DELETE FROM [s@]]x].[orders] WHERE [RowVersion] IN (SELECT TOP (?) [RowVersion] FROM [s@]]x].[orders] WITH (READPAST) WHERE [Expires] < GETUTCDATE()); SELECT @@ROWCOUNT

-- create_delayed_table
CREATE TABLE [s@]]x].[orders] (
    [Headers] nvarchar(max) NOT NULL,
    [Body] varbinary(max) NULL,
    [Due] datetime NOT NULL,
    [RowVersion] bigint IDENTITY(1,1) NOT NULL
)

-- delayed_index Index_Due
CREATE NONCLUSTERED INDEX [Index_Due] ON [s@]]x].[orders] ([Due] ASC)

-- store_delayed
INSERT INTO [s@]]x].[orders] ([Headers], [Body], [Due]) VALUES (?, ?, COALESCE(CAST(? AS datetime2), DATEADD(millisecond, ?, DATEADD(second, ?, GETUTCDATE()))))

-- select_due_delayed
SELECT TOP(?) [RowVersion], [Headers] FROM [s@]]x].[orders] WITH (UPDLOCK, READPAST, ROWLOCK) WHERE [Due] <= GETUTCDATE() ORDER BY [Due]

-- move_delayed_rows 3 rows
DELETE FROM [s@]]x].[orders] OUTPUT NEWID(), NULL, NULL, 1, NULL, deleted.[Headers], deleted.[Body] INTO [dbo].[Billing.Input] ([Id], [CorrelationId], [ReplyToAddress], [Recoverable], [Expires], [Headers], [Body]) WHERE [RowVersion] IN (?, ?, ?)

-- move_delayed_rows 3 rows without Recoverable
DELETE FROM [s@]]x].[orders] OUTPUT NEWID(), NULL, NULL, NULL, deleted.[Headers], deleted.[Body] INTO [dbo].[Billing.Input] ([Id], [CorrelationId], [ReplyToAddress], [Expires], [Headers], [Body]) WHERE [RowVersion] IN (?, ?, ?)

-- select_delayed_rows 3
SELECT [Headers], [Body], [RowVersion] FROM [s@]]x].[orders] WHERE [RowVersion] IN (?, ?, ?)

-- delete_delayed_rows 3
DELETE FROM [s@]]x].[orders] WHERE [RowVersion] IN (?, ?, ?)

-- next_due_delayed
SELECT GETUTCDATE(), min([Due]) FROM [s@]]x].[orders] WITH (READPAST)

-- count_delayed
SELECT count_big(*) FROM [s@]]x].[orders] WITH (READPAST)

-- try_lock_delayed_mover
-- params: ["[s@]]x].[orders]_mover"]
DECLARE @result int; EXEC @result = sp_getapplock @Resource = ?, @LockMode = 'Exclusive', @LockOwner = 'Session', @LockTimeout = 0; SELECT @result

-- unlock_delayed_mover
-- params: ["[s@]]x].[orders]_mover"]
EXEC sp_releaseapplock @Resource = ?, @LockOwner = 'Session'

-- create_archive_table
CREATE TABLE [s@]]x].[orders] (
    [Id] uniqueidentifier NOT NULL,
    [CorrelationId] varchar(255) NULL,
    [ReplyToAddress] varchar(255) NULL,
    [Recoverable] bit NULL,
    [Expires] datetime NULL,
    [Headers] nvarchar(max) NOT NULL,
    [Body] varbinary(max) NULL,
    [ErrorRowVersion] bigint NOT NULL,
    [ArchivedAt] datetime NOT NULL DEFAULT GETUTCDATE()
)

-- archive_index Index_ArchivedAt
CREATE NONCLUSTERED INDEX [Index_ArchivedAt] ON [s@]]x].[orders] ([ArchivedAt] ASC)

-- archive_failed_row
DELETE FROM [s@]]x].[orders] OUTPUT deleted.[Id], deleted.[CorrelationId], deleted.[ReplyToAddress], deleted.[Recoverable], deleted.[Expires], deleted.[Headers], deleted.[Body], deleted.[RowVersion] INTO [dbo].[error_archive] ([Id], [CorrelationId], [ReplyToAddress], [Recoverable], [Expires], [Headers], [Body], [ErrorRowVersion]) WHERE [RowVersion] = ?; SELECT @@ROWCOUNT

-- archive_failed_row without Recoverable
DELETE FROM [s@]]x].[orders] OUTPUT deleted.[Id], deleted.[CorrelationId], deleted.[ReplyToAddress], NULL, deleted.[Expires], deleted.[Headers], deleted.[Body], deleted.[RowVersion] INTO [dbo].[error_archive] ([Id], [CorrelationId], [ReplyToAddress], [Recoverable], [Expires], [Headers], [Body], [ErrorRowVersion]) WHERE [RowVersion] = ?; SELECT @@ROWCOUNT

-- restore_archived
DELETE FROM [s@]]x].[orders] OUTPUT deleted.[Id], deleted.[CorrelationId], deleted.[ReplyToAddress], deleted.[Recoverable], deleted.[Expires], deleted.[Headers], deleted.[Body] INTO [dbo].[error] ([Id], [CorrelationId], [ReplyToAddress], [Recoverable], [Expires], [Headers], [Body]) WHERE [Id] = ?; SELECT @@ROWCOUNT

-- restore_archived without Recoverable
DELETE FROM [s@]]x].[orders] OUTPUT deleted.[Id], deleted.[CorrelationId], deleted.[ReplyToAddress], deleted.[Expires], deleted.[Headers], deleted.[Body] INTO [dbo].[error] ([Id], [CorrelationId], [ReplyToAddress], [Expires], [Headers], [Body]) WHERE [Id] = ?; SELECT @@ROWCOUNT

-- browse_archive
-- params: [100, 51]
SELECT [Id], [CorrelationId], [ReplyToAddress], [Headers], DATALENGTH([Body]), [ErrorRowVersion], [ArchivedAt], [Expires] FROM [s@]]x].[orders] WITH (READPAST, READCOMMITTEDLOCK) ORDER BY [ArchivedAt] DESC, [ErrorRowVersion] DESC, [Id] DESC OFFSET ? ROWS FETCH NEXT ? ROWS ONLY

-- purge_archive_batch
-- params: [-2592000, 10000, -2592000]
DELETE FROM [s@]]x].[orders] WHERE [ArchivedAt] < DATEADD(second, ?, GETUTCDATE()) AND [ErrorRowVersion] IN (SELECT TOP (?) [ErrorRowVersion] FROM [s@]]x].[orders] WHERE [ArchivedAt] < DATEADD(second, ?, GETUTCDATE()) ORDER BY [ArchivedAt]); SELECT @@ROWCOUNT

-- count_archive
SELECT count_big(*) FROM [s@]]x].[orders]

-- create_depth_samples_table
CREATE TABLE [s@]]x].[orders] (
    [QueueName] nvarchar(128) NOT NULL,
    [SampledMinute] bigint NOT NULL,
    [Messages] bigint NOT NULL,
    [MessagesExact] bit NOT NULL,
    [Failed] bigint NULL,
    PRIMARY KEY ([QueueName], [SampledMinute])
)

-- record_depth_sample
-- params: ["orders", 29666666, 1250, false, 3, "orders", 29666666]
INSERT INTO [s@]]x].[orders] ([QueueName], [SampledMinute], [Messages], [MessagesExact], [Failed]) SELECT ?, ?, ?, ?, ? WHERE NOT EXISTS (SELECT 1 FROM [s@]]x].[orders] WITH (UPDLOCK, HOLDLOCK) WHERE [QueueName] = ? AND [SampledMinute] = ?); SELECT @@ROWCOUNT

-- purge_depth_samples
-- params: [29665226]
DELETE FROM [s@]]x].[orders] WHERE [SampledMinute] < ?; SELECT @@ROWCOUNT

-- read_depth_samples
-- params: [29666486]
SELECT [QueueName], [SampledMinute], [Messages], [MessagesExact], [Failed] FROM [s@]]x].[orders] WHERE [SampledMinute] >= ? ORDER BY [QueueName], [SampledMinute]

-- create_subscription_table
CREATE TABLE [s@]]x].[orders] (
    [QueueAddress] nvarchar(200) NOT NULL,
    [Endpoint] nvarchar(200) NOT NULL,
    [Topic] nvarchar(200) NOT NULL,
    PRIMARY KEY ([Endpoint], [Topic])
)

-- subscribe
-- params: ["Sales", "Sales.Events.OrderPlaced", "Sales@[dbo]@[sqlqueue]"]
MERGE [s@]]x].[orders] WITH (HOLDLOCK, TABLOCK) AS target USING (SELECT ? AS [Endpoint], ? AS [Topic], ? AS [QueueAddress]) AS source ON target.[Endpoint] = source.[Endpoint] AND target.[Topic] = source.[Topic] WHEN MATCHED AND target.[QueueAddress] <> source.[QueueAddress] THEN UPDATE SET [QueueAddress] = source.[QueueAddress] WHEN NOT MATCHED THEN INSERT ([QueueAddress], [Topic], [Endpoint]) VALUES (source.[QueueAddress], source.[Topic], source.[Endpoint]);

-- unsubscribe
-- params: ["Sales", "Sales.Events.OrderPlaced"]
DELETE FROM [s@]]x].[orders] WHERE [Endpoint] = ? AND [Topic] = ?; SELECT @@ROWCOUNT

-- select_subscribers 1 topic
SELECT DISTINCT [QueueAddress] FROM [s@]]x].[orders] WHERE [Topic] IN (?)

-- select_subscribers 3 topics
SELECT DISTINCT [QueueAddress] FROM [s@]]x].[orders] WHERE [Topic] IN (?, ?, ?)

-- select_subscriptions by_topic=False by_endpoint=False
-- params: []
SELECT [QueueAddress], [Endpoint], [Topic] FROM [s@]]x].[orders] ORDER BY [Topic], [Endpoint]

-- select_subscriptions by_topic=False by_endpoint=False limited
-- params: [50]
SELECT TOP (?) [QueueAddress], [Endpoint], [Topic] FROM [s@]]x].[orders] ORDER BY [Topic], [Endpoint]

-- select_subscriptions by_topic=True by_endpoint=False
-- params: ["Sales.Events.OrderPlaced"]
SELECT [QueueAddress], [Endpoint], [Topic] FROM [s@]]x].[orders] WHERE [Topic] = ? ORDER BY [Topic], [Endpoint]

-- select_subscriptions by_topic=True by_endpoint=False limited
-- params: [50, "Sales.Events.OrderPlaced"]
SELECT TOP (?) [QueueAddress], [Endpoint], [Topic] FROM [s@]]x].[orders] WHERE [Topic] = ? ORDER BY [Topic], [Endpoint]

-- select_subscriptions by_topic=False by_endpoint=True
-- params: ["Sales"]
SELECT [QueueAddress], [Endpoint], [Topic] FROM [s@]]x].[orders] WHERE [Endpoint] = ? ORDER BY [Topic], [Endpoint]

-- select_subscriptions by_topic=False by_endpoint=True limited
-- params: [50, "Sales"]
SELECT TOP (?) [QueueAddress], [Endpoint], [Topic] FROM [s@]]x].[orders] WHERE [Endpoint] = ? ORDER BY [Topic], [Endpoint]

-- select_subscriptions by_topic=True by_endpoint=True
-- params: ["Sales.Events.OrderPlaced", "Sales"]
SELECT [QueueAddress], [Endpoint], [Topic] FROM [s@]]x].[orders] WHERE [Topic] = ? AND [Endpoint] = ? ORDER BY [Topic], [Endpoint]

-- select_subscriptions by_topic=True by_endpoint=True limited
-- params: [50, "Sales.Events.OrderPlaced", "Sales"]
SELECT TOP (?) [QueueAddress], [Endpoint], [Topic] FROM [s@]]x].[orders] WHERE [Topic] = ? AND [Endpoint] = ? ORDER BY [Topic], [Endpoint]

-- index_first_columns
-- params: ["[s@]]x].[orders]"]
SELECT c.name, i.type FROM sys.indexes i JOIN sys.index_columns ic ON ic.object_id = i.object_id AND ic.index_id = i.index_id AND ic.key_ordinal = 1 JOIN sys.columns c ON c.object_id = ic.object_id AND c.column_id = ic.column_id WHERE i.object_id = OBJECT_ID(?)

-- headers_column_type
-- params: ["[s@]]x].[orders]"]
SELECT t.name FROM sys.columns c JOIN sys.types t ON t.user_type_id = c.user_type_id WHERE c.object_id = OBJECT_ID(?) AND c.name = 'Headers'

-- inspect fix varchar_headers
ALTER TABLE [s@]]x].[orders] ALTER COLUMN [Headers] nvarchar(max) NOT NULL

-- inspect fix clustered_rowversion_index
DROP INDEX [Index_RowVersion] ON [s@]]x].[orders]; CREATE NONCLUSTERED INDEX [Index_RowVersion] ON [s@]]x].[orders] ([RowVersion] ASC); DROP INDEX [Index_Expires] ON [s@]]x].[orders]; CREATE NONCLUSTERED INDEX [Index_Expires] ON [s@]]x].[orders] ([Expires] ASC) INCLUDE ([Id], [RowVersion]) WHERE [Expires] IS NOT NULL
