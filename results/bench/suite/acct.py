"""Turn the kernel's process accounting on or off (BSD acct v3 records, one per exited process).

    python3 acct.py FILE    start writing records to FILE (created empty)
    python3 acct.py off     stop

Needs root and a kernel with CONFIG_BSD_PROCESS_ACCT (/proc/sys/kernel/acct exists).
acctsum.py sums the records by program name (user and system seconds).
"""
import ctypes
import sys

libc = ctypes.CDLL(None, use_errno=True)
if sys.argv[1] == "off":
    path = None
else:
    open(sys.argv[1], "wb").close()
    path = sys.argv[1].encode()
if libc.acct(path) != 0:
    raise SystemExit(f"acct: errno {ctypes.get_errno()}")
