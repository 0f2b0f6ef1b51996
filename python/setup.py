"""setup.py - the packaging hook of the Python package (pyproject.toml holds the metadata).

Owns what a plain `pip install python/` needs beyond the Python files: the public headers (the
cffi declarations are derived from them at import time) and libstrata.so are copied into the built
package, so the installed copy imports with no repository and no environment variables. The
library is the repository's `make` output (<repo>/libstrata.so) or $STRATA_BUILD_LIB; without one
the install stops and says to run make. Editable installs (`pip install -e python/`) copy nothing:
the package then finds both in the repository."""
import os
import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

REPO = Path(__file__).resolve().parent.parent


class BuildPyWithLibrary(build_py):
    """build_py, then the headers and libstrata.so next to the package's modules."""

    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return
        headers = [REPO / "c" / "include" / h for h in ("strata.h", "strata_gguf.h", "strata_quant.h")]
        lib = Path(os.environ.get("STRATA_BUILD_LIB") or REPO / "libstrata.so")
        for header in headers:
            if not header.is_file():
                raise SystemExit(f"strata: {header} not found: install from a checkout of the "
                                 "repository (pip install python/ at its root)")
        if not lib.is_file():
            raise SystemExit(f"strata: {lib} not found: run `make` at the repository root first "
                             "to build libstrata.so (or set STRATA_BUILD_LIB to a built copy)")
        dest = Path(self.build_lib) / "strata"
        dest.mkdir(parents=True, exist_ok=True)
        for header in headers:
            shutil.copy2(header, dest / header.name)
        shutil.copy2(lib, dest / "libstrata.so")  # the file the link points to


class BinaryDistribution(Distribution):
    """The wheel carries a compiled library: tag it for this platform, not as pure Python."""

    def has_ext_modules(self):
        return True


setup(cmdclass={"build_py": BuildPyWithLibrary}, distclass=BinaryDistribution)
