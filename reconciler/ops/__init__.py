"""The operator's side of start-up: why a run ended where it did (:mod:`._explain`), an audited
decision for a run that blocks start-up (:mod:`._resolve`), and the cleanup of what ended runs
left behind (:mod:`._sweep`). Domain code: it reads and writes through ``storage`` and the node's
ports, and never prints; the command line is in ``reconciler.cli``."""
