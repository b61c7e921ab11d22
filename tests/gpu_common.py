"""What the GPU tests share: the array namespaces (numpy always, cupy with a device)."""

from evireform.kernels._backend import gpu_missing_reason


HAVE_GPU = gpu_missing_reason() is None
IDS = ["numpy"] + (["cupy"] if HAVE_GPU else [])
