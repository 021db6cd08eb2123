"""Suite-wide setup.

SIGINT: a shell runs a background job (`make test &`, a CI runner's non-interactive shell) with
SIGINT and SIGQUIT ignored, and an ignored disposition survives `exec`. Every subprocess a test
starts would then inherit SIGINT ignored; Python started that way installs no KeyboardInterrupt
handler, so a test that presses Ctrl-C on a child (the sandbox shutdown checks, `sera train`'s
and `sera eval`'s Ctrl-C tests) sees a child that cannot be interrupted. That was the
order-independent, launch-dependent failure of `test_killing_leaves_no_sandbox_process[host-SIGINT]`
on fresh clones. Installing Python's own handler here makes children start with the default
disposition (a caught signal is reset at `exec`), as they do under an interactive terminal.
"""

from __future__ import annotations

import signal


def pytest_configure(config: object) -> None:
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
