"""`python -m reconciler` is `qlfsm`."""

from reconciler._cli import main

raise SystemExit(main())
