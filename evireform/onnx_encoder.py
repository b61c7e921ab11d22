"""Sentence-transformers models through ONNX Runtime: the query path without torch.

A sentence-transformers model of the usual shape (``modules.json``: a Transformer, mean or
CLS Pooling, optionally Normalize; ``tokenizer.json`` present) is exported once to ONNX
with the pooling and normalisation inside the graph (a BERT model built from its weights by
:func:`bert_graph`, without torch; another through torch's exporter), and cached under
``$EVIREFORM_CACHE/onnx`` (default ``~/.cache/evireform/onnx``), keyed by the model
directory, its weight files' sizes and modification times, and the export version.  The
export needs the ``onnx`` package (and torch for a model that is not BERT); every later
process loads the cached file with ``onnxruntime`` and tokenizes with ``tokenizers``, never
importing torch.

Embeddings equal the torch path's within 1e-5 per coordinate (tested; about 2e-7 on
all-MiniLM-L6-v2).  ``quantize=True`` uses a dynamically int8-quantised copy (smaller,
faster on CPU, not equal: its recall change is measured by ``scripts/onnx_int8_recall.py``).
"""
from __future__ import annotations

from typing import Any, Sequence, TYPE_CHECKING

import hashlib
import json
import logging
import os
import platform
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

if TYPE_CHECKING:  # annotations only
    from .types import StrPath

#: bump when the exported graph changes (the cache key includes it)
EXPORT_VERSION = 2

log = logging.getLogger(__name__)


class OnnxUnsupported(ValueError):
    """The model is not of a shape this exporter handles, or onnxruntime is missing."""


def cache_root() -> Path:
    """``$EVIREFORM_CACHE/onnx`` if set, else ``~/.cache/evireform/onnx``."""
    env = os.environ.get("EVIREFORM_CACHE")
    return (Path(env) if env else Path.home() / ".cache" / "evireform") / "onnx"


def available() -> bool:
    """True when onnxruntime and tokenizers import."""
    try:
        import onnxruntime  # noqa: F401
        import tokenizers  # noqa: F401
    except ImportError:
        return False
    return True


def model_layout(model_dir: StrPath) -> dict[str, Any]:
    """What the export needs from a sentence-transformers directory: pooling mode,
    normalisation and max_seq_length; :class:`OnnxUnsupported` otherwise."""
    d = Path(model_dir)
    try:
        modules = json.loads((d / "modules.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise OnnxUnsupported(f"{d}: no readable modules.json ({exc})") from None
    types = [m.get("type", "").rsplit(".", 1)[-1] for m in modules]
    if types not in (["Transformer", "Pooling"], ["Transformer", "Pooling", "Normalize"]) \
            or modules[0].get("path", "") != "" or not (d / "tokenizer.json").is_file():
        raise OnnxUnsupported(f"{d}: modules {types} are not Transformer + Pooling "
                              "[+ Normalize] with a tokenizer.json")
    pool = json.loads((d / modules[1]["path"] / "config.json").read_text(encoding="utf-8"))
    modes = [k for k, v in pool.items() if k.startswith("pooling_mode") and v]
    if modes not in (["pooling_mode_mean_tokens"], ["pooling_mode_cls_token"]):
        raise OnnxUnsupported(f"{d}: pooling {modes} (only mean or CLS is exported)")
    seq = 512
    with_cfg = d / "sentence_bert_config.json"
    if with_cfg.is_file():
        seq = int(json.loads(with_cfg.read_text(encoding="utf-8")).get("max_seq_length", seq))
    return {"pooling": "mean" if "mean" in modes[0] else "cls",
            "normalize": types[-1] == "Normalize", "max_seq_length": seq}


def _key(model_dir: Path, layout: dict[str, Any], quantize: bool) -> str:
    h = hashlib.sha256()
    h.update(str(model_dir.resolve()).encode())
    for f in sorted(model_dir.iterdir()):
        if f.is_file() and f.suffix in (".safetensors", ".bin", ".json"):
            st = f.stat()
            h.update(f"{f.name}:{st.st_size}:{st.st_mtime_ns}".encode())
    h.update(json.dumps([layout, EXPORT_VERSION, bool(quantize)], sort_keys=True).encode())
    return h.hexdigest()[:20]


def cached_model(model_dir: StrPath, *, quantize: bool = False, cache_dir: StrPath | None=None) -> Path | None:
    """The exported file of ``model_dir`` when the cache holds it, else None (nothing is
    exported: what the query path asks before it picks an encoder)."""
    d = Path(model_dir)
    try:
        layout = model_layout(d)
    except OnnxUnsupported:
        return None
    root = Path(cache_dir) if cache_dir else cache_root()
    name = "model-int8.onnx" if quantize else "model.onnx"
    f = root / _key(d, layout, quantize) / name
    return f if f.is_file() else None


#: beside an exported model: the largest difference per coordinate the document probe saw
#: between its embeddings and torch's (:meth:`evireform.embed.SentenceTransformerEmbedder.encode`)
PROBE_FILE = "probe.json"


def probe_verdict(model_path: StrPath) -> float | None:
    """The difference the document probe recorded for the exported file ``model_path``,
    or None when none was (or the record is unreadable, or of another file)."""
    f = Path(model_path).with_name(PROBE_FILE)
    try:
        got = json.loads(f.read_text(encoding="utf-8"))
        if got.get("model") != Path(model_path).name:
            return None
        diff = float(got["max_diff"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    return diff if np.isfinite(diff) and diff >= 0 else None


def record_probe(model_path: StrPath, max_diff: float) -> None:
    """Keep the document probe's verdict beside ``model_path`` (written whole or not at all;
    a read-only cache keeps none, and the next process probes again)."""
    f = Path(model_path).with_name(PROBE_FILE)
    try:
        fd, tmp = tempfile.mkstemp(prefix=".probe-", suffix=".json", dir=f.parent)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump({"model": Path(model_path).name, "max_diff": float(max_diff)}, fh)
        os.replace(tmp, f)
    except OSError:
        pass


def read_safetensors(path: StrPath) -> dict[str, np.ndarray]:
    """The tensors of a ``.safetensors`` file as numpy arrays (little-endian F32, F16 and
    I64; the format is an 8-byte header length, a JSON header of dtypes, shapes and byte
    offsets, then the bytes): no torch and no safetensors package needed."""
    dtypes = {"F32": "<f4", "F16": "<f2", "I64": "<i8", "I32": "<i4"}
    raw = Path(path).read_bytes()
    n = int.from_bytes(raw[:8], "little")
    head = json.loads(raw[8:8 + n].decode("utf-8"))
    out = {}
    for name, t in head.items():
        if name == "__metadata__":
            continue
        lo, hi = t["data_offsets"]
        if t["dtype"] not in dtypes:
            raise OnnxUnsupported(f"{path}: tensor {name} of dtype {t['dtype']}")
        out[name] = np.frombuffer(raw, dtypes[t["dtype"]], (hi - lo) // np.dtype(
            dtypes[t["dtype"]]).itemsize, 8 + n + lo).reshape(t["shape"])
    return out


def bert_graph(model_dir: StrPath, layout: dict[str, Any]) -> Any:
    """The ONNX model of a BERT encoder (``config.json``: ``BertModel``, absolute
    positions, GELU) with its pooling and L2 normalisation, built from its
    ``model.safetensors`` with the ``onnx`` package alone: the graph a torch export gives
    (embeddings, layer-normalised sums, self-attention with the padding masked by the
    float32 minimum, erf GELU), without torch or transformers (issue 84: the default
    embedder installs and runs without them).  :class:`OnnxUnsupported` for another
    architecture."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    d = Path(model_dir)
    try:
        cfg = json.loads((d / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise OnnxUnsupported(f"{d}: no readable config.json ({exc})") from None
    if cfg.get("architectures") != ["BertModel"] or cfg.get("model_type") != "bert" \
            or cfg.get("hidden_act") != "gelu" \
            or cfg.get("position_embedding_type", "absolute") != "absolute" \
            or not (d / "model.safetensors").is_file():
        raise OnnxUnsupported(f"{d}: not a BERT model with model.safetensors")
    w = read_safetensors(d / "model.safetensors")
    w = {k[5:] if k.startswith("bert.") else k: v for k, v in w.items()}
    D, H = int(cfg["hidden_size"]), int(cfg["num_attention_heads"])
    L, eps = int(cfg["num_hidden_layers"]), float(cfg.get("layer_norm_eps", 1e-12))
    dh = D // H
    nodes, inits = [], []

    def const(name: str, arr: Any) -> str:
        inits.append(numpy_helper.from_array(np.ascontiguousarray(arr), name))
        return name

    def node(op: str, ins: list[str], out: str, **attrs: Any) -> str:
        nodes.append(helper.make_node(op, ins, [out], name=f"n{len(nodes)}", **attrs))
        return out

    def weight(key: str) -> str:
        try:
            return const(key, np.asarray(w[key], np.float32))
        except KeyError:
            raise OnnxUnsupported(f"{d}: model.safetensors lacks {key}") from None

    def linear(x: str, key: str, out: str) -> str:  # x @ W.T + b
        wt = const(key + ".weight.T", np.asarray(w[key + ".weight"], np.float32).T)
        return node("Add", [node("MatMul", [x, wt], out + ".mm"), weight(key + ".bias")],
                    out)

    def norm(x: str, key: str, out: str) -> str:
        return node("LayerNormalization", [x, weight(key + ".weight"),
                                           weight(key + ".bias")], out, axis=-1,
                    epsilon=eps)
    # embeddings: words + positions 0..S-1 + token types, layer-normalised
    # positions as a torch export writes them (ONNX Runtime's fusions expect this shape):
    # the first S of the position ids 0..511, S sliced off the input's shape
    const("zero", np.array(0, np.int64))
    const("s_lo", np.array([0], np.int64))
    const("s_one", np.array([1], np.int64))
    const("s_two", np.array([2], np.int64))
    const("position_ids", np.arange(int(cfg.get("max_position_embeddings", 512)),
                                    dtype=np.int64)[None])
    node("Shape", ["input_ids"], "shape")
    node("Slice", ["shape", "s_one", "s_two"], "seq")
    node("Slice", ["position_ids", "s_lo", "seq", "s_one"], "positions")
    x = node("Add", [node("Add", [
        node("Gather", [weight("embeddings.word_embeddings.weight"), "input_ids"], "we"),
        node("Gather", [weight("embeddings.position_embeddings.weight"), "positions"],
             "pe")], "wpe"),
        node("Gather", [weight("embeddings.token_type_embeddings.weight"),
                        "token_type_ids"], "te")], "emb")
    x = norm(x, "embeddings.LayerNorm", "h0")
    # the padding mask added to every head's scores: (1 - mask) * float32 min
    const("f_one", np.array(1.0, np.float32))
    const("f_min", np.array(np.finfo(np.float32).min, np.float32))
    const("axes12", np.array([1, 2], np.int64))
    node("Cast", ["attention_mask"], "mask_f", to=TensorProto.FLOAT)
    node("Mul", [node("Sub", ["f_one", node("Unsqueeze", ["mask_f", "axes12"], "mask4")],
                      "unmask"), "f_min"], "bias4")
    const("heads", np.array([0, 0, H, dh], np.int64))
    const("merged", np.array([0, 0, D], np.int64))
    const("scale", np.array(1.0 / np.sqrt(dh), np.float32))
    const("sqrt2", np.array(np.sqrt(2.0), np.float32))
    const("half", np.array(0.5, np.float32))
    for i in range(L):
        p = f"encoder.layer.{i}"

        def split(t: str, perm: list[int], name: str) -> str:
            return node("Transpose", [node("Reshape", [t, "heads"], name + ".r")], name,
                        perm=perm)
        q = split(linear(x, f"{p}.attention.self.query", f"q{i}"), [0, 2, 1, 3], f"qh{i}")
        k = split(linear(x, f"{p}.attention.self.key", f"k{i}"), [0, 2, 3, 1], f"kh{i}")
        v = split(linear(x, f"{p}.attention.self.value", f"v{i}"), [0, 2, 1, 3], f"vh{i}")
        s = node("Add", [node("Mul", [node("MatMul", [q, k], f"qk{i}"), "scale"],
                              f"qks{i}"), "bias4"], f"sc{i}")
        a = node("MatMul", [node("Softmax", [s], f"pr{i}", axis=-1), v], f"ctx{i}")
        a = node("Reshape", [node("Transpose", [a], f"ctxt{i}", perm=[0, 2, 1, 3]),
                             "merged"], f"ctxm{i}")
        a = linear(a, f"{p}.attention.output.dense", f"ao{i}")
        x1 = norm(node("Add", [a, x], f"ar{i}"), f"{p}.attention.output.LayerNorm", f"a{i}")
        u = linear(x1, f"{p}.intermediate.dense", f"u{i}")
        g = node("Mul", [node("Mul", [u, "half"], f"uh{i}"), node("Add", [node(
            "Erf", [node("Div", [u, "sqrt2"], f"ud{i}")], f"ue{i}"), "f_one"], f"ue1{i}")],
            f"g{i}")
        o = linear(g, f"{p}.output.dense", f"o{i}")
        x = norm(node("Add", [o, x1], f"or{i}"), f"{p}.output.LayerNorm", f"h{i + 1}")
    # pooling (mean over the unpadded tokens, or the first token), then L2 normalisation
    const("axis1", np.array([1], np.int64))
    const("axis_last", np.array([-1], np.int64))
    if layout["pooling"] == "cls":
        v = node("Gather", [x, "zero"], "pooled", axis=1)
    else:
        m3 = node("Unsqueeze", ["mask_f", "axis_last"], "mask3")
        const("tiny", np.array(1e-9, np.float32))
        v = node("Div", [node("ReduceSum", [node("Mul", [x, m3], "masked"), "axis1"],
                              "summed", keepdims=0),
                         node("Max", [node("ReduceSum", [m3, "axis1"], "count", keepdims=0),
                                      "tiny"], "count_c")], "pooled")
    if layout["normalize"]:
        const("eps12", np.array(1e-12, np.float32))
        n2 = node("ReduceL2", [v], "l2", axes=[-1], keepdims=1)  # axes: an attribute in 17
        v = node("Div", [v, node("Max", [n2, "eps12"], "l2c")], "normed")
    node("Identity", [v], "embedding")
    ins = [helper.make_tensor_value_info(n, TensorProto.INT64, ["batch", "seq"])
           for n in ("input_ids", "attention_mask", "token_type_ids")]
    outs = [helper.make_tensor_value_info("embedding", TensorProto.FLOAT, ["batch", D])]
    graph = helper.make_graph(nodes, "bert", ins, outs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                              producer_name="evireform")
    model.ir_version = min(model.ir_version, 8)
    onnx.checker.check_model(model)
    return model


def export(model_dir: StrPath, out: Path, layout: dict[str, Any]) -> None:
    """Export the transformer with pooling and L2 normalisation in the graph: a BERT model
    built directly from its weights (:func:`bert_graph`: the ``onnx`` package alone, no
    torch), any other through torch's exporter (needs torch, transformers and onnx);
    written to a temporary file and renamed into place.  Silent: the tracer's warnings and
    the loaders' progress bars go to this module's log (DEBUG)."""
    import warnings
    t0 = time.perf_counter()
    try:
        model = bert_graph(model_dir, layout)
    except OnnxUnsupported as exc:
        log.debug("%s: exported through torch (%s)", model_dir, exc)
    else:
        _write_model(model, out)
        log.info("built %s as ONNX in %.1f s: %s", model_dir, time.perf_counter() - t0, out)
        return
    try:
        import torch
        from transformers import AutoModel
        from transformers.utils import logging as hf_logging
    except ImportError as exc:
        raise OnnxUnsupported(f"exporting to ONNX needs torch and transformers ({exc})") \
            from None
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            _export(torch, AutoModel, model_dir, out, layout)
    finally:
        if bars:
            hf_logging.enable_progress_bar()
    for w in caught:
        log.debug("ONNX export of %s: %s: %s", model_dir, w.category.__name__, w.message)
    log.info("exported %s to ONNX in %.1f s: %s", model_dir, time.perf_counter() - t0, out)


def _export(torch, AutoModel, model_dir: StrPath, out: Path, layout: dict[str, Any]) -> None:
    model = AutoModel.from_pretrained(str(model_dir), local_files_only=True).eval()
    pooling, normalize = layout["pooling"], layout["normalize"]

    class Pooled(torch.nn.Module):
        def __init__(self, m) -> None:
            super().__init__()
            self.m = m

        def forward(self, input_ids, attention_mask, token_type_ids):
            h = self.m(input_ids=input_ids, attention_mask=attention_mask,
                       token_type_ids=token_type_ids).last_hidden_state
            if pooling == "cls":
                v = h[:, 0]
            else:
                mask = attention_mask.unsqueeze(-1).to(h.dtype)
                v = (h * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(v, p=2, dim=1) if normalize else v

    ids = torch.ones((2, 8), dtype=torch.long)
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".export-", suffix=".onnx", dir=out.parent)
    os.close(fd)
    try:
        torch.onnx.export(
            Pooled(model), (ids, ids, torch.zeros_like(ids)), tmp,
            input_names=["input_ids", "attention_mask", "token_type_ids"],
            output_names=["embedding"], opset_version=17, dynamo=False,
            dynamic_axes={n: {0: "batch", 1: "seq"} for n in
                          ("input_ids", "attention_mask", "token_type_ids")}
            | {"embedding": {0: "batch"}})
        os.replace(tmp, out)
    except Exception as exc:
        Path(tmp).unlink(missing_ok=True)
        raise OnnxUnsupported(f"exporting {model_dir} to ONNX failed: {exc}") from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _write_model(model: Any, out: Path) -> None:
    """``model`` (an ONNX ModelProto) written to a temporary file renamed to ``out``."""
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".export-", suffix=".onnx", dir=out.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(model.SerializeToString())
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _quantize(src: Path, out: Path) -> None:
    from onnxruntime.quantization import QuantType, quantize_dynamic
    fd, tmp = tempfile.mkstemp(prefix=".quant-", suffix=".onnx", dir=out.parent)
    os.close(fd)
    try:
        quantize_dynamic(str(src), tmp, weight_type=QuantType.QInt8)
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _session(path: Path, threads: int):
    """An ONNX Runtime session over ``path``.  The graph optimised for this machine and
    onnxruntime version is saved beside the model the first time and loaded as it is later
    (MiniLM: 0.23 s instead of 0.50 s, ``scripts/query_embedding_cost.py``; what a one-shot
    command waits for)."""

    import onnxruntime as ort
    tag = hashlib.sha256(f"{ort.__version__}|{platform.machine()}|{platform.processor()}|"
                         f"{os.cpu_count()}".encode()).hexdigest()[:12]
    opt = path.with_name(f"{path.stem}.opt-{tag}.onnx")
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    # no busy-waiting between runs: the numba kernels run on the same cores between two
    # encoder calls of one question, and spinning threads would take their time
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    providers = ["CPUExecutionProvider"]
    if opt.is_file():
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        try:
            return ort.InferenceSession(str(opt), so, providers=providers)
        except Exception:  # unreadable: optimise again below
            opt.unlink(missing_ok=True)
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    fd, tmp = tempfile.mkstemp(prefix=".opt-", suffix=".onnx", dir=path.parent)
    os.close(fd)
    so.optimized_model_filepath = tmp
    try:
        sess = ort.InferenceSession(str(path), so, providers=providers)
        os.replace(tmp, opt)
    finally:
        Path(tmp).unlink(missing_ok=True)
    return sess


class OnnxEncoder:
    """A sentence-transformers model run by ONNX Runtime (see the module docstring).

    ``threads`` sets ONNX Runtime's intra-op threads (default: the CPU count).  Thread-safe:
    one session serves concurrent callers."""

    dim: Any
    model_dir: Path
    path: Path
    quantized: bool

    def __init__(self, model_dir: StrPath, *, max_seq_length: int | None = None,
                 threads: int | None = None, quantize: bool = False, cache_dir: StrPath | None=None) -> None:
        if not available():
            raise OnnxUnsupported("ONNX encoding needs onnxruntime and tokenizers: "
                                  "pip install 'evireform[onnx]'")
        from tokenizers import Tokenizer
        self.model_dir = Path(model_dir)
        layout = model_layout(self.model_dir)
        root = Path(cache_dir) if cache_dir else cache_root()
        base = root / _key(self.model_dir, layout, False) / "model.onnx"
        if not base.is_file():
            export(self.model_dir, base, layout)
        path = base
        if quantize:
            path = root / _key(self.model_dir, layout, True) / "model-int8.onnx"
            if not path.is_file():
                path.parent.mkdir(parents=True, exist_ok=True)
                _quantize(base, path)
        self.path, self.quantized = path, bool(quantize)
        self.max_seq_length: int = int(max_seq_length or layout["max_seq_length"])
        tok = Tokenizer.from_file(str(self.model_dir / "tokenizer.json"))
        tok.enable_truncation(max_length=self.max_seq_length)
        pad = tok.padding or {}
        tok.enable_padding(pad_id=int(pad.get("pad_id", 0)),
                           pad_token=str(pad.get("pad_token", "[PAD]")))
        self._tok = tok
        self._sess = _session(path, int(threads or os.cpu_count() or 1))
        self._inputs = {i.name for i in self._sess.get_inputs()}
        self.dim = int(self._sess.get_outputs()[0].shape[1] or 0) or None
        self._lock = threading.Lock()

    #: texts per run: sorted by length, small batches pad least (all-MiniLM-L6-v2, 2 CPU
    #: cores, 100 MuSiQue questions, ``scripts/query_embedding_cost.py``: 9.3 ms a question
    #: one at a time, 6.1-6.2 in batches of 4 to 16, 8.7 in batches of 64)
    batch_size = 8

    def encode(self, texts: Sequence[str], *, batch_size: int | None = None,
               show_progress: bool = False) -> np.ndarray:
        """Unit-norm float32 rows, one per text, in order (batches sorted by length, as
        sentence-transformers does, to pad less)."""
        texts = list(texts)
        if not texts:
            return np.zeros((0, self.dim or 0), np.float32)
        batch_size = int(batch_size or self.batch_size)
        order = np.argsort([-len(t) for t in texts], kind="stable")
        out = [None] * len(texts)
        bar = None
        if show_progress:  # counts texts, whatever the batch size
            from tqdm.auto import tqdm
            bar = tqdm(total=len(texts), desc="embed", unit="text")
        for lo in range(0, len(texts), batch_size):
            idx = order[lo:lo + batch_size]
            enc = self._tok.encode_batch([texts[i] for i in idx])
            ids = np.asarray([e.ids for e in enc], np.int64)
            feed = {"input_ids": ids,
                    "attention_mask": np.asarray([e.attention_mask for e in enc], np.int64)}
            if "token_type_ids" in self._inputs:
                feed["token_type_ids"] = np.asarray([e.type_ids for e in enc], np.int64)
            X = self._sess.run(None, feed)[0]
            for r, i in enumerate(idx):
                out[i] = X[r]
            if bar is not None:
                bar.update(len(idx))
        if bar is not None:
            bar.close()
        X = np.ascontiguousarray(np.stack(out), dtype=np.float32)
        if self.dim is None:
            self.dim = X.shape[1]
        return X
