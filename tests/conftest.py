"""Shared test settings: two threads, as on the CI machine, so timings and numerics match it."""

import torch

torch.set_num_threads(2)
