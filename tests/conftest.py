r"""Settings of the whole suite.

On a machine with CUDA the suite runs with torch's deterministic algorithms
(what ``--deterministic`` sets): many tests assert that a run repeats or
resumes bit for bit, which CUDA's default kernels (atomic scatter sums, cuDNN's
algorithm choice) do not promise. On the CPU nothing changes: its kernels are
deterministic already, and the suite runs as users run."""
import os

import torch

if torch.cuda.is_available():
    # cuBLAS reads it when it starts; deterministic matrix products need it.
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True)
