"""Trained weights on disk, below both the trainer and the samplers: the checkpoint format
(`store`: atomic directories, manifests, `latest`, retention, RNG state), LoRA settings and
wrapping (`lora`), and which base model a run trained (`run_model`)."""
