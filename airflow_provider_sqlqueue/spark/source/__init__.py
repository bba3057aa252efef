"""The ``sqlqueue`` Spark data source: ``spark.read.format("sqlqueue")``, ``df.write.format("sqlqueue")``."""
