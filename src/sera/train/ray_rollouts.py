"""Rollout workers as Ray actors (`ray.address`; `sera train --ray ADDRESS`).

The driver (`run_train`: cursor, credit, learner, journal, checkpoints) stays one process. Each
`RolloutWorker` actor holds the environment, the collector and a sampler, and samples the trees
the driver assigns it. The sampler is either its own copy of the policy (`sampler.backend:
inprocess`: a `TransformersSampler` over the model in the sampler's dtype) or an HTTP client of
the run's vLLM server (`sampler.backend: vllm`: the driver starts or reaches the server and syncs
the weights into it; the workers only send it requests, under the served name of the current
version). With several servers (`sampler.vllm.servers`, or a list of URLs), worker i sends its
requests to server i mod their number. `RayRollouts` is both the loop's tree sampler and its `SamplerBackend`:

- `sample(tasks, step, stage, version)`: tree k of a task goes to worker (i mod W), i its index in
  the round; a tree's seed comes from (run seed, step, task id, k) as in one process, so the same
  trees come back whichever worker samples them. Each tree returns to the driver, which alone
  writes the journal. A worker that dies mid-tree loses only its unfinished trees: Ray restarts
  the actor, the driver reloads its weights and gives those trees to the next worker; every tree
  is kept once, by its index. After `ray.max_replans` re-plans of one tree the round fails as
  infrastructure (`InfraFailure`), never as a model result.
- `sync(learner, version)`: in process, the learner's weights go once into Ray's object store;
  every worker copies them into its module and completes the canary's probe; the driver
  recomputes the probe's log-probabilities with the learner and fails the sync (`CanaryError`)
  when any worker is past the bound. With vLLM, the server's own sync runs (save, load, canary
  through the server: `VllmBackend.sync`) and then every worker is routed to the new served name.
  A worker samples only at the version it holds (else it refuses the tree).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import torch

from sera.eval.seeds import sample_seed
from sera.ray_cluster import RayUnavailable, check_reachable, connect as connect_cluster, first_line
from sera.serving.errors import InfraFailure
from sera.serving.weight_sync import (
    BF16_BOUND, FP32_BOUND, PROBE, PROBE_SAMPLING, CanaryError, SyncError, SyncReport, completion_gaps, copy_weights,
)
from sera.train.config import TrainConfig
from sera.train.sampling import InFlight, SeededPolicy, TreePolicy
from sera.types import RolloutTree, Task

if TYPE_CHECKING:
    from sera.serving.vllm_backend import VllmBackend
    from sera.serving.vllm_group import VllmGroup


class StaleWorker(RuntimeError):
    """A worker was asked for a tree at a policy version it has not loaded (it restarted)."""


@dataclass(frozen=True)
class TreeResult:
    """What a worker sends back for one tree."""

    tree: RolloutTree
    """The sampled tree."""
    calls: int
    """Policy calls the tree made."""
    failures: dict[str, int]
    """Policy calls of this tree that raised, by kind (the driver's infrastructure check)."""
    worker: int
    """Index of the worker that sampled it."""


@dataclass(frozen=True)
class ServerAddress:
    """The vLLM server the workers send their requests to (`sampler.backend: vllm`)."""

    base_url: str
    """Its OpenAI-compatible root (`/v1`); it stays the same across the driver's restarts of a started server."""
    tokenizer: Any
    """The served model's tokenizer (exact prompt counts and stop strings, as in the driver)."""


class RolloutWorker:
    """One rollout worker (run as a Ray actor): a sampler, the environment and the collector."""

    def __init__(self, cfg: TrainConfig, tree_policy: TreePolicy, index: int, server: ServerAddress | None = None) -> None:
        """`server` None: the worker samples with its own copy of the policy (loaded by `load`);
        else it asks `server` for completions under the name `route` gives it."""
        from sera.envs.registry import get_env
        from sera.train.setup import make_collector, make_judge

        torch.set_num_threads(max(1, int(cfg.ray.worker_cpus)))
        self.cfg, self.tree_policy, self.index = cfg, tree_policy, index
        self.module: torch.nn.Module | None = None
        self.sampler = self._own_sampler(cfg) if server is None else self._server_sampler(cfg, server)
        self.spec = get_env(cfg.environment.name)
        self.collector = make_collector(cfg, self.spec, self.sampler, make_judge(cfg))
        self.version: int | None = None

    def _own_sampler(self, cfg: TrainConfig) -> Any:
        from sera.policy.transformers_sampler import TransformersSampler
        from sera.train.sampler_setup import samples_from_bf16_copy
        from sera.train.setup import load_model

        model, tokenizer = load_model(cfg)  # the architecture; its weights are replaced at the first load
        dtype = torch.bfloat16 if samples_from_bf16_copy(cfg) else torch.float32
        device = "cuda" if cfg.ray.worker_gpus > 0 else "cpu"  # Ray sets the worker's visible GPU
        self.module = model.to(device, dtype).eval().requires_grad_(False)
        return TransformersSampler(self.module, tokenizer, max_batch_size=2 * max(1, cfg.rollout.concurrency),
                                   prefix_cache_bytes=int(cfg.sampler.prefix_cache_gib * 1024**3))

    @staticmethod
    def _server_sampler(cfg: TrainConfig, server: ServerAddress) -> Any:
        from sera.serving.vllm_backend import vllm_sampler

        return vllm_sampler(server.base_url, server.tokenizer, cfg.sampler.vllm.request_timeout_s)

    async def route(self, model: str, version: int) -> int:
        """Ask the server for `model` (policy `version`'s served name) from now on; returns the index."""
        self.sampler.model, self.version = model, version
        return self.index

    async def load(self, weights: dict[str, torch.Tensor], version: int) -> int:
        """Copy `weights` into this worker's module as policy `version` (nothing when it holds that
        version already: it may be sampling with it); returns the index."""
        if self.version == version:
            return self.index
        assert self.module is not None, "a worker of a vLLM server is routed, not loaded"
        self.sampler.release_memory()  # cached keys/values belong to the old weights
        copy_weights(weights, self.module)
        self.version = version
        return self.index

    async def probe(self) -> Any:
        """The canary's probe, completed greedily with log-probabilities."""
        return await self.sampler(list(PROBE), PROBE_SAMPLING)

    async def sample(self, task: Task, k: int, step: int, stage: str, version: int) -> TreeResult:
        """Tree k of `task` at `step`, seeded as in one process; refuses a version not loaded."""
        if self.version != version:
            raise StaleWorker(f"worker {self.index} holds policy version {self.version}, the round samples {version}")
        seed = sample_seed(self.cfg.seed, f"{step}/{task.id}", k)
        calls = InFlight()  # this tree's own count: the actor runs several trees at once
        policy = SeededPolicy(self.tree_policy(self.sampler, task, k), seed, calls, version)
        tree = await replace(self.collector, policy=policy).collect(
            task, self.spec.root_env(task), stage, seed=seed, policy_version=version)
        return TreeResult(tree=tree, calls=calls.calls, failures=dict(calls.failures), worker=self.index)


def connect(cfg: TrainConfig) -> bool:
    """Join (or start, for `local`) the Ray cluster of `ray.address` (`sera.ray_cluster.connect`)."""
    assert cfg.ray.address is not None
    return connect_cluster(cfg.ray.address, local_cpus=cfg.ray.workers * cfg.ray.worker_cpus,
                           timeout_s=cfg.ray.connect_timeout_s)


class RayRollouts:
    """The driver's side of the Ray rollout workers: the loop's tree sampler and sampler backend."""

    policy = None
    """No sampler in the driver: the workers hold the policy."""

    def __init__(self, cfg: TrainConfig, tree_policy: TreePolicy, inflight: InFlight,
                 server: VllmBackend | VllmGroup | None = None, tokenizer: Any = None) -> None:
        """Connect to `ray.address` and start `ray.workers` actors: each loads the model, or with
        `server` (the run's vLLM backend or servers, opened by the driver; closed by `close`) sends
        its requests to that server (worker i to server i mod their number), tokenizing with `tokenizer`."""
        import ray

        self.cfg, self.inflight, self.server = cfg, inflight, server
        self.owns_ray = connect(cfg)
        if server is not None:
            for base_url in server.base_urls:
                self._check_reachable_by_every_node(base_url)
        self.bound = BF16_BOUND if cfg.model.dtype == "bf16" else FP32_BOUND
        self.replanned = 0
        """Trees sampled again this run because their worker died or had restarted."""
        actor = ray.remote(RolloutWorker).options(
            num_cpus=cfg.ray.worker_cpus, num_gpus=cfg.ray.worker_gpus, max_restarts=-1, max_task_retries=0,
            max_concurrency=max(1, cfg.rollout.concurrency) + 2)  # the trees plus a load or probe
        self.workers = [actor.remote(cfg, tree_policy, i, self._address(i, tokenizer)) for i in range(cfg.ray.workers)]
        self._weights: Any = None
        self._version: int | None = None

    def _check_reachable_by_every_node(self, base_url: str) -> None:
        """A server on 127.0.0.1 (the one sera starts) is out of reach of workers on other nodes."""
        import ray

        host = urlsplit(base_url).hostname or ""
        nodes = sum(1 for node in ray.nodes() if node.get("Alive"))
        if nodes > 1 and (host == "localhost" or host.startswith("127.")):
            if self.owns_ray:
                ray.shutdown()
            raise RayUnavailable(f"ray.address={self.cfg.ray.address!r}: the cluster has {nodes} nodes but the vLLM "
                                 f"server is at {base_url}, which workers on other nodes cannot reach; set "
                                 "sampler.vllm.base_url to a server every node reaches")

    def _server_of(self, worker: int) -> int:
        """The index of the server worker `worker` sends its requests to."""
        assert self.server is not None
        return worker % len(self.server.base_urls)

    def _address(self, worker: int, tokenizer: Any) -> ServerAddress | None:
        if self.server is None:
            return None
        return ServerAddress(self.server.base_urls[self._server_of(worker)], tokenizer)

    @property
    def restarts(self) -> int:
        """Restarts of the vLLM server(s) in this run (0 without one: Ray restarts the workers
        itself, and `replanned` counts what that cost)."""
        return 0 if self.server is None else self.server.restarts

    # -- sampling ----------------------------------------------------------------------------------------

    def sample(self, tasks: list[Task], step: int, stage: str, version: int) -> list[list[RolloutTree]]:
        """The round's trees (K per task, in task order), sampled across the workers."""
        import ray
        from ray.exceptions import RayActorError, RayTaskError

        K = self.cfg.rollout.trees_per_task
        jobs = [(task, k) for task in tasks for k in range(K)]
        trees: dict[int, RolloutTree] = {}
        replans = dict.fromkeys(range(len(jobs)), 0)

        def submit(i: int, worker: int) -> Any:
            task, k = jobs[i]
            return self.workers[worker].sample.remote(task, k, step, stage, version)

        pending = {submit(i, i % len(self.workers)): i for i in range(len(jobs))}
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            i = pending.pop(done[0])
            try:
                result: TreeResult = ray.get(done[0])
            except (RayActorError, RayTaskError) as exc:
                if isinstance(exc, RayTaskError) and not isinstance(exc.as_instanceof_cause(), StaleWorker):
                    raise  # a bug in the collector, not the infrastructure
                replans[i] += 1
                if replans[i] > self.cfg.ray.max_replans:
                    raise InfraFailure(f"step {step}: tree {jobs[i][1]} of task {jobs[i][0].id} was re-planned "
                                       f"{self.cfg.ray.max_replans} times and its worker failed again: {first_line(exc)}")
                self.replanned += 1
                worker = (i + replans[i]) % len(self.workers)
                self._reload(worker, version)
                pending[submit(i, worker)] = i
                continue
            trees[i] = result.tree
            for kind, n in result.failures.items():
                self.inflight.failures[kind] = self.inflight.failures.get(kind, 0) + n
            self.inflight.calls += result.calls
        flat = [trees[i] for i in range(len(jobs))]
        return [flat[j * K:(j + 1) * K] for j in range(len(tasks))]

    def _reload(self, worker: int, version: int) -> None:
        """Bring a (restarted) worker to the round's weights (or served name); waits for Ray to restart it."""
        import ray
        from ray.exceptions import RayActorError

        if self._version != version or (self.server is None and self._weights is None):
            raise SyncError(f"no weights of policy version {version} to load into worker {worker}")
        deadline = time.monotonic() + 300
        while True:
            try:
                ray.get(self._bring(worker, version))
                return
            except RayActorError:
                if time.monotonic() > deadline:
                    raise InfraFailure(f"rollout worker {worker} did not come back within 300s") from None
                time.sleep(1.0)

    # -- the backend ---------------------------------------------------------------------------------------

    def _bring(self, worker: int, version: int) -> Any:
        """The Ray call that brings worker `worker` to `version`: its weights, or its server's name for them."""
        if self.server is None:
            return self.workers[worker].load.remote(self._weights, version)
        return self.workers[worker].route.remote(self.server.served_name(self._server_of(worker)), version)

    def _bring_all(self, version: int) -> None:
        """Every worker to `version`, at once; one that Ray is restarting (it died, e.g. killed by
        Ray's memory monitor) is waited for and brought when it is back (`_reload`)."""
        import ray
        from ray.exceptions import RayActorError

        calls = [self._bring(i, version) for i in range(len(self.workers))]
        for i, call in enumerate(calls):
            try:
                ray.get(call)
            except RayActorError:
                self._reload(i, version)

    def sync(self, learner: Any, version: int) -> SyncReport:
        """In process: every worker loads the learner's weights as `version`, then the canary on
        each. With a vLLM server: its sync (canary included), then every worker is routed."""
        import ray

        if self.server is not None:
            report = self.server.sync(learner, version)
            self._version = version
            try:
                self._bring_all(version)
            except Exception as exc:  # noqa: BLE001 - one line for the loop
                raise SyncError(f"routing the Ray workers to policy version {version} failed: {first_line(exc)}") from None
            return report
        start = time.perf_counter()
        source = learner.full_weights() if hasattr(learner, "full_weights") else dict(learner.model.named_parameters())
        dtype = torch.bfloat16 if self.bound == BF16_BOUND else torch.float32
        weights = {name: tensor.detach().to("cpu", dtype, copy=True) for name, tensor in source.items()}
        self._weights, self._version = ray.put(weights), version
        try:
            self._bring_all(version)
        except Exception as exc:  # noqa: BLE001 - one line for the loop
            raise SyncError(f"loading policy version {version} into the Ray workers failed: {first_line(exc)}") from None
        loaded = time.perf_counter()
        worst, mean, n, who = 0.0, 0.0, 0, 0
        for index, completion in enumerate(ray.get([w.probe.remote() for w in self.workers])):
            gap, gap_mean, tokens = completion_gaps(completion, learner)
            if gap >= worst:
                worst, who = gap, index
            mean, n = max(mean, gap_mean), tokens
        if worst > self.bound:
            raise CanaryError(f"canary failed after the update to policy version {version}: Ray worker {who}'s "
                              f"log-probs of the probe differ from the learner's by up to {worst:.3g} (bound "
                              f"{self.bound:g}); it is not sampling with the trained weights")
        end = time.perf_counter()
        return SyncReport(version=version, seconds=end - start, canary_gap=worst, canary_mean_gap=mean,
                          canary_tokens=n, load_s=loaded - start, canary_s=end - loaded)

    def before_update(self) -> None:
        """The vLLM server's (it may sleep through the update); without one nothing: the workers
        free their caches when they load new weights."""
        if self.server is not None:
            self.server.before_update()

    @property
    def samples_during_update(self) -> bool:
        """The workers sample with their own copies of the weights, or from the server, which keeps
        serving unless it sleeps during the update."""
        return self.server is None or self.server.samples_during_update

    def recover(self, reason: str) -> None:
        """The vLLM server's recovery (restart a dead one, reload a lost adapter) when there is
        one; the workers keep its address and served name. Nothing else to restart: Ray restarts
        dead actors, and `sample` re-plans their trees."""
        if self.server is not None:
            self.server.recover(reason)

    def where(self) -> str:
        """Where the workers' logs are (and the server's)."""
        logs = "the Ray workers' logs (ray logs, or /tmp/ray/session_latest/logs on their nodes)"
        return logs if self.server is None else f"{self.server.where()}; {logs}"

    def close(self) -> None:
        """End the workers, the Ray connection this run made and the vLLM backend."""
        import ray

        try:
            for worker in self.workers:
                ray.kill(worker, no_restart=True)
            if self.owns_ray:
                ray.shutdown()
        finally:
            if self.server is not None:
                self.server.close()


__all__ = ["RayRollouts", "RayUnavailable", "RolloutWorker", "ServerAddress", "StaleWorker", "TreeResult", "check_reachable", "connect"]
