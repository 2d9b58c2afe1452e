"""`python -m reconciler` is `qlfsm`."""

from reconciler.cli import main

raise SystemExit(main())
