"""The README's LangChain and LlamaIndex examples on one HotpotQA question.

Usage: ``python scripts/integrations_demo.py [DATA_DIR]`` (default ../shared/data).  Builds
(or reuses) the cached HotpotQA index with the default embedder, saves it once to
``/tmp/evireform-hotpot.idx``, then runs both adapters on the first question.
"""
import json
import sys
from pathlib import Path

from evireform.cache import cached_index
from evireform.embed import MiniLMEmbedder

data = Path(sys.argv[1] if len(sys.argv) > 1 else "../shared/data")
question = json.loads((data / "hotpotqa" / "hotpotqa.json").read_text())[0]["question"]
idx, _, _ = cached_index(data / "hotpotqa" / "hotpotqa_corpus.json", MiniLMEmbedder(),
                         show_progress=False)
path = Path("/tmp/evireform-hotpot.idx")
if not path.exists():
    idx.save(path)
print("Q:", question)

# --- LangChain (README example)
from evireform.integrations.langchain import EviReformRetriever

retriever = EviReformRetriever.from_index_dir("/tmp/evireform-hotpot.idx", k=3)
for doc in retriever.invoke(question):
    m = doc.metadata
    print(f"langchain   {m['rank']}. {m['title']:<32} score {m['score']:.4f} "
          f"(question {m['from_question']:.3f}, residual {m['from_residual']:.3f}, "
          f"propagation {m['from_propagation']:.3f})")
print("langchain   residual queries:", doc.metadata["residual_queries"])

# --- LlamaIndex (README example)
from evireform.integrations.llama_index import EviReformRetriever as LIRetriever

li = LIRetriever.from_defaults(index_dir="/tmp/evireform-hotpot.idx", similarity_top_k=3)
for r, n in enumerate(li.retrieve(question), 1):
    print(f"llama_index {r}. {n.node.metadata['title']:<32} "
          f"score {n.score:.4f}  id {n.node.node_id}")
