-- The Spark bridge's statements on sqlserver, beside the queue orders@[s@]]x]
-- (control tables prefixed 'orders'; the queue is also the sink).
-- Golden file: tests/test_tsql_static.py; SQLQUEUE_UPDATE_GOLDEN=1 rewrites it.

-- create_statements runs
IF OBJECT_ID(N'[s@]]x].[orders_runs]', N'U') IS NULL CREATE TABLE [s@]]x].[orders_runs] (RunId nvarchar(200) NOT NULL PRIMARY KEY, InputQueue nvarchar(450) NOT NULL, Sink nvarchar(max) NOT NULL, State varchar(20) NOT NULL, JobAttempt int NOT NULL, StartedAt datetime2 NOT NULL, HeartbeatAt datetime2 NOT NULL, FinishedAt datetime2 NULL, Summary nvarchar(max) NULL)

-- create_statements staging
IF OBJECT_ID(N'[s@]]x].[orders_staging]', N'U') IS NULL CREATE TABLE [s@]]x].[orders_staging] (RunId nvarchar(200) NOT NULL, RowVersion bigint NOT NULL, Id uniqueidentifier NOT NULL, CorrelationId varchar(255) NULL, ReplyToAddress varchar(255) NULL, Expires datetime NULL, Headers nvarchar(max) NOT NULL, Body varbinary(max) NULL, JobAttempt int NOT NULL, Part int NOT NULL, PRIMARY KEY (RunId, RowVersion))

-- create_statements fill
IF OBJECT_ID(N'[s@]]x].[orders_fill]', N'U') IS NULL CREATE TABLE [s@]]x].[orders_fill] (RunId nvarchar(200) NOT NULL, Part int NOT NULL, Batch int NOT NULL, Messages int NOT NULL, PRIMARY KEY (RunId, Part, Batch))

-- get_run
SELECT State, JobAttempt, InputQueue, Summary FROM [s@]]x].[orders_runs] WHERE RunId = ?

-- insert_run
INSERT INTO [s@]]x].[orders_runs] (RunId, InputQueue, Sink, State, JobAttempt, StartedAt, HeartbeatAt) VALUES (?, ?, ?, 'receiving', 1, SYSUTCDATETIME(), SYSUTCDATETIME())

-- restart_run
UPDATE [s@]]x].[orders_runs] SET JobAttempt = JobAttempt + 1, HeartbeatAt = SYSUTCDATETIME(), Sink = ?, State = CASE WHEN State = 'aborted' THEN 'receiving' ELSE State END, FinishedAt = NULL, Summary = NULL WHERE RunId = ? AND State <> 'committed'

-- set_state from receiving, processing (counted)
UPDATE [s@]]x].[orders_runs] SET State = ?, HeartbeatAt = SYSUTCDATETIME() WHERE RunId = ? AND State IN ('receiving', 'processing'); SELECT @@ROWCOUNT

-- set_state from receiving (counted)
UPDATE [s@]]x].[orders_runs] SET State = ?, HeartbeatAt = SYSUTCDATETIME() WHERE RunId = ? AND State IN ('receiving'); SELECT @@ROWCOUNT

-- set_state from processing (counted)
UPDATE [s@]]x].[orders_runs] SET State = ?, HeartbeatAt = SYSUTCDATETIME() WHERE RunId = ? AND State IN ('processing'); SELECT @@ROWCOUNT

-- set_state_if_stale (counted)
UPDATE [s@]]x].[orders_runs] SET State = ?, HeartbeatAt = SYSUTCDATETIME() WHERE RunId = ? AND State IN ('receiving', 'processing') AND HeartbeatAt < DATEADD(second, -?, SYSUTCDATETIME()); SELECT @@ROWCOUNT

-- heartbeat
UPDATE [s@]]x].[orders_runs] SET HeartbeatAt = SYSUTCDATETIME() WHERE RunId = ? AND State IN ('receiving', 'processing')

-- finish_run (counted)
UPDATE [s@]]x].[orders_runs] SET State = 'committed', FinishedAt = SYSUTCDATETIME(), Summary = ? WHERE RunId = ? AND State = 'processing'; SELECT @@ROWCOUNT

-- set_summary
UPDATE [s@]]x].[orders_runs] SET FinishedAt = SYSUTCDATETIME(), Summary = ? WHERE RunId = ?

-- insert_stream
INSERT INTO [s@]]x].[orders_runs] (RunId, InputQueue, Sink, State, JobAttempt, StartedAt, HeartbeatAt, Summary) VALUES (?, ?, ?, 'streaming', 1, SYSUTCDATETIME(), SYSUTCDATETIME(), ?)

-- set_summary_if (counted)
UPDATE [s@]]x].[orders_runs] SET Summary = ?, HeartbeatAt = SYSUTCDATETIME() WHERE RunId = ? AND Summary = ?; SELECT @@ROWCOUNT

-- delete_staged_through
DELETE FROM [s@]]x].[orders_staging] WHERE RunId = ? AND RowVersion <= ?

-- run_state_shared
SELECT State FROM [s@]]x].[orders_runs] WITH (HOLDLOCK, ROWLOCK) WHERE RunId = ?

-- run_state_shared takeover
SELECT Summary FROM [s@]]x].[orders_runs] WITH (UPDLOCK, HOLDLOCK, ROWLOCK) WHERE RunId = ?

-- orphans
SELECT RunId FROM [s@]]x].[orders_runs] WHERE InputQueue = ? AND RunId <> ? AND State IN ('receiving', 'processing') AND HeartbeatAt < DATEADD(second, -?, SYSUTCDATETIME())

-- stage_rows rows=1
INSERT INTO [s@]]x].[orders_staging] (RunId, RowVersion, Id, CorrelationId, ReplyToAddress, Expires, Headers, Body, JobAttempt, Part) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)

-- stage_rows rows=3
INSERT INTO [s@]]x].[orders_staging] (RunId, RowVersion, Id, CorrelationId, ReplyToAddress, Expires, Headers, Body, JobAttempt, Part) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?), (?, ?, ?, ?, ?, ?, ?, ?, ?, ?), (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)

-- count_part
SELECT count(*) FROM [s@]]x].[orders_staging] WHERE RunId = ? AND JobAttempt = ? AND Part = ?

-- staged_stats
SELECT count(*), min(RowVersion), max(RowVersion) FROM [s@]]x].[orders_staging] WHERE RunId = ?

-- staged_slice
SELECT RowVersion, Id, Headers, Body, Expires FROM [s@]]x].[orders_staging] WHERE RunId = ? AND RowVersion >= ? AND RowVersion < ? ORDER BY RowVersion

-- delete_staging
DELETE FROM [s@]]x].[orders_staging] WHERE RunId = ?

-- restore
INSERT INTO [s@]]x].[orders] (Id, CorrelationId, ReplyToAddress, Recoverable, Expires, Headers, Body) SELECT Id, CorrelationId, ReplyToAddress, 1, Expires, Headers, Body FROM [s@]]x].[orders_staging] WHERE RunId = ? ORDER BY RowVersion

-- fill_batches_done
SELECT Batch FROM [s@]]x].[orders_fill] WHERE RunId = ? AND Part = ?

-- insert_fill_marker
INSERT INTO [s@]]x].[orders_fill] (RunId, Part, Batch, Messages) VALUES (?, ?, ?, ?)

-- fill_totals
SELECT count(*), COALESCE(sum(Messages), 0) FROM [s@]]x].[orders_fill] WHERE RunId = ?

-- insert_rows rows=2
INSERT INTO [s@]]x].[orders] ([message_id], [total ]]cost'], [count], [n], [s], [d], [f], [ok], [at], [day], [raw], [doc]) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?), (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)

-- table_columns
SELECT * FROM [s@]]x].[orders] WHERE 1 = 0

-- run_sink
SELECT Sink FROM [s@]]x].[orders_runs] WHERE RunId = ?

-- touch_run (counted)
UPDATE [s@]]x].[orders_runs] SET HeartbeatAt = SYSUTCDATETIME() WHERE RunId = ? AND State IN ('streaming'); SELECT @@ROWCOUNT

-- staged_runs_listing
SELECT r.RunId, r.InputQueue, r.Sink, r.State, s.Staged, s.Low, s.High, DATEDIFF(second, r.StartedAt, SYSUTCDATETIME()), DATEDIFF(second, r.HeartbeatAt, SYSUTCDATETIME()) FROM [s@]]x].[orders_runs] r JOIN (SELECT RunId, count(*) AS Staged, min(RowVersion) AS Low, max(RowVersion) AS High FROM [s@]]x].[orders_staging] GROUP BY RunId) s ON s.RunId = r.RunId WHERE r.InputQueue = ? ORDER BY r.StartedAt, r.RunId

-- staged_runs_listing of every queue
SELECT r.RunId, r.InputQueue, r.Sink, r.State, s.Staged, s.Low, s.High, DATEDIFF(second, r.StartedAt, SYSUTCDATETIME()), DATEDIFF(second, r.HeartbeatAt, SYSUTCDATETIME()) FROM [s@]]x].[orders_runs] r JOIN (SELECT RunId, count(*) AS Staged, min(RowVersion) AS Low, max(RowVersion) AS High FROM [s@]]x].[orders_staging] GROUP BY RunId) s ON s.RunId = r.RunId ORDER BY r.StartedAt, r.RunId

-- sink_table_ddl
IF OBJECT_ID(N'[s@]]x].[orders]', N'U') IS NULL CREATE TABLE [s@]]x].[orders] ([message_id] nvarchar(max) NOT NULL, [total ]]cost'] numeric(12,2) NULL, [count] bigint NULL, [n] int NULL, [s] smallint NULL, [d] float NULL, [f] real NULL, [ok] bit NULL, [at] datetime2 NULL, [day] date NULL, [raw] varbinary(max) NULL, [doc] nvarchar(max) NULL)
