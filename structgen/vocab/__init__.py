"""Vocabulary: the exact bytes of every token, special-token flags, EOS ids, and the token trie."""

from structgen.vocab._trie import TokenTrie
from structgen.vocab._vocabulary import Vocabulary

__all__ = ["TokenTrie", "Vocabulary"]
