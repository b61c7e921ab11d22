"""Random graph and embedding generators shared by the kernel tests, and what the result
record tests share."""
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


def random_seed_rows(rng, M, B, most=8):
    """``B`` random seeds (0 to ``most`` entries each, see :func:`random_seed`) as CSR rows
    ``(indptr, ids int64, vals float64)``."""
    seeds = [random_seed(rng, M, int(n)) for n in rng.integers(0, most + 1, B)]
    indptr = np.r_[0, np.cumsum([len(s[0]) for s in seeds])].astype(np.int64)
    ids = (np.concatenate([s[0] for s in seeds]) if B else np.zeros(0)).astype(np.int64)
    vals = np.concatenate([s[1] for s in seeds]) if B else np.zeros(0)
    return indptr, ids, vals


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
    for name in ("strings.utf8", "string_offsets.npy", "metadata_shared.npy", "verified.json"):
        (ix / name).unlink(missing_ok=True)
        man["files"].pop(name, None)
    man["counts"].pop("shared_metadata", None)
    for name in ("passages.json", "propositions.json", "entities.json"):
        man["files"][name] = {"sha256": file_sha256(ix / name),
                              "bytes": (ix / name).stat().st_size}
    man["format_version"] = version
    (ix / "manifest.json").write_text(json.dumps(man))


def minimal_pdf(pages, title=None, outline=()) -> bytes:
    """A small valid PDF (Helvetica text, one line a string) with ``pages`` (each a list of
    lines), written by hand so that tests need no PDF writer; ``outline``: ``(title, page
    index, children)`` entries (children the same shape), the document's bookmarks."""
    objs = ["<< /Type /Catalog /Pages 2 0 R >>", None,
            "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"]
    kids = []
    for lines in pages:
        ops = ["BT /F1 12 Tf 72 720 Td 14 TL"]
        for ln in lines:
            esc = ln.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")
            ops.append(f"({esc}) Tj T*")
        ops.append("ET")
        stream = "\n".join(ops)
        objs.append(f"<< /Length {len(stream.encode('latin-1'))} >>\nstream\n{stream}\n"
                    "endstream")
        objs.append(f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources "
                    f"<< /Font << /F1 3 0 R >> >> /Contents {len(objs)} 0 R >>")
        kids.append(f"{len(objs)} 0 R")
    objs[1] = f"<< /Type /Pages /Kids [{' '.join(kids)}] /Count {len(kids)} >>"
    if outline:
        objs.append(None)
        root = len(objs)

        def add(entries, parent):  # object numbers of the entries, filled in afterwards
            nums = []
            for _ in entries:
                objs.append(None)
                nums.append(len(objs))
            for n, (num, (t, page, children)) in enumerate(zip(nums, entries)):
                links = f" /Parent {parent} 0 R"
                if n:
                    links += f" /Prev {nums[n - 1]} 0 R"
                if n + 1 < len(nums):
                    links += f" /Next {nums[n + 1]} 0 R"
                sub = add(children, num) if children else []
                if sub:
                    links += f" /First {sub[0]} 0 R /Last {sub[-1]} 0 R /Count {len(sub)}"
                objs[num - 1] = (f"<< /Title ({t}){links} /Dest [{kids[page]} /XYZ 0 792 0] "
                                 ">>")
            return nums
        top = add(list(outline), root)
        objs[root - 1] = (f"<< /Type /Outlines /First {top[0]} 0 R /Last {top[-1]} 0 R "
                          f"/Count {len(top)} >>")
        objs[0] = f"<< /Type /Catalog /Pages 2 0 R /Outlines {root} 0 R >>"
    info = None
    if title:
        objs.append(f"<< /Title ({title}) /Author (Test Author) >>")
        info = len(objs)
    out = b"%PDF-1.4\n"
    offsets = []
    for n, body in enumerate(objs, 1):
        offsets.append(len(out))
        out += f"{n} 0 obj\n{body}\nendobj\n".encode("latin-1")
    xref = len(out)
    out += f"xref\n0 {len(objs) + 1}\n0000000000 65535 f \n".encode()
    for off in offsets:
        out += f"{off:010d} 00000 n \n".encode()
    trailer = f"<< /Size {len(objs) + 1} /Root 1 0 R" + (f" /Info {info} 0 R" if info else "")
    out += f"trailer\n{trailer} >>\nstartxref\n{xref}\n%%EOF\n".encode()
    return out


def search_one(idx, q, k, **kw):
    """One query's ``(ids, scores)`` from :func:`evireform.engine.search_index`, the padding
    dropped."""
    from evireform.engine import search_index
    ids, scores = search_index(idx, np.asarray(q, np.float32)[None, :], k, **kw)
    keep = ids[0] >= 0
    return ids[0][keep], scores[0][keep]


def untimed(rec):
    """A result record without its trace's stage timings (the one part two runs of the same
    question differ in), after checking both name the stages."""
    assert isinstance(rec["trace"].get("timings_ms"), dict), rec["trace"]
    return {**rec, "trace": {k: v for k, v in rec["trace"].items() if k != "timings_ms"}}
