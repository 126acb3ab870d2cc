"""vLLM's Prometheus metrics, with its family names, types, labels and buckets (vLLM 0.32).

Scrapers, dashboards and the judge must not be able to tell simfleet from vLLM, so every family
of a real vLLM scrape (tests/simfleet/data/vllm-0.32-cpu-metrics.txt) is exposed here with the
same shape; tests/simfleet/test_metrics_conformance.py compares the two.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from simfleet.profiles import ModelProfile


def token_buckets(max_model_len: int) -> tuple[int, ...]:
    """1, 2, 5, 10, 20, 50, … up to max_model_len, as vLLM builds its token histograms."""
    buckets: list[int] = []
    exponent = 0
    while True:
        for mantissa in (1, 2, 5):
            value = mantissa * 10**exponent
            if value > max_model_len:
                return tuple(buckets)
            buckets.append(value)
        exponent += 1


ITERATION_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
TTFT_BUCKETS = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
    2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip
TOKEN_LATENCY_BUCKETS = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0,
    2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
)  # fmt: skip
REQUEST_LATENCY_BUCKETS = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0,
    60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0,
)  # fmt: skip
PREEMPTION_BUCKETS = (1, 2, 3, 4, 5, 10, 20)
N_BUCKETS = (1, 2, 5, 10, 20)

FINISHED_REASONS = ("stop", "length", "abort", "error", "repetition")
ENGINE_LABELS = ("engine", "model_name")

# vLLM's cache_config_info carries the engine's cache settings as labels.
CACHE_CONFIG_LABELS = (
    "_block_size_resolved", "block_size", "cache_dtype", "cache_hit_alignment_tokens",
    "effective_attention_block_size", "enable_mamba_shared_prefix_checkpoint",
    "enable_prefix_caching", "engine", "gpu_memory_utilization", "hash_block_size",
    "is_attention_free", "kv_cache_dtype_skip_layers", "kv_cache_layout",
    "kv_cache_max_concurrency", "kv_cache_memory_bytes", "kv_cache_size_tokens",
    "kv_offloading_backend", "kv_offloading_size", "kv_sharing_fast_prefill", "mamba_block_size",
    "mamba_cache_dtype", "mamba_cache_mode", "mamba_page_size_padded", "mamba_ssm_cache_dtype",
    "num_cpu_blocks", "num_gpu_blocks", "num_gpu_blocks_override",
    "prefix_cache_retention_interval", "prefix_caching_hash_algo", "prefix_match_unit",
    "replayssm_buffer_len", "skip_page_size_padded", "sliding_window", "swa_bounded_replay",
    "use_kda_recoverssm", "use_replayssm", "user_specified_block_size",
)  # fmt: skip
BLOCK_SIZE = 128


class ReplicaMetrics:
    """The metric families of one replica (one registry, served at its /metrics)."""

    def __init__(self, max_model_len: int) -> None:
        """`max_model_len`: the longest context among the replica's models (token buckets)."""
        self.registry = CollectorRegistry()
        tokens = token_buckets(max_model_len)
        r = self.registry

        def counter(name: str, doc: str, extra: tuple[str, ...] = ()) -> Counter:
            return Counter(name, doc, (*ENGINE_LABELS, *extra), registry=r)

        def gauge(name: str, doc: str, extra: tuple[str, ...] = ()) -> Gauge:
            return Gauge(name, doc, (*ENGINE_LABELS, *extra), registry=r)

        def histogram(name: str, doc: str, buckets: tuple[float, ...]) -> Histogram:
            return Histogram(name, doc, ENGINE_LABELS, buckets=buckets, registry=r)

        self.flops = counter("vllm:estimated_flops_per_gpu", "Estimated FLOPs per GPU.")
        self.read_bytes = counter("vllm:estimated_read_bytes_per_gpu", "Estimated bytes read.")
        self.write_bytes = counter("vllm:estimated_write_bytes_per_gpu", "Estimated bytes written.")
        self.running = gauge(
            "vllm:num_requests_running", "Number of requests in model execution batches."
        )
        self.waiting = gauge(
            "vllm:num_requests_waiting", "Number of requests waiting to be processed."
        )
        self.waiting_by_reason = gauge(
            "vllm:num_requests_waiting_by_reason", "Waiting requests by reason.", ("reason",)
        )
        self.sleep_state = gauge("vllm:engine_sleep_state", "Engine sleep state.", ("sleep_state",))
        self.kv_usage = gauge(
            "vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage."
        )
        self.prefix_queries = counter(
            "vllm:prefix_cache_queries", "Prefix cache queries, in tokens."
        )
        self.prefix_hits = counter("vllm:prefix_cache_hits", "Prefix cache hits, in tokens.")
        self.external_prefix_queries = counter(
            "vllm:external_prefix_cache_queries", "External prefix cache queries, in tokens."
        )
        self.external_prefix_hits = counter(
            "vllm:external_prefix_cache_hits", "External prefix cache hits, in tokens."
        )
        self.mm_queries = counter("vllm:mm_cache_queries", "Multi-modal cache queries, in items.")
        self.mm_hits = counter("vllm:mm_cache_hits", "Multi-modal cache hits, in items.")
        self.preemptions = counter(
            "vllm:num_preemptions", "Cumulative number of preemption from the engine."
        )
        self.prompt_tokens = counter("vllm:prompt_tokens", "Number of prefill tokens processed.")
        self.prompt_tokens_by_source = counter(
            "vllm:prompt_tokens_by_source", "Prompt tokens by source.", ("source",)
        )
        self.prompt_tokens_cached = counter(
            "vllm:prompt_tokens_cached", "Cached prompt tokens (local and external)."
        )
        self.prompt_tokens_cached_by_source = counter(
            "vllm:prompt_tokens_cached_by_source", "Cached prompt tokens by source.", ("source",)
        )
        self.generation_tokens = counter(
            "vllm:generation_tokens", "Number of generation tokens processed."
        )
        self.request_success = counter(
            "vllm:request_success",
            "Count of successfully processed requests.",
            ("finished_reason",),
        )
        self.admission_rejections = Counter(
            "vllm:admission_rejections",
            "Requests rejected at admission.",
            ("model_name", "reason"),
            registry=r,
        )
        self.request_prompt_tokens = histogram(
            "vllm:request_prompt_tokens", "Number of prefill tokens processed.", tokens
        )
        self.request_generation_tokens = histogram(
            "vllm:request_generation_tokens",
            "Number of generation tokens processed.",
            tokens,
        )
        self.iteration_tokens = histogram(
            "vllm:iteration_tokens_total", "Number of tokens per engine_step.", ITERATION_BUCKETS
        )
        self.max_num_generation_tokens = histogram(
            "vllm:request_max_num_generation_tokens",
            "Number of max generation tokens per request.",
            tokens,
        )
        self.params_n = histogram("vllm:request_params_n", "The n request parameter.", N_BUCKETS)
        self.params_max_tokens = histogram(
            "vllm:request_params_max_tokens", "The max_tokens request parameter.", tokens
        )
        self.ttft = histogram(
            "vllm:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            TTFT_BUCKETS,
        )
        self.itl = histogram(
            "vllm:inter_token_latency_seconds",
            "Histogram of inter-token latency in seconds.",
            TOKEN_LATENCY_BUCKETS,
        )
        self.tpot = histogram(
            "vllm:request_time_per_output_token_seconds",
            "Histogram of time_per_output_token_seconds per request.",
            TOKEN_LATENCY_BUCKETS,
        )
        self.e2e = histogram(
            "vllm:e2e_request_latency_seconds",
            "Histogram of e2e request latency in seconds.",
            REQUEST_LATENCY_BUCKETS,
        )
        self.queue_time = histogram(
            "vllm:request_queue_time_seconds",
            "Time spent in WAITING phase.",
            REQUEST_LATENCY_BUCKETS,
        )
        self.inference_time = histogram(
            "vllm:request_inference_time_seconds",
            "Time spent in RUNNING phase.",
            REQUEST_LATENCY_BUCKETS,
        )
        self.prefill_time = histogram(
            "vllm:request_prefill_time_seconds",
            "Time spent in PREFILL phase.",
            REQUEST_LATENCY_BUCKETS,
        )
        self.decode_time = histogram(
            "vllm:request_decode_time_seconds",
            "Time spent in DECODE phase.",
            REQUEST_LATENCY_BUCKETS,
        )
        self.request_preemptions = histogram(
            "vllm:request_num_preemptions", "Number of preemptions per request.", PREEMPTION_BUCKETS
        )
        self.prefill_kv_computed = histogram(
            "vllm:request_prefill_kv_computed_tokens",
            "Prefill tokens computed (excluding cached) per request.",
            tokens,
        )
        self.cache_config = Gauge(
            "vllm:cache_config_info",
            "Information of the LLMEngine CacheConfig",
            CACHE_CONFIG_LABELS,
            registry=r,
        )
        self.lora_info = Gauge(
            "vllm:lora_requests_info",
            "Running stats on lora requests.",
            ("max_lora", "waiting_lora_adapters", "running_lora_adapters"),
            registry=r,
        )

    def for_model(self, profile: ModelProfile, engine: str = "0") -> ModelMetrics:
        labels = {"engine": engine, "model_name": profile.name}
        self.cache_config.labels(**_cache_config(profile, engine)).set(1)
        for reason in ("capacity", "deferred"):
            self.waiting_by_reason.labels(**labels, reason=reason).set(0)
        for state in ("awake", "weights_offloaded", "discard_all"):
            self.sleep_state.labels(**labels, sleep_state=state).set(1 if state == "awake" else 0)
        for source in ("local_compute", "local_cache_hit", "external_kv_transfer"):
            self.prompt_tokens_by_source.labels(**labels, source=source)
        for source in ("device", "host", "p2p", "disk", "external_unspecified"):
            self.prompt_tokens_cached_by_source.labels(**labels, source=source)
        for reason in ("max_num_queued_reqs", "max_num_queued_tokens"):
            self.admission_rejections.labels(model_name=profile.name, reason=reason)
        unlabelled_counters = (
            self.flops, self.read_bytes, self.write_bytes, self.prefix_queries, self.prefix_hits,
            self.external_prefix_queries, self.external_prefix_hits, self.mm_queries,
            self.mm_hits, self.prompt_tokens_cached,
        )  # fmt: skip
        for family in unlabelled_counters:
            family.labels(**labels)
        return ModelMetrics(
            running=self.running.labels(**labels),
            waiting=self.waiting.labels(**labels),
            waiting_capacity=self.waiting_by_reason.labels(**labels, reason="capacity"),
            kv_usage=self.kv_usage.labels(**labels),
            preemptions=self.preemptions.labels(**labels),
            prompt_tokens=self.prompt_tokens.labels(**labels),
            prompt_tokens_computed=self.prompt_tokens_by_source.labels(
                **labels, source="local_compute"
            ),
            generation_tokens=self.generation_tokens.labels(**labels),
            success={
                reason: self.request_success.labels(**labels, finished_reason=reason)
                for reason in FINISHED_REASONS
            },
            request_prompt_tokens=self.request_prompt_tokens.labels(**labels),
            request_generation_tokens=self.request_generation_tokens.labels(**labels),
            iteration_tokens=self.iteration_tokens.labels(**labels),
            max_num_generation_tokens=self.max_num_generation_tokens.labels(**labels),
            params_n=self.params_n.labels(**labels),
            params_max_tokens=self.params_max_tokens.labels(**labels),
            ttft=self.ttft.labels(**labels),
            itl=self.itl.labels(**labels),
            tpot=self.tpot.labels(**labels),
            e2e=self.e2e.labels(**labels),
            queue_time=self.queue_time.labels(**labels),
            inference_time=self.inference_time.labels(**labels),
            prefill_time=self.prefill_time.labels(**labels),
            decode_time=self.decode_time.labels(**labels),
            request_preemptions=self.request_preemptions.labels(**labels),
            prefill_kv_computed=self.prefill_kv_computed.labels(**labels),
        )

    def set_lora_info(self, *, max_loras: int, waiting: list[str], running: list[str]) -> None:
        """vLLM keeps one series whose labels list the adapters in use; its value is a time."""
        self.lora_info.clear()
        self.lora_info.labels(
            max_lora=str(max_loras),
            waiting_lora_adapters=",".join(sorted(waiting)),
            running_lora_adapters=",".join(sorted(running)),
        ).set(time.time())


def _cache_config(profile: ModelProfile, engine: str) -> dict[str, str]:
    values = dict.fromkeys(CACHE_CONFIG_LABELS, "None")
    blocks = profile.kv_cache_tokens // BLOCK_SIZE
    values.update(
        _block_size_resolved="True",
        block_size=str(BLOCK_SIZE),
        cache_dtype="auto",
        effective_attention_block_size=str(BLOCK_SIZE),
        enable_mamba_shared_prefix_checkpoint="False",
        enable_prefix_caching="True",
        engine=engine,
        gpu_memory_utilization="0.92",
        is_attention_free="False",
        kv_cache_dtype_skip_layers="[]",
        kv_cache_max_concurrency=str(round(profile.kv_cache_tokens / profile.max_model_len, 1)),
        kv_cache_memory_bytes=str(profile.kv_cache_tokens * 2048),
        kv_cache_size_tokens=str(profile.kv_cache_tokens),
        kv_offloading_backend="native",
        kv_sharing_fast_prefill="False",
        mamba_cache_dtype="auto",
        mamba_cache_mode="none",
        mamba_ssm_cache_dtype="float32",
        num_gpu_blocks=str(blocks),
        prefix_cache_retention_interval="0",
        prefix_caching_hash_algo="sha256",
        replayssm_buffer_len="16",
        swa_bounded_replay="True",
        use_kda_recoverssm="False",
        use_replayssm="False",
        user_specified_block_size="False",
    )
    return values


@dataclass(frozen=True)
class ModelMetrics:
    """The labelled children that one engine updates (bound once: the hot loop uses these)."""

    running: Gauge
    waiting: Gauge
    waiting_capacity: Gauge
    kv_usage: Gauge
    preemptions: Counter
    prompt_tokens: Counter
    prompt_tokens_computed: Counter
    generation_tokens: Counter
    success: dict[str, Counter]
    request_prompt_tokens: Histogram
    request_generation_tokens: Histogram
    iteration_tokens: Histogram
    max_num_generation_tokens: Histogram
    params_n: Histogram
    params_max_tokens: Histogram
    ttft: Histogram
    itl: Histogram
    tpot: Histogram
    e2e: Histogram
    queue_time: Histogram
    inference_time: Histogram
    prefill_time: Histogram
    decode_time: Histogram
    request_preemptions: Histogram
    prefill_kv_computed: Histogram
