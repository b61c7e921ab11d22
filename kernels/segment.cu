// Deterministic segment sums for the GPU readout (evireform.kernels._gpu.segment_sums).
// keys are sorted ascending; for each run of equal keys, the thread at the run's first
// entry adds the run's values one after another, in order, and writes the sum there (0 is
// left elsewhere).  No atomics: the result does not depend on scheduling, and the order of
// the additions is z's own order (the CPU readout kernel's), so scores match it bitwise.
// A grid-stride loop covers any size.  CI compiles this file with NVRTC for compute_80 and
// compute_90.

extern "C" __global__ void segment_sums(const long long* __restrict__ keys,
                                        const double* __restrict__ vals,
                                        double* __restrict__ out,
                                        long long n)
{
    long long stride = (long long)blockDim.x * gridDim.x;
    for (long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x; t < n; t += stride) {
        if (t > 0 && keys[t - 1] == keys[t]) {
            continue;  // not the first entry of its run
        }
        double s = 0.0;
        long long key = keys[t];
        for (long long u = t; u < n && keys[u] == key; ++u) {
            s += vals[u];
        }
        out[t] = s;
    }
}
