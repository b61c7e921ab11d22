"""Every tunable of the compiled core, in one place, with its default.

Change these at run time (``evireform.kernels.config.EXACT_SEARCH_MAX = ...``); nothing here
is read from the environment and importing the package sets no global state.
"""

#: numba writes compiled machine code next to the sources so later processes skip the JIT.
NUMBA_CACHE = True

#: Single-query exact search splits the rows into chunks (one candidate buffer each) of at
#: least this many.
TOPK_MIN_CHUNK = 2048

#: Batched exact search: each thread scores this many embedding rows against the whole batch
#: into a small (batch x rows) float32 block and folds it into per-query candidate buffers
#: at once.
BATCH_BLOCK_ROWS = 128

#: Indexes with at least this many propositions search candidates with HNSW (hnswlib); smaller
#: ones are searched exactly.  Exact search is always the reference.
EXACT_SEARCH_MAX = 200_000

#: HNSW construction and query parameters (hnswlib).  ``HNSW_EF_SEARCH`` is set on every
#: graph built or loaded; hnswlib searches a query for k results with max(ef, k).
#: ef_construction 100 rather than 200: on 100k synthetic embeddings (``evireform bench``'s
#: generator, 2 cores; ``scripts/hnsw_params.py``) it builds in 55 s instead of 106 s for
#: recall@100 0.993 instead of 0.996 at ef 512 (M=16 builds in 32 s but reaches only 0.948).
HNSW_M = 32
HNSW_EF_CONSTRUCTION = 100
HNSW_EF_SEARCH = 512
HNSW_SEED = 100
#: Threads used to insert into HNSW.  One thread makes the graph, and so its results, identical
#: from one build to the next; more threads build faster but not reproducibly.
HNSW_BUILD_THREADS = 1
#: Deleting passages marks their HNSW items deleted (tombstones) rather than rebuilding; when
#: more than this share of the graph's items are tombstones, the graph is rebuilt over the live
#: embeddings instead, so repeated upserts keep the graph (and ``hnsw.bin``) at the live size.
HNSW_MAX_DELETED_SHARE = 0.25

#: A row of W with a degree sum (w_i) below this counts as zero (pseudo-inverse).
DEGREE_EPS = 1e-12

#: Batched search, propagation and readout with at most this many rows run the single-row
#: kernels (fewer parallel launches; propagation and readout reuse a per-thread workspace
#: instead of allocating index-sized scratch per call).  Results are the same either way.
SMALL_BATCH = 4

#: Exact scans of at most this many bytes of embeddings (times the batch, up to 4 queries)
#: run their row ranges on the calling thread instead of numba's thread pool: the same
#: kernel compiled without threads (``_cpu._serial_twin``), so the results are bitwise the
#: same.  Waking the pool costs more than a small scan takes, most under
#: ``OMP_WAIT_POLICY=passive`` (which ``evireform bench`` sets).  ``python
#: scripts/serial_crossover.py`` on this 2-core machine, top-100 of one query, pool against
#: calling thread: 2,000 x 384 float32 rows (3 MB) 73-118 us against 69-75 us; 6,500 rows
#: 183-500 against 362-556 us; three queries over 2,000 rows already go faster in the pool
#: (142 against 261 us, policy unset).
SERIAL_SCAN_BYTES = 4 << 20

#: Batched readouts of at most this many z entries in all run on the calling thread (the
#: same kernel without threads, bitwise the same).  Same script: one row of 800 entries
#: took 19-20 us on the calling thread against 24-38 us in the pool; four rows 59-63 against
#: 37-85 us.
SERIAL_READOUT_ENTRIES = 1024

#: a batched BM25 search whose queries touch at most this many postings in all runs on the
#: calling thread (issue 67): below it, threads cost more than they save (64 queries over
#: 10k synthetic texts touch about 10^5 postings, 0.3 ms of work)
SERIAL_LEXICAL_POSTINGS = 1 << 20

#: When other work holds more than this share of the cores (the 1-minute load average, less
#: what this process itself kept busy since the last check, per core it may use), every
#: scan, batched readout and batched propagation runs on the calling thread whatever its
#: size: the same kernels without threads (``_cpu._serial_twin``) or the same seed ranges
#: one after another, so the results are bitwise the same.  A thread pool on cores that
#: other work holds waits for its slowest worker, which the scheduler may leave out for a
#: whole time slice: ``python scripts/orchestration_cost.py`` beside two busy loops on this
#: 2-core machine gave retrieve() p50 / p90 1.5-56 / 6.5-56 ms with the pool (five runs),
#: against 1.12-1.23 / 5.4-5.9 ms on the calling thread (three runs).  Read at most once a second
#: (:func:`evireform.kernels.machine_busy`); None: never (``evireform bench`` sets it, so
#: its ratios measure the kernels at a fixed thread count, not the load).
BUSY_LOAD_PER_CPU = 0.75

#: Batched exact search with at most this many queries runs the single-query kernel once per
#: query; more run the batch kernel, which reads the embeddings once for the whole batch (the
#: two accumulate every dot product in the same order: the results are bitwise equal).  A
#: search is memory-bound once the embeddings are not in cache, as between the steps of a
#: retrieval: on the MuSiQue index (6,501 x 384 float32, 10 MB), with the cache flushed
#: before each call, 2 / 3 / 4 queries took 1.36 / 1.97 / 2.19 ms looped and 1.15 / 1.22 /
#: 1.22 ms batched, one query 1.08 against 1.06 (``scripts/search_batch_crossover.py``, this
#: 2-core machine), so only one query takes the loop.
SEARCH_SMALL_BATCH = 1

#: Batched propagation keeps its last output arrays (ids and values) for the next call when
#: they take at most this many bytes, and reuses them once no earlier result still uses them:
#: a fresh output's first write faults in its pages, which on the bench's 1M-proposition
#: synthetic graph (31M entries of z, 560 MB with the bound's slack) cost about as much as
#: the propagation (``python scripts/propagate_batch_cost.py``).  0 keeps nothing;
#: ``evireform.kernels.release_buffers()`` drops what is kept.
PROPAGATE_KEEP_BYTES = 1 << 30

#: A search over some rows (``cosine_topk_batch(..., rows=...)``: a filter's matching
#: propositions) with more than ``SMALL_BATCH`` queries copies the rows into blocks of at
#: most this many bytes and scans each with the batch kernel; fewer queries read the rows in
#: place (eight at a time), with no copy at all.
SUBSET_BLOCK_BYTES = 32 << 20

#: ``backend="auto"`` (evireform.engine.make_engine) runs on the GPU only for indexes of at
#: least this many propositions, and only when a CUDA device is usable: below it a question's
#: transfers and launches cost more than the CPU kernels take.
GPU_AUTO_MIN_PROPS = 1_000_000

#: vocabularies of at least this many terms have their order checked (the full verification
#: tier, kernels.vocab_unsorted) by the numba kernel; smaller ones in Python, so a command
#: that needs no other kernel (an update) does not load numba for it
VOCAB_CHECK_KERNEL = 200_000

#: a vocabulary lookup of at most this many strings in a process that has not loaded the
#: numba kernels yet runs its binary search in Python (kernels.vocab_lookup; the same
#: results), so that a command needing no other kernel does not load numba for it
VOCAB_LOOKUP_PYTHON = 4096

#: a one-shot question (``evireform query``: make_engine(..., one_shot=True)) on an index of
#: at most this many propositions, in a process that has not loaded numba, runs the device
#: engine's array code on numpy: milliseconds of numpy on such an index against numba's
#: start (about a second)
ONE_SHOT_NUMPY_PROPS = 200_000

#: the graph reformulator's look ahead (kernels.mentions_outside) over at most this many
#: entities, in a process that has not loaded the numba kernels yet, runs with numpy (the
#: same entries), for the same reason
MENTIONS_NUMPY_ROWS = 4096

#: score parts (kernels.score_parts) of at most this many seed entries, in a process that has
#: not loaded the numba kernels yet, run with numpy (bitwise the same parts)
PARTS_NUMPY_ENTRIES = 1 << 16

#: BM25 weights of at most this many postings, in a process that has not loaded the numba
#: kernels yet, are computed with numpy (kernels.lexical.bm25_weights; bitwise the same
#: weights, with int64/float64 temporaries per posting): a one-shot question on a small
#: index then needs no numba at all
BM25_NUMPY_POSTINGS = 2_000_000
