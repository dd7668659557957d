"""Test configuration shared by the whole suite.

* CUDA kernels run in numba's simulator unless ``NUMBA_ENABLE_CUDASIM`` is
  already set (set it to 0 on a machine with a GPU to test the real thing).
  It must be set before numba.cuda is first imported, hence here.
* hypothesis runs deterministically and without deadlines: JIT compilation
  makes the first example of a test slow.
"""

import os

os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")

from hypothesis import settings

settings.register_profile("propopt", deadline=None, derandomize=True, max_examples=40)
settings.load_profile("propopt")
