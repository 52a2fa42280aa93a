"""Finished runs compared without running anything: the scalar logs two runs wrote (TensorBoard,
the HF Trainer's ``trainer_state.json``, Lightning's CSV, CSV and JSONL files) and the checkpoints
they saved (``torch.save`` files, ``.safetensors``, folders of them). A run that is already over
can still be checked for bit-reproducibility, from what it left, by ``repro-check diff A B``."""
