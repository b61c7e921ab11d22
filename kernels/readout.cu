// Segment-sum readout of sparse z into a dense (queries x passages) block, for the GPU path
// (evireform.kernels._gpu.scatter_readout).  Entry t of the batch adds
//     inv_sqrt[owner[ids[t]]] * vals[t]   to   out[rows[t] * n_passages + owner[ids[t]]].
// Several entries of one query may hit the same passage, so the add is atomic (double
// atomicAdd: compute capability 6.0 and later).  A grid-stride loop covers any batch size.
// The CPU runs the same contract with numpy's add.at; CI compiles this file with NVRTC for
// compute_80 and compute_90.

extern "C" __global__ void scatter_readout(const long long* __restrict__ rows,
                                           const long long* __restrict__ ids,
                                           const double* __restrict__ vals,
                                           const int* __restrict__ owner,
                                           const double* __restrict__ inv_sqrt,
                                           double* __restrict__ out,
                                           long long n,
                                           long long n_passages)
{
    long long stride = (long long)blockDim.x * gridDim.x;
    for (long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x; t < n; t += stride) {
        int j = owner[ids[t]];
        double w = inv_sqrt[j];
        if (w != 0.0) {
            atomicAdd(out + rows[t] * n_passages + j, w * vals[t]);
        }
    }
}
