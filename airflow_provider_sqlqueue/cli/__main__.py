"""``python -m airflow_provider_sqlqueue.cli``: the same as the ``sqlqueue`` command."""

import sys

from . import main

sys.exit(main())
