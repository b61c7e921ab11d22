"""Build steps, the Ray Data build and sharded search (local and in Ray actors)."""
import json

import numpy as np
import pytest

from evireform.build import concat_batches, embed_batch, extract_batch, passage_batch
from evireform.corpus import load_corpus
from evireform.embed import HashingEmbedder, get_embedder
from evireform.extract import HeuristicExtractor
from evireform.index import PropositionIndex, arrays_equal
from evireform.engine.shards import Shard, ShardedSearcher, shard_bounds
from evireform.types import Passage, Proposition
from distributed_common import _emb  # noqa: F401


def _passages(n=30):
    names = ["Alice Smith", "Bob Jones", "Paris", "Berlin", "Acme Corp", "River Nile"]
    return [Passage(f"p{i}", f"Title {i}",
                    f"{names[i % 6]} met {names[(i * 5 + 1) % 6]} in {names[(i + 2) % 6]}. "
                    f"Later {names[(i + 3) % 6]} wrote about it.")
            for i in range(n)]


# --------------------------------------------------------------------------- batch steps
def test_steps_in_any_cut_and_order_give_the_local_build(rng):
    ps = _passages(40)
    e = HashingEmbedder(64)
    local = PropositionIndex.build(ps, e, show_progress=False)
    cuts = np.sort(rng.choice(np.arange(1, 40), 5, replace=False))
    bounds = list(zip([0, *cuts], [*cuts, 40]))
    batches = [embed_batch(extract_batch(passage_batch(ps[lo:hi], lo), HeuristicExtractor()),
                           e) for lo, hi in bounds]
    rng.shuffle(batches)
    again = PropositionIndex.from_batches(ps, batches, e.name, e.dim, meta=local.meta)
    assert arrays_equal(local, again)
    assert again.prop_texts == local.prop_texts


def test_step_columns_are_checked_and_empty_batches_work():
    e = HashingEmbedder(8)
    with pytest.raises(ValueError, match="lacks column"):
        extract_batch({"id": ["a"]}, HeuristicExtractor())
    with pytest.raises(ValueError, match="unequal length"):
        embed_batch({"pos": [0, 1], "ord": [0], "text": ["x"], "entities": ["[]"]}, e)
    empty = embed_batch(extract_batch(passage_batch([]), HeuristicExtractor()), e)
    assert empty["embedding"].shape == (0, 8)
    rows = concat_batches([empty], 8)
    assert len(rows["pos"]) == 0
    with pytest.raises(ValueError, match="processed twice"):
        one = embed_batch(extract_batch(passage_batch(_passages(2)), HeuristicExtractor()), e)
        concat_batches([one, one], 8)


def test_entity_mentions_survive_the_columnar_form():
    ps = [Passage("a", "", 'He said "Zoë" and \u00e9t\u00e9 to O\'Brien & Co.')]
    b = extract_batch(passage_batch(ps), HeuristicExtractor())
    direct = HeuristicExtractor().extract(ps[0])
    assert [tuple(json.loads(x)) for x in b["entities"]] == [p.entities for p in direct]


# --------------------------------------------------------------------------- Ray
@pytest.fixture(scope="module")
def ray_local():
    ray = pytest.importorskip("ray")
    pytest.importorskip("ray.data")
    from evireform.distributed import ensure_ray
    started = ensure_ray(num_cpus=3)  # logical CPUs: 2 actors + extraction tasks
    yield ray
    if started:
        ray.shutdown()


def test_ray_build_equals_local_build_on_musique(ray_local, data_dir, tmp_path):
    from evireform.distributed import build_index_ray, read_shard
    corpus = data_dir / "musique" / "musique_corpus.json"
    ps = load_corpus(corpus)
    e = get_embedder("hashing-256")
    local = PropositionIndex.build(ps, e, show_progress=False)
    shards = tmp_path / "shards"
    path, idx, _ = build_index_ray(corpus, "hashing-256", tmp_path / "idx",
                                   shard_dir=shards, passages_per_batch=300,
                                   show_progress=False)
    assert arrays_equal(local, idx) and idx.meta == local.meta
    assert idx.prop_texts == local.prop_texts and idx.entity_names == local.entity_names
    assert arrays_equal(local, PropositionIndex.load(path))
    files = sorted(shards.glob("props-*.npz"))
    assert len(files) >= 2 and sum(len(read_shard(f)["pos"]) for f in files) == local.n_props
    # a shard edited on disk is refused by its content address
    z = dict(np.load(files[0]))
    z["pos"] = z["pos"] + 1
    np.savez(files[0], **z)
    with pytest.raises(ValueError, match="does not hold"):
        read_shard(files[0])


def test_ray_build_of_lower_cased_text_picks_phrases_like_the_local_build(ray_local,
                                                                          data_dir):
    """--extractor auto on lower-cased text: the phrase extractor, fitted on the driver and
    pickled to the workers, gives the local build's index and records the same choice."""
    from evireform.distributed import build_ray
    ps = [Passage(p.id, p.title.lower(), p.text.lower())
          for p in load_corpus(data_dir / "hotpotqa" / "hotpotqa_corpus.json")[:300]]
    e = get_embedder("hashing-64")
    local = PropositionIndex.build(ps, e, show_progress=False)
    idx = build_ray(ps, "hashing-64", passages_per_batch=100, show_progress=False)
    assert local.meta["extractor_choice"]["chosen"] == "phrases"
    assert idx.meta == local.meta and arrays_equal(local, idx)
    assert idx.entity_names == local.entity_names


def test_ray_sharded_searcher_equals_unsharded(ray_local, rng):
    from evireform.distributed import RayShardedSearcher
    from evireform.kernels import cosine_topk_batch
    H = _emb(rng, 2001, 32)
    Q = _emb(rng, 12, 32)
    with RayShardedSearcher(H, 3, num_cpus=0) as s:
        for k in (1, 17, 5000):
            got = s.search_batch(Q, k)
            want = cosine_topk_batch(H, Q, k)
            np.testing.assert_array_equal(got[0], want[0])
            np.testing.assert_array_equal(got[1], want[1])


def test_cli_index_ray(ray_local, tmp_path, capsys):
    from evireform.cli import main
    corpus = tmp_path / "c.json"
    corpus.write_text(json.dumps([{"title": p.title, "text": p.text} for p in _passages(25)]))
    assert main(["index", str(corpus), str(tmp_path / "idx"), "--ray", "--embedder",
                 "hashing-64", "--quiet", "--json"]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["reload_identical"] and stats["passages"] == 25
    local = PropositionIndex.build(load_corpus(corpus), HashingEmbedder(64), show_progress=False)
    assert arrays_equal(local, PropositionIndex.load(tmp_path / "idx"))
    with pytest.raises(SystemExit):
        main(["index", str(corpus), str(tmp_path / "idx2"), "--ray", "--extractor", "x.json",
              "--embedder", "hashing-64", "--quiet"])


def test_scale_curve_runs_small_sizes_and_skips_what_does_not_fit(tmp_path):
    from evireform.bench.scale import run_scale, scale_table
    rows = run_scale([3000, 10**12], tmp_path, n_queries=3, log=lambda m: None)
    r = rows[0]
    assert r["propositions"] == 3000 and r["disk_bytes"] > 3000 * 384 * 4
    assert 0 < r["search_p50_s"] <= r["p50_s"] and r["build_peak_anon"] > 0
    assert r["load_tier"] == "fast" and r["load_full_s"] > 0  # the save stamped the files
    assert "skipped" in rows[1]
    table = scale_table(rows)
    assert "| 3,000 |" in table and "skipped" in table
    assert not (tmp_path / "evireform-scale" / "synthetic-3000").exists()  # removed after


def test_ray_build_caps_actors_at_the_cpus(ray_local):
    """--ray-workers 12 on a small machine: capped at the CPUs with a warning, same index."""
    from evireform.distributed import build_ray
    with pytest.warns(UserWarning, match="capped at"):
        idx = build_ray(_passages(12), "hashing-16", concurrency=12, show_progress=False)
    local = PropositionIndex.build(_passages(12), HashingEmbedder(16), show_progress=False)
    assert arrays_equal(local, idx)


def test_ray_build_refuses_gpus_the_cluster_lacks(ray_local):
    from evireform.distributed import build_ray
    if ray_local.cluster_resources().get("GPU", 0):
        pytest.skip("this machine has GPUs")
    with pytest.raises(ValueError, match="GPUs"):
        build_ray(_passages(4), "hashing-16", num_gpus=1, show_progress=False)


def test_saved_shards_load_checked_locally_and_in_ray_actors(ray_local, rng, tmp_path):
    from evireform.distributed import RayShardedSearcher
    from evireform.store import IndexFormatError
    ps = [Passage(f"p{i}", "", f"passage {i}") for i in range(50)]
    H = _emb(rng, 600, 16)
    props = [Proposition(f"prop {i}", f"p{i % 50}", ()) for i in range(600)]
    idx = PropositionIndex.from_propositions(ps, props, H, "x", hnsw=False)
    idx_dir = idx.save(tmp_path / "idx")
    idx = PropositionIndex.load(idx_dir)
    s = ShardedSearcher.from_index(idx, 3, hnsw=True)
    Q = _emb(rng, 7, 16)
    want = s.search_batch(Q, 20)
    d = s.save(tmp_path / "shards")
    again = ShardedSearcher.load(d, idx)
    for a, b in zip(again.search_batch(Q, 20), want):
        np.testing.assert_array_equal(a, b)
    with RayShardedSearcher.load(d, idx_dir, num_cpus=0) as r:
        for a, b in zip(r.search_batch(Q, 20), want):
            np.testing.assert_array_equal(a, b)
    with pytest.raises(FileExistsError):
        s.save(d)
    s.save(d, overwrite=True)
    with pytest.raises(FileExistsError, match="not a shard directory"):
        s.save(idx_dir, overwrite=True)
    # an index of another size, an edited graph file, a broken manifest
    other = PropositionIndex.from_propositions(ps, props[:500], H[:500], "x", hnsw=False)
    with pytest.raises(IndexFormatError, match="made for 600"):
        ShardedSearcher.load(d, other)
    f = d / "shard-1.hnsw"
    raw = bytearray(f.read_bytes())
    raw[-1] ^= 1
    f.write_bytes(bytes(raw))
    with pytest.raises(IndexFormatError, match="SHA-256"):
        ShardedSearcher.load(d, idx)
    (d / "shards.json").write_text('{"format": "evireform-shards", "version": 1, "dim": 16, '
                                   '"n_props": 600, "shards": [{"lo": 0, "hi": 300, '
                                   '"hnsw": null}, {"lo": 200, "hi": 600, "hnsw": null}]}')
    with pytest.raises(IndexFormatError, match="contiguous"):
        ShardedSearcher.load(d, idx)


def test_llm_extractor_factory_names_itself_without_a_client(tmp_path):
    from evireform.distributed import LLMExtractorFactory, _check_extractor
    from evireform.llm import LLMConfig, extractor_name
    cache = tmp_path / "replies.sqlite"
    f = LLMExtractorFactory(LLMConfig(base_url="http://127.0.0.1:9/v1", model="m",
                                      cache_path=str(cache)))
    assert _check_extractor(f) == extractor_name("m") == "llm-extract:m:v1"
    assert list(tmp_path.iterdir()) == []  # no client, no cache file on the driver
    for bad in (None, 42):  # build_ray resolves None ("auto") before it checks
        with pytest.raises(TypeError):
            _check_extractor(bad)


def test_shard_saves_share_the_atomic_swap(rng, tmp_path, monkeypatch):
    """A shard directory is saved through store.write_dir_atomically: a failure between the
    two renames leaves the previous layout, put back by the next save."""
    import evireform.store.atomic as store
    H = rng.standard_normal((40, 8)).astype(np.float32)
    H /= np.linalg.norm(H, axis=1, keepdims=True)
    two = ShardedSearcher([Shard.build(H[:20], 0), Shard.build(H[20:], 20)])
    three = ShardedSearcher([Shard.build(H[lo:hi], lo) for lo, hi in shard_bounds(40, 3)])
    two.save(tmp_path / "sh")
    real, calls = store._replace, []

    def replace(src, dst):
        calls.append(1)
        real(src, dst)
        if len(calls) == 1:
            raise OSError("killed between the renames")
    monkeypatch.setattr(store, "_replace", replace)
    with pytest.raises(OSError, match="killed"):
        three.save(tmp_path / "sh", overwrite=True)
    monkeypatch.setattr(store, "_replace", real)
    man = json.loads((tmp_path / "sh" / "shards.json").read_text())
    assert len(man["shards"]) == 2  # the previous layout is back
    three.save(tmp_path / "sh", overwrite=True)
    assert len(json.loads((tmp_path / "sh" / "shards.json").read_text())["shards"]) == 3
    assert not list(tmp_path.glob(".sh.*"))
