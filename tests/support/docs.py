"""Where the repository's documents are, for the tests that read them.

Moved out of tests/component/test_docs.py, whose tests use them too."""

from __future__ import annotations

import docgen

ROOT = docgen.ROOT
