"""Token-mask computation (vocabulary walk × automaton) and the packed bitmask helpers."""

from structgen.masks._bitmask import (
    allocate_bitmask,
    apply_bitmask,
    bitmask_words,
    pack_bool_mask,
    unpack_bitmask,
    without_tokens,
)
from structgen.masks._kernel import Events
from structgen.masks._walker import TokenClasses, TokenMaskWalker, token_classes

__all__ = [
    "Events",
    "TokenClasses",
    "TokenMaskWalker",
    "allocate_bitmask",
    "apply_bitmask",
    "bitmask_words",
    "pack_bool_mask",
    "token_classes",
    "unpack_bitmask",
    "without_tokens",
]
