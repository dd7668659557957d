"""Optional dependencies: which extra of the package provides each, for one-line hints."""

from __future__ import annotations

EXTRAS = {
    "torch": "torch",
    "dask": "dask",
    "distributed": "dask",
    "numba_cuda": "cuda",
    "matplotlib": "plot",
    "hypothesis": "test",
    "scipy": "bench",
    "sklearn": "bench",
    "jax": "bench",
    "jaxlib": "bench",
    "mambapy": "bench",
    "pytreegrav": "bench",
    "fmm3dpy": "bench",
    "asv": "bench",
    "rich": "bench",
}
"""Top-level module -> the ``propopt[...]`` extra that installs it."""


def hint(err: ModuleNotFoundError, what: str) -> str:
    """One line: ``what`` needs the missing module, and the command that installs it."""
    name = (err.name or "").split(".")[0]
    if name == "numba" and err.name and err.name.startswith("numba.cuda"):
        name = "numba_cuda"
    extra = EXTRAS.get(name)
    install = f"pip install 'propopt[{extra}]'" if extra else f"pip install {name}"
    return f"{what} needs the package {name!r}, which is not installed: {install}"
