#!/usr/bin/env bash
# The model split over GPUs, one rank each, all-gathering over NCCL, against one GPU's logits
# (test-gpu --nccl); a skip (77) where the machine has fewer GPUs than the split needs.
exec ./tests/test-gpu --nccl
