"""The search structures (evireform.engine.structures): int8 codes search exactly as
float32, are saved, carried across add and delete, and checked by the full tier."""

import numpy as np
import pytest

from evireform import IndexFormatError, PropositionIndex
from evireform.engine import quantize, scans_codes, search_index, structures_of


def test_int8_codes_search_exactly_and_persist(tmp_path, rng):
    from evireform.embed import HashingEmbedder
    emb = HashingEmbedder(32)
    texts = [f"Alpha {i} met Beta {i % 7} in City {i % 5}. Beta {i % 7} liked Gamma {i % 3}."
             for i in range(60)]
    idx = PropositionIndex.build(texts, emb, show_progress=False)
    Q = emb.encode(["Alpha 3 met whom?", "City 2", "Gamma 1 liked by?"])
    want = search_index(idx, Q, 25)
    quantize(idx, "int8")
    assert structures_of(idx).codes.dtype == np.int8 and scans_codes(idx, "auto")
    got = search_index(idx, Q, 25)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])
    back = PropositionIndex.load(idx.save(tmp_path / "ix"), verify="full")
    assert structures_of(back).codes is not None and back.meta["precision"] == "int8"
    np.testing.assert_array_equal(search_index(back, Q, 25)[0], want[0])
    grown = back.add(["Omega met Alpha 3 in City 9."], emb)  # codes carried
    f32 = search_index(grown, Q, 25, precision="float32")
    np.testing.assert_array_equal(search_index(grown, Q, 25)[0], f32[0])
    smaller = grown.delete([grown.passages[0].id])
    assert structures_of(smaller).codes.shape == smaller.embeddings.shape
    # an edited code is refused by the full tier
    from test_fuzz import craft
    craft(tmp_path / "ix", "codes", lambda a: np.where(np.arange(a.shape[0])[:, None] == 4,
                                                       a ^ 0x10, a).astype(np.int8))
    with pytest.raises(IndexFormatError, match="codes.npy: row 4 is not the int8 code"):
        PropositionIndex.load(tmp_path / "ix")
