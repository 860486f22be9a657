"""LangChain adapters for convmem (filled by the LangChain issue)."""
