"""Engine unit tests. They run in-process on one torch thread, as the engine server does by default: on the shared
2-core machines torch's default (one OpenMP thread per core) made this suite cost twice the CPU time (27-32 s of
user time vs 14 s, torch 2.13) while other work ran, its spinning threads waiting on descheduled peers."""

import torch

torch.set_num_threads(1)
