"""What the drain (:mod:`..drain`) and the ``sqlqueue`` data source (:mod:`..source`) share to read queued
messages on Spark's executors: the bridge's statements and their row counts (``transactions``), holding a
batch in the queue under an uncommitted delete (``hold``), a SELECT's rows in batches (``row_batches``), the
messages' columns and schema (``columns``, ``schema``), the run's heartbeat (``heartbeat``) and the errors
both raise (``errors``). Neither side imports the other's modules; both import these.
"""
