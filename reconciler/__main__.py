"""`python -m reconciler` is `qlfsm`."""

from reconciler.cli._main import main

raise SystemExit(main())
