"""Random graph and embedding generators shared by the kernel tests."""
import numpy as np

from evireform.kernels import EntityGraph, PassageMap


def unit_rows(rng, n, d):
    H = rng.standard_normal((n, d)).astype(np.float32)
    nrm = np.linalg.norm(H, axis=1, keepdims=True)
    nrm[nrm == 0] = 1
    return (H / nrm).astype(np.float32)


def random_graph(rng, M, Ne, max_ents=4, p_isolated=0.15):
    """Random incidence with isolated propositions, degree-0 and degree-1 entities, repeats."""
    lists = []
    for _ in range(M):
        if Ne == 0 or rng.random() < p_isolated:
            lists.append([])
        else:
            # skewed entity choice makes hubs; repeated ids test deduplication
            n = int(rng.integers(1, max_ents + 1))
            lists.append(list((rng.pareto(1.2, n) * Ne / 8).astype(int) % Ne))
    return EntityGraph.from_lists(lists, n_entities=Ne)


def random_passages(rng, M, N):
    """Owner map over N passages; some passages get no propositions."""
    if M == 0:
        return PassageMap.from_owner(np.zeros(0, np.int32), N)
    owner = rng.integers(0, max(1, N - N // 4), size=M) if N > 1 else np.zeros(M, int)
    return PassageMap.from_owner(owner, N)


def random_seed(rng, M, n):
    ids = rng.integers(0, M, size=n)
    if n > 2:
        ids[1] = ids[0]  # a repeated id
    return ids, rng.random(n)


def as_old_format(ix, version):
    """Rewrite the saved index at ``ix`` in the layout of format ``version`` (1 or 2): the
    texts in passages.json / propositions.json / entities.json (version 1 without passage
    metadata), no string files, no stamp; the manifest updated (what an older evireform
    wrote)."""
    import json
    from evireform import PropositionIndex
    from evireform.store import file_sha256
    idx = PropositionIndex.load(ix)
    recs = []
    for p in idx.passages:
        r = {"id": p.id, "title": p.title, "text": p.text}
        if version >= 2 and p.metadata:
            r["metadata"] = p.metadata
        recs.append(r)
    for name, obj in (("passages.json", recs), ("propositions.json", list(idx.prop_texts)),
                      ("entities.json", list(idx.entity_names))):
        (ix / name).write_text(json.dumps(obj), encoding="utf-8")
    man = json.loads((ix / "manifest.json").read_text())
    for name in ("strings.utf8", "string_offsets.npy", "verified.json"):
        (ix / name).unlink(missing_ok=True)
        man["files"].pop(name, None)
    for name in ("passages.json", "propositions.json", "entities.json"):
        man["files"][name] = {"sha256": file_sha256(ix / name),
                              "bytes": (ix / name).stat().st_size}
    man["format_version"] = version
    (ix / "manifest.json").write_text(json.dumps(man))
