from typing import List, Optional, Tuple

import fakehost


def get(key: str) -> Optional[str]:
    return fakehost.HOST.config.get(key)


def get_all() -> List[Tuple[str, str]]:
    return list(fakehost.HOST.config.items())
