"""torchrun jobs: launching every run with PyTorch's launcher and comparing rank by rank."""
