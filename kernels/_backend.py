"""Backend selection.  Importing this never imports CuPy or requires CUDA."""
from __future__ import annotations

BACKENDS = ("auto", "cpu", "gpu")


class BackendUnavailable(RuntimeError):
    """A backend was asked for that this machine or this installation cannot provide."""


def gpu_missing_reason() -> str | None:
    """Why the GPU backend cannot run here, or None if it could."""
    try:
        import cupy  # noqa: F401
    except Exception as exc:  # ImportError, or CUDA libraries missing at import
        return (f"CuPy is not importable ({type(exc).__name__}: {exc}); install it with "
                "`pip install 'evireform[gpu]'` on a machine with CUDA")
    try:
        if cupy.cuda.runtime.getDeviceCount() < 1:
            return "CuPy imports but reports no CUDA device"
    except Exception as exc:
        return f"CuPy imports but no CUDA device is usable ({type(exc).__name__}: {exc})"
    return None


def resolve(backend: str) -> str:
    """Map a requested backend to the one that will run: "auto" and "cpu" run the numba
    kernels; "gpu" runs the CuPy kernels, or raises :class:`BackendUnavailable` naming what
    is missing (CuPy, the CUDA driver, a device)."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}; got {backend!r}")
    if backend == "gpu":
        why = gpu_missing_reason()
        if why is not None:
            raise BackendUnavailable(f"backend='gpu' was requested but {why}")
        return "gpu"
    return "cpu"
