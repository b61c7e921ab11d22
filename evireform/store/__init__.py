"""The on-disk index format: manifest, checksums, atomic save, verified load.

An index is a directory::

    manifest.json        format, version, embedder, dim, counts, meta, sha256 + size per file
    <array>.npy          one per array field of EntityGraph and PassageMap, plus embeddings
    strings.utf8         every string, UTF-8, back to back: passage ids, titles, texts,
                         metadata (JSON, "" when empty: each passage's own part),
                         proposition texts, entity names, the metadata parts that the
                         passages of a document share (each held once)
    string_offsets.npy   int64, string i = strings.utf8[offsets[i]:offsets[i + 1]]
    metadata_shared.npy  int64 per passage: the shared part its metadata opens with (-1: none)
    hnsw.bin             hnswlib graph (only when HNSW was built)
    verified.json        the stamp: what the last full verification saw of every file
    journal.evj          a service's updates since the last save (only between saves:
                         :mod:`evireform.store.journal`), replayed on load

Versions 1 and 2 held passages.json, propositions.json and entities.json instead of the two
string files; they load as before (version 1 without passage metadata).  Version 3 maps the
strings and decodes one when it is read (:mod:`evireform.strings`).  Version 4 holds the
metadata a document's passages share once (:class:`~evireform.strings.MetadataColumn`: a
file's front matter, source and title written once, not once per chunk); versions 3 and 4
load alike.

The array names, dtypes and shapes are declared once, on the dataclass fields of
:class:`~evireform.kernels.EntityGraph` and :class:`~evireform.kernels.PassageMap`
(:func:`array_specs`); nothing here spells them out again.

**Saving** (:func:`save_index`) refuses a target that exists and is not an evireform index
(unless ``overwrite=True``), and always refuses a file, the current directory or one of its
parents.  It writes a hidden temporary sibling, then swaps it in with two renames under an
advisory lock on the parent directory.  A process killed at any point leaves the previous index
or the new one at the target: when a kill falls between the two renames, the next save or load
puts the previous index back.  Leftover temporaries are removed by the next save.

**Loading** (:func:`load_index`) verifies in two tiers.  Any problem raises
:class:`IndexFormatError` naming the file and the value.

* The **fast** tier, on every load, checks what the kernels and the readers trust, so that no
  file can crash the process or reach outside the directory: manifest field types; file
  names confined to the format's own names (no paths); every file present with the size the
  manifest gives; every array's dtype and shape against the manifest counts; CSR pointers
  monotone and ending at nnz; every index array (entity, proposition, passage ids) within
  bounds; string offsets monotone, starting at 0 and ending at the blob's size; the
  ``hnsw.bin`` header, neighbour lists, levels and labels consistent before hnswlib reads it.
  Each is one vectorised pass over an array; nothing reads the embeddings or the texts.
* The **full** tier adds what costs a pass over the data: every file's sha256; the degree
  terms, the transpose and the passage map equal to a recomputation from the incidence;
  every embedding row finite and of unit norm; the HNSW graph's stored vectors equal to the
  embeddings; every string valid UTF-8, every passage's metadata a JSON object, passage ids
  unique (for the JSON files of versions 1-2: their shapes).  Then it writes the stamp
  ``verified.json``: for every file (the manifest included) its size, modification time,
  inode and a digest of its first and last 64 KiB.

``verify="auto"`` (the default) runs the fast tier when the stamp matches every file and the
full tier otherwise (a copied or downloaded index, an edited or replaced file, no stamp);
``"full"`` and ``"fast"`` force a tier (``evireform verify INDEX`` is the full one).
``"checksums"`` (an update's load: what it saves again it copies) is ``"auto"`` with every
file's sha256 checked in the fast case too: a stamped index was fully verified when it was
stamped, and the checksums catch what changed in its files since without a write (bit rot),
which a save copying the bytes would otherwise seal into the new generation.  A save
stamps what it wrote (the data came from this process).  The fast tier trusts the values of
files it knows were verified; when forced on files that were not, it still cannot crash the
process, only return wrong rankings (``tests/test_fuzz.py`` runs the crafted files against it).
"""
from __future__ import annotations

from .atomic import UnsafeTargetError, index_lock, recover, write_dir_atomically
from .format import (FORMAT, FORMAT_VERSION, MANIFEST, READ_VERSIONS, STAMP, TIERS, ArraySpec,
                     IndexFormatError, array_specs, check_target, disk_bytes, file_sha256,
                     index_arrays, index_files, looks_like_index, save_index, stamp_matches,
                     write_stamp)
from .hnsw_file import check_hnsw_file, load_hnsw
from .verify import NORM_TOLERANCE, Loaded, load_embeddings, load_index

__all__ = ["IndexFormatError", "UnsafeTargetError", "save_index", "load_index",
           "load_embeddings", "load_hnsw", "check_hnsw_file", "check_target", "index_lock",
           "write_dir_atomically", "recover", "index_files", "index_arrays", "array_specs",
           "file_sha256", "disk_bytes", "write_stamp", "stamp_matches", "looks_like_index",
           "Loaded", "ArraySpec", "FORMAT", "FORMAT_VERSION", "READ_VERSIONS", "MANIFEST",
           "STAMP", "TIERS", "NORM_TOLERANCE"]
