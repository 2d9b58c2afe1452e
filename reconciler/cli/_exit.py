"""Exit codes and the errors every command maps to them (spec 06): the one home of both for
the command line. The errors are the application layer's (``reconciler._errors``), which raises
them."""

from __future__ import annotations

from reconciler._errors import FatalError as FatalError
from reconciler._errors import RetryLater as RetryLater
from reconciler._errors import UsageError as UsageError

EXIT_SAFE = 0
EXIT_FATAL = 1
EXIT_USAGE = 2
EXIT_BLOCKED = 3
# sysexits.h EX_TEMPFAIL: another process holds the database (or the start-up lock) past the
# lock budget; nothing is wrong, run it again - what service managers are told to retry (D-20).
EXIT_TEMPFAIL = 75
