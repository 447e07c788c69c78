# Types of the package componentize-py 0.25.1 generates at build time from
# wit/handler.wit (`sluice:handler@0.2.0`), as far as the sluice SDK uses it.
# The export protocol differs by world (`handle` for `handler`,
# `handle_batch` for `batch-handler`); the SDK only asks which it has.
from typing import Protocol

class WitWorld(Protocol): ...
