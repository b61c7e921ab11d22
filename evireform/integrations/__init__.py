"""Adapters for RAG frameworks: :mod:`.langchain` (extra ``langchain``) and
:mod:`.llama_index` (extra ``llamaindex``).  Importing evireform never imports either
framework; importing an adapter without its framework raises an ``ImportError`` that names
the extra to install."""
