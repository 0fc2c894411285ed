# why: grows the scale whenever S * growth_factor is a finite Python float; PyTorch keeps S in float32, where 2^128 overflows, so its scale stops at 2^127 while this one reaches 2^128, every scaled loss becomes inf and steps are skipped that PyTorch takes: only the update cell's large-scale sequence sees it (a TA would take the update points, nothing else)
# expect: {"gradscaler-unscale-test": 2, "gradscaler-scale-test": 1, "gradscaler-step-test": 2, "gradscaler-update-test": 0, "gradscaler-errors-test": 1, "gradscaler-state-test": 1, "gradscaler-e2e-test": 1}
# %% gradscaler-unscale: solution
# %% gradscaler-scaler: solution, edited
<<<<<<< solution
import torch

FLOAT32_MAX = torch.finfo(torch.float32).max
=======
import math

import torch
>>>>>>> mistake
<<<<<<< solution
                if grown <= FLOAT32_MAX:             # finite in float32, where PyTorch keeps the scale
                    self._scale = grown
=======
                if math.isfinite(grown):
                    self._scale = grown
>>>>>>> mistake
