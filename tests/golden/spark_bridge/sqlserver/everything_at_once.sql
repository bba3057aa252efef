-- The Spark bridge's statements on sqlserver, beside the queue x [y]] 'z';--@[s@]]x]@[c]]@[]
-- (control tables prefixed "x [y]] 'z';--"; the queue is also the sink).
-- Golden file: tests/test_tsql_static.py; SQLQUEUE_UPDATE_GOLDEN=1 rewrites it.

-- create_statements runs
IF OBJECT_ID(N'[c]]@[].[s@]]x].[x [y]]]] ''z'';--_runs]', N'U') IS NULL CREATE TABLE [c]]@[].[s@]]x].[x [y]]]] 'z';--_runs] (RunId nvarchar(200) NOT NULL PRIMARY KEY, InputQueue nvarchar(450) NOT NULL, Sink nvarchar(max) NOT NULL, State varchar(20) NOT NULL, JobAttempt int NOT NULL, StartedAt datetime2 NOT NULL, HeartbeatAt datetime2 NOT NULL, FinishedAt datetime2 NULL, Summary nvarchar(max) NULL)

-- create_statements staging
IF OBJECT_ID(N'[c]]@[].[s@]]x].[x [y]]]] ''z'';--_staging]', N'U') IS NULL CREATE TABLE [c]]@[].[s@]]x].[x [y]]]] 'z';--_staging] (RunId nvarchar(200) NOT NULL, RowVersion bigint NOT NULL, Id uniqueidentifier NOT NULL, CorrelationId varchar(255) NULL, ReplyToAddress varchar(255) NULL, Expires datetime NULL, Headers nvarchar(max) NOT NULL, Body varbinary(max) NULL, JobAttempt int NOT NULL, Part int NOT NULL, PRIMARY KEY (RunId, RowVersion))

-- create_statements fill
IF OBJECT_ID(N'[c]]@[].[s@]]x].[x [y]]]] ''z'';--_fill]', N'U') IS NULL CREATE TABLE [c]]@[].[s@]]x].[x [y]]]] 'z';--_fill] (RunId nvarchar(200) NOT NULL, Part int NOT NULL, Batch int NOT NULL, Messages int NOT NULL, PRIMARY KEY (RunId, Part, Batch))

-- get_run
SELECT State, JobAttempt, InputQueue, Summary FROM [c]]@[].[s@]]x].[x [y]]]] 'z';--_runs] WHERE RunId = ?

-- insert_run
INSERT INTO [c]]@[].[s@]]x].[x [y]]]] 'z';--_runs] (RunId, InputQueue, Sink, State, JobAttempt, StartedAt, HeartbeatAt) VALUES (?, ?, ?, 'receiving', 1, SYSUTCDATETIME(), SYSUTCDATETIME())

-- restart_run
UPDATE [c]]@[].[s@]]x].[x [y]]]] 'z';--_runs] SET JobAttempt = JobAttempt + 1, HeartbeatAt = SYSUTCDATETIME(), Sink = ?, State = CASE WHEN State = 'aborted' THEN 'receiving' ELSE State END, FinishedAt = NULL, Summary = NULL WHERE RunId = ? AND State <> 'committed'

-- set_state from receiving, processing (counted)
UPDATE [c]]@[].[s@]]x].[x [y]]]] 'z';--_runs] SET State = ?, HeartbeatAt = SYSUTCDATETIME() WHERE RunId = ? AND State IN ('receiving', 'processing'); SELECT @@ROWCOUNT

-- set_state from receiving (counted)
UPDATE [c]]@[].[s@]]x].[x [y]]]] 'z';--_runs] SET State = ?, HeartbeatAt = SYSUTCDATETIME() WHERE RunId = ? AND State IN ('receiving'); SELECT @@ROWCOUNT

-- set_state from processing (counted)
UPDATE [c]]@[].[s@]]x].[x [y]]]] 'z';--_runs] SET State = ?, HeartbeatAt = SYSUTCDATETIME() WHERE RunId = ? AND State IN ('processing'); SELECT @@ROWCOUNT

-- set_state_if_stale (counted)
UPDATE [c]]@[].[s@]]x].[x [y]]]] 'z';--_runs] SET State = ?, HeartbeatAt = SYSUTCDATETIME() WHERE RunId = ? AND State IN ('receiving', 'processing') AND HeartbeatAt < DATEADD(second, -?, SYSUTCDATETIME()); SELECT @@ROWCOUNT

-- heartbeat
UPDATE [c]]@[].[s@]]x].[x [y]]]] 'z';--_runs] SET HeartbeatAt = SYSUTCDATETIME() WHERE RunId = ? AND State IN ('receiving', 'processing')

-- finish_run (counted)
UPDATE [c]]@[].[s@]]x].[x [y]]]] 'z';--_runs] SET State = 'committed', FinishedAt = SYSUTCDATETIME(), Summary = ? WHERE RunId = ? AND State = 'processing'; SELECT @@ROWCOUNT

-- set_summary
UPDATE [c]]@[].[s@]]x].[x [y]]]] 'z';--_runs] SET FinishedAt = SYSUTCDATETIME(), Summary = ? WHERE RunId = ?

-- insert_stream
INSERT INTO [c]]@[].[s@]]x].[x [y]]]] 'z';--_runs] (RunId, InputQueue, Sink, State, JobAttempt, StartedAt, HeartbeatAt, Summary) VALUES (?, ?, ?, 'streaming', 1, SYSUTCDATETIME(), SYSUTCDATETIME(), ?)

-- set_summary_if (counted)
UPDATE [c]]@[].[s@]]x].[x [y]]]] 'z';--_runs] SET Summary = ?, HeartbeatAt = SYSUTCDATETIME() WHERE RunId = ? AND Summary = ?; SELECT @@ROWCOUNT

-- delete_staged_through
DELETE FROM [c]]@[].[s@]]x].[x [y]]]] 'z';--_staging] WHERE RunId = ? AND RowVersion <= ?

-- run_state_shared
SELECT State FROM [c]]@[].[s@]]x].[x [y]]]] 'z';--_runs] WITH (HOLDLOCK, ROWLOCK) WHERE RunId = ?

-- run_state_shared takeover
SELECT Summary FROM [c]]@[].[s@]]x].[x [y]]]] 'z';--_runs] WITH (UPDLOCK, HOLDLOCK, ROWLOCK) WHERE RunId = ?

-- orphans
SELECT RunId FROM [c]]@[].[s@]]x].[x [y]]]] 'z';--_runs] WHERE InputQueue = ? AND RunId <> ? AND State IN ('receiving', 'processing') AND HeartbeatAt < DATEADD(second, -?, SYSUTCDATETIME())

-- stage_rows rows=1
INSERT INTO [c]]@[].[s@]]x].[x [y]]]] 'z';--_staging] (RunId, RowVersion, Id, CorrelationId, ReplyToAddress, Expires, Headers, Body, JobAttempt, Part) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)

-- stage_rows rows=3
INSERT INTO [c]]@[].[s@]]x].[x [y]]]] 'z';--_staging] (RunId, RowVersion, Id, CorrelationId, ReplyToAddress, Expires, Headers, Body, JobAttempt, Part) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?), (?, ?, ?, ?, ?, ?, ?, ?, ?, ?), (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)

-- count_part
SELECT count(*) FROM [c]]@[].[s@]]x].[x [y]]]] 'z';--_staging] WHERE RunId = ? AND JobAttempt = ? AND Part = ?

-- staged_stats
SELECT count(*), min(RowVersion), max(RowVersion) FROM [c]]@[].[s@]]x].[x [y]]]] 'z';--_staging] WHERE RunId = ?

-- staged_slice
SELECT RowVersion, Id, Headers, Body, Expires FROM [c]]@[].[s@]]x].[x [y]]]] 'z';--_staging] WHERE RunId = ? AND RowVersion >= ? AND RowVersion < ? ORDER BY RowVersion

-- delete_staging
DELETE FROM [c]]@[].[s@]]x].[x [y]]]] 'z';--_staging] WHERE RunId = ?

-- restore
INSERT INTO [c]]@[].[s@]]x].[x [y]]]] 'z';--] (Id, CorrelationId, ReplyToAddress, Recoverable, Expires, Headers, Body) SELECT Id, CorrelationId, ReplyToAddress, 1, Expires, Headers, Body FROM [c]]@[].[s@]]x].[x [y]]]] 'z';--_staging] WHERE RunId = ? ORDER BY RowVersion

-- fill_batches_done
SELECT Batch FROM [c]]@[].[s@]]x].[x [y]]]] 'z';--_fill] WHERE RunId = ? AND Part = ?

-- insert_fill_marker
INSERT INTO [c]]@[].[s@]]x].[x [y]]]] 'z';--_fill] (RunId, Part, Batch, Messages) VALUES (?, ?, ?, ?)

-- fill_totals
SELECT count(*), COALESCE(sum(Messages), 0) FROM [c]]@[].[s@]]x].[x [y]]]] 'z';--_fill] WHERE RunId = ?

-- insert_rows rows=2
INSERT INTO [c]]@[].[s@]]x].[x [y]]]] 'z';--] ([message_id], [total ]]cost'], [count], [n], [s], [d], [f], [ok], [at], [day], [raw], [doc]) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?), (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)

-- table_columns
SELECT * FROM [c]]@[].[s@]]x].[x [y]]]] 'z';--] WHERE 1 = 0

-- run_sink
SELECT Sink FROM [c]]@[].[s@]]x].[x [y]]]] 'z';--_runs] WHERE RunId = ?

-- touch_run (counted)
UPDATE [c]]@[].[s@]]x].[x [y]]]] 'z';--_runs] SET HeartbeatAt = SYSUTCDATETIME() WHERE RunId = ? AND State IN ('streaming'); SELECT @@ROWCOUNT

-- staged_runs_listing
SELECT r.RunId, r.InputQueue, r.Sink, r.State, s.Staged, s.Low, s.High, DATEDIFF(second, r.StartedAt, SYSUTCDATETIME()), DATEDIFF(second, r.HeartbeatAt, SYSUTCDATETIME()) FROM [c]]@[].[s@]]x].[x [y]]]] 'z';--_runs] r JOIN (SELECT RunId, count(*) AS Staged, min(RowVersion) AS Low, max(RowVersion) AS High FROM [c]]@[].[s@]]x].[x [y]]]] 'z';--_staging] GROUP BY RunId) s ON s.RunId = r.RunId WHERE r.InputQueue = ? ORDER BY r.StartedAt, r.RunId

-- staged_runs_listing of every queue
SELECT r.RunId, r.InputQueue, r.Sink, r.State, s.Staged, s.Low, s.High, DATEDIFF(second, r.StartedAt, SYSUTCDATETIME()), DATEDIFF(second, r.HeartbeatAt, SYSUTCDATETIME()) FROM [c]]@[].[s@]]x].[x [y]]]] 'z';--_runs] r JOIN (SELECT RunId, count(*) AS Staged, min(RowVersion) AS Low, max(RowVersion) AS High FROM [c]]@[].[s@]]x].[x [y]]]] 'z';--_staging] GROUP BY RunId) s ON s.RunId = r.RunId ORDER BY r.StartedAt, r.RunId

-- sink_table_ddl
IF OBJECT_ID(N'[c]]@[].[s@]]x].[x [y]]]] ''z'';--]', N'U') IS NULL CREATE TABLE [c]]@[].[s@]]x].[x [y]]]] 'z';--] ([message_id] nvarchar(max) NOT NULL, [total ]]cost'] numeric(12,2) NULL, [count] bigint NULL, [n] int NULL, [s] smallint NULL, [d] float NULL, [f] real NULL, [ok] bit NULL, [at] datetime2 NULL, [day] date NULL, [raw] varbinary(max) NULL, [doc] nvarchar(max) NULL)
