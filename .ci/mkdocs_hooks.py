"""MkDocs hooks for the documentation site (see .ci/mkdocs.yml).

The docstrings use Sphinx roles such as :class:`MessagePump`; mkdocstrings renders the name as code and
leaves the role's prefix in front of it. Drop the prefix, keep the code.
"""

from __future__ import annotations

import re

_ROLE = re.compile(r":(?:py:)?(?:class|meth|func|attr|mod|exc|data|obj|const):(?=<code>)")


def on_page_content(html: str, **kwargs: object) -> str:
    return _ROLE.sub("", html)
