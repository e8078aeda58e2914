"""What the tests read of the machine they run on, the same way on Linux and macOS (x86-64 or
ARM), so that no test assumes one kind of machine."""

import os


def memory_gib():
    """This machine's physical memory in GiB: /proc/meminfo's MemTotal where Linux has it (a
    reading independent of the trainers' `os.sysconf`), else sysconf's page count x page size
    (macOS and other POSIX systems without /proc)."""
    try:
        with open("/proc/meminfo") as f:
            (line,) = [row for row in f if row.startswith("MemTotal:")]
        return int(line.split()[1]) * 1024 / 2**30
    except FileNotFoundError:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") / 2**30
