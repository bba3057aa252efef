"""Which library an ODBC driver stands for, as unixODBC's driver manager finds it, and what that says about
how the driver reads a connection string.

A driver is named in a connection string by a library path or by a section of ``odbcinst.ini`` whose
``Driver`` entry is the library; unixODBC's ``libodbcinst`` reads that entry as the driver manager will
(``SQLGetPrivateProfileString`` with ``ODBCINST.INI``, honouring ``ODBCSYSINI``). Nothing is loaded but
``libodbcinst`` itself, which comes with the driver manager; a driver's own library never is.

FreeTDS (1.3) does not read a port written into ``SERVER`` as ``host,port``, as Microsoft's drivers do: it
takes the port from its own keyword ``PORT``. The library tells the two apart where a section's name
(anything a DBA chose) cannot.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
from pathlib import PurePosixPath

__all__ = ["driver_library", "reads_port_keyword"]

_FREETDS_LIBRARY = "libtdsodbc"


@functools.cache
def _odbcinst() -> ctypes.CDLL | None:
    found = ctypes.util.find_library("odbcinst")
    try:
        library = ctypes.CDLL(found or "libodbcinst.so.2")
    except OSError:
        return None  # no unixODBC (iODBC, or no driver manager at all): nothing to read
    read = library.SQLGetPrivateProfileString
    read.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int]
    read.argtypes += [ctypes.c_char_p]
    read.restype = ctypes.c_int
    return library


def driver_library(driver: str) -> str | None:
    """The library ``driver`` (a path, or an ``odbcinst.ini`` section's name) stands for; None where the
    driver manager's configuration does not name one."""
    name = driver.strip().removeprefix("{").removesuffix("}").strip()
    if "/" in name:
        return name
    library = _odbcinst()
    if library is None or not name:
        return None
    found = ctypes.create_string_buffer(4096)
    size = library.SQLGetPrivateProfileString(
        name.encode("utf-8", "replace"), b"Driver", b"", found, ctypes.sizeof(found), b"ODBCINST.INI"
    )
    text = found.value.decode("utf-8", "replace") if size > 0 else ""
    return text or None


def reads_port_keyword(driver: str) -> bool:
    """Whether ``driver`` takes a server's port as the keyword ``PORT`` rather than in ``SERVER=host,port``
    (FreeTDS)."""
    library = driver_library(driver)
    return library is not None and PurePosixPath(library).name.startswith(_FREETDS_LIBRARY)
