"""Configuration: the write options (the typed registry `options`, each an `option.Option`, resolved
into an immutable `resolved.Config`) and the table's own settings (`table_config`, the model of
`hoodie.properties`, read and written through `properties_file`).

Layers (pyproject.toml, docs/DESIGN.md §3): may import storage, util,
errors.

The option constants live in `upsertlake.config.options` (import it as a module, e.g.
`from upsertlake.config import options as opt; cfg.get(opt.INDEX_TYPE)`), so that this package
namespace stays small; the names needed to resolve and inspect options are re-exported here.
"""

from upsertlake.config import options
from upsertlake.config.known_keys import DYNAMIC_PREFIXES, hudi_keys, is_hudi_key
from upsertlake.config.option import Option, option_list
from upsertlake.config.options import OPTIONS
from upsertlake.config.resolved import Config

__all__ = [
    "DYNAMIC_PREFIXES",
    "OPTIONS",
    "Config",
    "Option",
    "hudi_keys",
    "is_hudi_key",
    "option_list",
    "options",
]
