"""Write options: the typed registry (`options`) and the resolved, immutable `Config`.

Layers (pyproject.toml, docs/DESIGN.md §3): may import storage, util,
errors.

The option constants live in `upsertlake.config.options` (import it as a module, e.g.
`from upsertlake.config import options as opt; cfg.get(opt.INDEX_TYPE)`), so that this package
namespace stays small; the names needed to resolve and inspect options are re-exported here.
"""

from upsertlake.config import options
from upsertlake.config.options import (
    DYNAMIC_PREFIXES,
    OPTIONS,
    Config,
    Option,
    hudi_keys,
    is_hudi_key,
)

__all__ = [
    "DYNAMIC_PREFIXES",
    "OPTIONS",
    "Config",
    "Option",
    "hudi_keys",
    "is_hudi_key",
    "options",
]
