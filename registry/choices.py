from django.db import models


class ArtifactFormat(models.TextChoices):
    SAFETENSORS = "safetensors", "safetensors"
    GGUF = "gguf", "GGUF"
    LORA_ADAPTER = "lora_adapter", "LoRA adapter"
    PYTORCH = "pytorch", "PyTorch"
    ONNX = "onnx", "ONNX"
    OTHER = "other", "Other"


class Relation(models.TextChoices):
    """Hugging Face's base_model_relation vocabulary, plus distillation."""

    FINETUNE = "finetune", "fine-tune"
    ADAPTER = "adapter", "adapter"
    QUANTIZED = "quantized", "quantized"
    MERGE = "merge", "merge"
    DISTILLED = "distilled", "distilled"


class EvalSource(models.TextChoices):
    LM_EVAL = "lm_eval", "lm-evaluation-harness results"
    SCORES = "scores", "plain list of scores"


class Verdict(models.TextChoices):
    IMPROVED = "improved", "improved"
    REGRESSED = "regressed", "regressed"
    WITHIN_NOISE = "within_noise", "within noise"
    NOT_COMPARABLE = "not_comparable", "not comparable"
