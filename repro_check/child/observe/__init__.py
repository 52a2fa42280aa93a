"""What observes a run: the step capture and its signals (gradients, parameters going into step
1, checkpoints, saves, metrics of logging libraries, an RL environment's calls), the seeding
watch, where things came from in the target's code, and the op probe."""
