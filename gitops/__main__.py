"""`python -m gitops` — the same entry point as the `gitops` console script."""

from gitops.cli import main

raise SystemExit(main())
