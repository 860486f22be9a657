"""LlamaIndex adapters for convmem (filled by the LlamaIndex issue)."""
