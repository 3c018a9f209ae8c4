#!/usr/bin/env python3
"""Prove that bindgen (rdma-mummy-sys's build script) can parse C headers here.

bindgen drives libclang, and libclang needs clang's own headers (stddef.h and friends, in
<libdir>/clang/<version>/include: Debian's libclang-common-*-dev). Without them the Rust
build fails deep inside a build script ("'stddef.h' file not found"). This parses the same
kind of header bindgen does, through the same library, and says plainly what is missing.

Usage: libclang-check.py [LIBDIR...]   (default: LIBCLANG_PATH, `llvm-config --libdir`)
Exit 0 when a header including <stddef.h> and <sched.h> parses without errors.
"""
import ctypes
import glob
import os
import subprocess
import sys

SOURCE = b"#include <stddef.h>\n#include <sched.h>\nsize_t probe(void) { return sizeof(cpu_set_t); }\n"
ERROR = 3  # CXDiagnostic_Error


def libdirs():
    dirs = sys.argv[1:]
    if os.environ.get("LIBCLANG_PATH"):
        dirs.append(os.environ["LIBCLANG_PATH"])
    try:
        dirs.append(subprocess.run(["llvm-config", "--libdir"], capture_output=True,
                                   text=True, check=True).stdout.strip())
    except (OSError, subprocess.CalledProcessError):
        pass
    dirs += sorted(glob.glob("/usr/lib/llvm-*/lib"), reverse=True)
    return [d for d in dict.fromkeys(dirs) if d]


def find_libclang():
    for d in libdirs():
        for name in ("libclang.so", "libclang.so.1"):
            path = os.path.join(d, name)
            if os.path.exists(path):
                return path
        found = sorted(glob.glob(os.path.join(d, "libclang-*.so*")), reverse=True)
        if found:
            return found[0]
    return None


class Unsaved(ctypes.Structure):
    _fields_ = [("Filename", ctypes.c_char_p), ("Contents", ctypes.c_char_p),
                ("Length", ctypes.c_ulong)]


class CXString(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("private_flags", ctypes.c_uint)]


def main():
    path = find_libclang()
    if path is None:
        print("libclang not found (looked in: %s): install libclang-dev" % ", ".join(libdirs()))
        return 1
    lib = ctypes.CDLL(path)
    lib.clang_createIndex.restype = ctypes.c_void_p
    lib.clang_parseTranslationUnit.restype = ctypes.c_void_p
    lib.clang_parseTranslationUnit.argtypes = [
        ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p, ctypes.c_int,
        ctypes.POINTER(Unsaved), ctypes.c_uint, ctypes.c_uint]
    lib.clang_getNumDiagnostics.argtypes = [ctypes.c_void_p]
    lib.clang_getDiagnostic.restype = ctypes.c_void_p
    lib.clang_getDiagnostic.argtypes = [ctypes.c_void_p, ctypes.c_uint]
    lib.clang_getDiagnosticSeverity.argtypes = [ctypes.c_void_p]
    lib.clang_formatDiagnostic.restype = CXString
    lib.clang_formatDiagnostic.argtypes = [ctypes.c_void_p, ctypes.c_uint]
    lib.clang_getCString.restype = ctypes.c_char_p
    lib.clang_getCString.argtypes = [CXString]

    index = lib.clang_createIndex(0, 0)
    unsaved = Unsaved(b"probe.h", SOURCE, len(SOURCE))
    tu = lib.clang_parseTranslationUnit(index, b"probe.h", None, 0, ctypes.byref(unsaved), 1, 0)
    if not tu:
        print("libclang (%s) could not parse a C header at all" % path)
        return 1
    errors = []
    for i in range(lib.clang_getNumDiagnostics(tu)):
        diag = lib.clang_getDiagnostic(tu, i)
        if lib.clang_getDiagnosticSeverity(diag) >= ERROR:
            errors.append(lib.clang_getCString(lib.clang_formatDiagnostic(diag, 1)).decode())
    if errors:
        print("libclang (%s) cannot parse system headers, so bindgen will fail:" % path)
        for e in errors:
            print("  " + e)
        print("clang's own headers (stddef.h) are missing: install libclang-dev "
              "(Debian: libclang-common-<version>-dev, matching the libclang above)")
        return 1
    print("libclang OK: %s parses <stddef.h> and <sched.h>" % path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
