// Top-k selection for the GPU search (evireform.kernels._gpu, "select"): one thread block per
// (query row, slice of L scores), the slice's keys held in shared memory, a radix select on
// them (8 bits a pass, most significant first, a 256-bin shared histogram), and the block's k
// best keys written to k fixed slots.  No host synchronisation, no sort of a row, no global
// atomics.  kernels/_gpu.py emulates these kernels block by block with numpy (the CI tests run
// the emulation against the array-namespace reference); CI compiles this file with NVRTC for
// compute_80 and compute_90.
//
// A key is 64 bits: the score's order-preserving bits in the upper half (a larger score has a
// larger key) and 0xFFFFFFFF - id in the lower half, so keys are unique and, at equal scores,
// the lower id has the larger key: the top k keys are the top k scores with ties by lower id.
// Key 0 means "no candidate" (a score that is not taken, or an empty slot).  Ids < 2^32 - 1.

typedef unsigned long long u64;

// The k largest nonzero keys of skeys[0:len] (fewer if fewer are nonzero) into out[0:k], the
// rest of out set to 0.  The order of the written keys within out is not defined (slots are
// taken by a shared counter); the caller sorts the final k.
__device__ void block_select(const u64* skeys, int len, int k, u64* out)
{
    __shared__ unsigned int hist[256];
    __shared__ u64 s_prefix;     // the k-th key's digits found so far (lower digits 0)
    __shared__ int s_need;       // how many keys under s_prefix still belong to the top k
    __shared__ int s_done;       // every key >= s_prefix is taken
    __shared__ unsigned int s_count;
    if (threadIdx.x == 0) {
        s_prefix = 0ull;
        s_need = k;
        s_done = 0;
        s_count = 0u;
    }
    u64 mask = 0ull;
    for (int shift = 56; shift >= 0; shift -= 8) {
        for (int d = threadIdx.x; d < 256; d += blockDim.x) hist[d] = 0u;
        __syncthreads();
        if (s_done) break;  // read after a barrier: the same in every thread
        u64 prefix = s_prefix;
        for (int i = threadIdx.x; i < len; i += blockDim.x) {
            u64 key = skeys[i];
            if (key != 0ull && (key & mask) == prefix)
                atomicAdd(&hist[(unsigned int)(key >> shift) & 0xFFu], 1u);
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            unsigned int need = (unsigned int)s_need, above = 0u;
            int d = 255;
            for (; d >= 0; --d) {
                if (above + hist[d] >= need) break;
                above += hist[d];
            }
            if (d < 0) {
                // fewer live keys than places (only on the first pass): every nonzero key
                // is taken, s_prefix stays 0
                s_done = 1;
            } else {
                s_prefix = prefix | ((u64)d << shift);
                s_need = (int)(need - above);
                if (hist[d] == need - above) s_done = 1;  // the digit's keys fill the rest
            }
        }
        mask |= 0xFFull << shift;
        __syncthreads();
    }
    u64 t = s_prefix;
    for (int i = threadIdx.x; i < len; i += blockDim.x) {
        u64 key = skeys[i];
        if (key != 0ull && key >= t) {
            unsigned int slot = atomicAdd(&s_count, 1u);
            if (slot < (unsigned int)k) out[slot] = key;
        }
    }
    __syncthreads();
    for (int i = (int)s_count + threadIdx.x; i < k; i += blockDim.x) out[i] = 0ull;
}

__device__ __forceinline__ u64 id_bits(long long id)
{
    return (u64)(0xFFFFFFFFu - (unsigned int)id);
}

// S: (rows, n) float32 scores, row-major; scores of row r, column c belong to id lo + c.
// positive_only: scores <= 0 (and NaN) are not candidates; else every score but NaN is.
// out: (rows, gridDim.x * k) keys, slice s of row r at out[(r * gridDim.x + s) * k].
// Launch: grid (ceil(n / L), rows), dynamic shared memory L * 8 bytes.
extern "C" __global__ void select_f32(const float* __restrict__ S, long long n, long long lo,
                                      int L, int k, int positive_only, u64* __restrict__ out)
{
    extern __shared__ u64 skeys[];
    long long start = (long long)blockIdx.x * L;
    int len = (int)min((long long)L, n - start);
    const float* s = S + (long long)blockIdx.y * n + start;
    for (int i = threadIdx.x; i < len; i += blockDim.x) {
        float v = s[i];
        unsigned int u = __float_as_uint(v);
        unsigned int o = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
        bool take = positive_only ? (v > 0.0f) : (v == v);
        skeys[i] = take ? (((u64)o << 32) | id_bits(lo + start + i)) : 0ull;
    }
    __syncthreads();
    block_select(skeys, len, k, out + ((long long)blockIdx.y * gridDim.x + blockIdx.x) * k);
}

// The same over float16 scores given as their raw 16 bits (no widening of the tile, no
// cuda_fp16.h): the order key of the half is placed in the upper 32 bits.
extern "C" __global__ void select_f16(const unsigned short* __restrict__ S, long long n,
                                      long long lo, int L, int k, int positive_only,
                                      u64* __restrict__ out)
{
    extern __shared__ u64 skeys[];
    long long start = (long long)blockIdx.x * L;
    int len = (int)min((long long)L, n - start);
    const unsigned short* s = S + (long long)blockIdx.y * n + start;
    for (int i = threadIdx.x; i < len; i += blockDim.x) {
        unsigned int h = s[i];
        bool nan = (h & 0x7FFFu) > 0x7C00u;
        bool positive = !(h & 0x8000u) && h != 0u && !nan;
        unsigned int o = (h & 0x8000u) ? (~h & 0xFFFFu) : (h | 0x8000u);
        bool take = positive_only ? positive : !nan;
        skeys[i] = take ? (((u64)o << 32) | id_bits(lo + start + i)) : 0ull;
    }
    __syncthreads();
    block_select(skeys, len, k, out + ((long long)blockIdx.y * gridDim.x + blockIdx.x) * k);
}

// Candidate keys (rows, n) reduced slice by slice: the k largest of each slice of L.
extern "C" __global__ void select_keys(const u64* __restrict__ K, long long n, int L, int k,
                                       u64* __restrict__ out)
{
    extern __shared__ u64 skeys[];
    long long start = (long long)blockIdx.x * L;
    int len = (int)min((long long)L, n - start);
    const u64* src = K + (long long)blockIdx.y * n + start;
    for (int i = threadIdx.x; i < len; i += blockDim.x) skeys[i] = src[i];
    __syncthreads();
    block_select(skeys, len, k, out + ((long long)blockIdx.y * gridDim.x + blockIdx.x) * k);
}

// The final k keys of each row sorted, largest first, in place: one block per row, the row
// (padded with 0 to P, a power of two >= k, P <= 4096) in shared memory, a bitonic network
// of compare-exchanges (kernels/_select.py emulates the same network stage by stage).  The
// keys are unique but for the 0 padding, so the order is the one order.  Replaces a library
// sort (thrust), which may synchronise the stream.
// Launch: grid (rows), dynamic shared memory P * 8 bytes.
extern "C" __global__ void sort_rows_desc(u64* __restrict__ K, int k, int P)
{
    extern __shared__ u64 s[];
    u64* row = K + (long long)blockIdx.x * k;
    for (int i = threadIdx.x; i < P; i += blockDim.x) s[i] = i < k ? row[i] : 0ull;
    __syncthreads();
    for (int size = 2; size <= P; size <<= 1) {
        for (int stride = size >> 1; stride > 0; stride >>= 1) {
            for (int i = threadIdx.x; i < P; i += blockDim.x) {
                int j = i ^ stride;
                if (j > i) {
                    bool down = (i & size) == 0;  // this run ends largest first
                    u64 a = s[i], b = s[j];
                    if ((a < b) == down) {
                        s[i] = b;
                        s[j] = a;
                    }
                }
            }
            __syncthreads();
        }
    }
    for (int i = threadIdx.x; i < k; i += blockDim.x) row[i] = s[i];
}
