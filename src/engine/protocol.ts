/**
 * The engine protocol's messages as TypeScript types: GENERATED from engine/protocol.json by
 * scripts/engine-protocol.ts (`npm run protocol`). Do not edit; change the schema and regenerate
 * (test/engine-ops.test.ts fails when this file is not what the schema generates).
 *
 * Field for field the wire's (snake_case on purpose: these objects go on the wire unchanged). Requests omit `id`
 * and `op`; the client adds them, and fills the fields a caller may leave out (GENERATE_DEFAULTS, a forward
 * row's segment_ids), so the engine gets every field explicitly. ops.ts builds the engine interfaces on OPS.
 */

export const DTYPES = ['float32', 'bfloat16', 'float16'] as const;
export type Dtype = (typeof DTYPES)[number];

/**
 * Codes of the engine's error replies; `unauthorized` answers a TCP connection's wrong secret (then it closes).
 * `non_finite`: adapter weights out of engine/bounds.json (load, save) or a request's non-finite logits (generate);
 * `diverged`: a training step's loss, gradient or new weights were not finite, and the adapter is left as it was.
 */
export const REPLY_ERROR_CODES = [
  'bad_request',
  'not_found',
  'non_finite',
  'diverged',
  'cancelled',
  'internal',
  'unauthorized',
] as const;
export type ReplyErrorCode = (typeof REPLY_ERROR_CODES)[number];

/** The unsolicited first frame of a started engine (its `id` is null). */
export interface ReadyEvent {
  event: 'ready';
  device: 'cpu' | 'cuda';
  dtype: string;
  torch: string;
  matmul_gflops: number;
  /** The limits the engine runs with (its command line), as vLLM names them. */
  limits?: EngineLimits;
  /** What the engine can run; the server validates models and adapters against it instead of keeping a copy. */
  supports: EngineSupport;
  /**
   * trainer: a trainer-only engine (`--role trainer`), which never samples: a process group of `ranks`; sampler: one
   * that never trains (`--role sampler`).
   */
  role?: 'both' | 'trainer' | 'sampler';
  /** A trainer's ranks in rank order; rank 0 is the process speaking the protocol, the others follow it. */
  ranks?: Rank[];
}

/**
 * The unsolicited frame (its `id` is null) of an engine that could not start (a trainer's process group that cannot
 * form here), sent instead of `ready` before it exits.
 */
export interface FailedEvent {
  event: 'failed';
  error: {
    code: 'startup';
    message: string;
  };
}

/** One rank of a trainer's process group. */
export interface Rank {
  rank: number;
  pid: number;
  host: string;
  /** torch's name of its device: cpu, cuda:0, ... */
  device: string;
}

/**
 * One rank's memory: rank 0's now, the others' as of the last op the group ran (a rank answers nothing between ops).
 */
export interface RankMemory {
  rank: number;
  rss_bytes: number;
  memory: EngineMemory;
}

/**
 * The engine's own tables (engine/model.py, lora.py, hf_model.py, and this file's losses and dtypes), as its ready
 * frame announces them.
 */
export interface EngineSupport {
  /** config.json `model_type`s our own implementation (engine/model.py) runs. */
  model_types: string[];
  /** config.json `architectures` class names our own implementation runs. */
  architectures: string[];
  /** `rope_scaling` types our own implementation computes (`default`: none). */
  rope_types: string[];
  /** Modules an adapter on our own implementation may target (each base's own list: load_base's `lora_targets`). */
  lora_targets: string[];
  losses: {
    train_step: TrainLoss[];
    forward_backward: StepLoss[];
  };
  dtypes: Dtype[];
  /** What the pinned transformers loads (engine/hf_model.py): it serves every base ours cannot. Absent without it. */
  transformers?: TransformersSupport;
}

/** The causal LMs transformers' modeling code runs on our engine (engine/hf_model.py). */
export interface TransformersSupport {
  version: string;
  /** model_type -> the class AutoModelForCausalLM builds for it. */
  causal_lm: Record<string, string>;
  rope_types: string[];
  /** config.json `layer_types` our KV cache holds (recurrent linear-attention layers are not among them). */
  attention_layer_types: string[];
}

/** Which model code runs a base: our own implementation of the family, or transformers' modeling code on our engine. */
export type Implementation = 'ours' | 'transformers';

/** Where an adaptable projection sits in a decoder layer. */
export type ProjectionKind = 'attention' | 'mlp';

export interface EngineLimits {
  max_model_len: number | null;
  max_num_seqs: number;
  max_num_batched_tokens: number;
  kv_cache_memory_bytes: number | null;
  threads: number;
}

/** Where the engine's memory goes (docs/engine-protocol.md `stats`); the device_* figures on CUDA only. */
export interface EngineMemory {
  weights_bytes: number;
  kv_cache_bytes: number;
  prefix_cache_bytes: number;
  /** Resident adapters' weights (a trainer's: this rank's shards). */
  adapters_bytes: number;
  /** Their AdamW moments (a trainer's: this rank's shards). */
  optimizer_bytes?: number;
  /**
   * How far above its start the last training op went (activations and logits, mostly): RSS on CPU, the allocator on
   * CUDA.
   */
  activations_peak_bytes?: number;
  device_allocated_bytes?: number;
  device_peak_bytes?: number;
  device_reserved_bytes?: number;
  device_free_bytes?: number;
  device_total_bytes?: number;
}

export interface AdapterInit {
  rank: number;
  alpha: number;
  target_modules: string[];
  seed: number;
}

/**
 * vLLM's structured_outputs kinds, which the engine's constraints can be (docs/engine-protocol.md), less
 * `structural_tag`: the server writes a structural tag as a `grammar` before any engine sees it
 * (docs/structured-outputs.md).
 */
export const CONSTRAINT_KINDS = ['json', 'json_object', 'regex', 'choice', 'grammar'] as const;
export type ConstraintKind = (typeof CONSTRAINT_KINDS)[number];

/**
 * A constraint's specification, as vLLM's `structured_outputs` states it: exactly one kind (engine/wire.py checks
 * that), and the JSON options. The engine compiles it (llguidance) against the base's own tokenizer;
 * docs/structured-outputs.md maps it onto vLLM.
 */
export interface ConstraintSpec {
  /** A JSON schema; layout options travel inside it as llguidance's `x-guidance`. */
  json?: Record<string, unknown> | boolean;
  json_object?: true;
  regex?: string;
  choice?: string[];
  /** A Lark grammar (llguidance's dialect; a GBNF grammar is converted, as vLLM's guidance backend does). */
  grammar?: string;
  disable_any_whitespace?: boolean;
  disable_additional_properties?: boolean;
}

/** `[token id, logprob]`. */
export type TopLogprob = [number, number];

export interface PromptLogprobsEvent {
  type: 'prompt';
  /** One entry per prompt token; the first is null. */
  prompt_logprobs: ({
    logprob: number;
    top: TopLogprob[];
  } | null)[];
}

export interface TokensEvent {
  type: 'tokens';
  seq: number;
  tokens: number[];
  logprobs?: (number | null)[];
  top_logprobs?: TopLogprob[][];
}

export interface FinishEvent {
  type: 'finish';
  seq: number;
  finish_reason: 'stop' | 'length';
  /** Null with `stop` means EOS. */
  stop_token_id: number | null;
}

export interface ForwardRow {
  tokens: number[];
  /** The client fills it when left out: all zeros: the row is one sequence. */
  segment_ids?: number[];
}

export type TrainLoss = 'rl' | 'sft';

/**
 * A packed row of train_step: every array has one entry per token (engine/wire.py checks the lengths and that mask is 0
 * at each segment's first token).
 */
export interface TrainRow {
  tokens: number[];
  segment_ids: number[];
  mask: number[];
  weights: number[];
  /** Required with the rl loss. */
  advantages?: number[];
  /** Required with the rl loss. */
  logprobs?: (number | null)[];
  original_logprobs?: (number | null)[];
}

/** RL knobs of rl-loss.md, every one sent (the engine has no defaults); null turns a knob off. */
export interface LossConfig {
  ppo: boolean;
  epsilon: number;
  epsilon_high: number;
  importance_sampling_level: 'token' | 'sequence' | 'average' | 'geometric_average';
  max_negative_advantage_importance_sampling_weight: number | null;
  mask_prob_ratio: boolean;
  k2_tau: number | null;
  truncated_importance_sampling: number | null;
  kl_penalty_coef: number;
  kl_penalty_source: 'sample' | 'current_learner';
}

/** train_step's AdamW (eps is AdamW's usual 1e-8); max_grad_norm <= 0 turns clipping off. */
export interface OptimizerConfig {
  learning_rate: number;
  betas: [number, number];
  weight_decay: number;
  max_grad_norm: number;
}

/**
 * The losses of `forward_backward`, as Tinker names them, each with every hyper-parameter it uses (all required, no
 * other allowed; the engine has no defaults).
 */
export interface StepLossConfigs {
  cross_entropy: NoStepLossConfig;
  importance_sampling: NoStepLossConfig;
  ppo: ClipThresholds;
  cispo: ClipThresholds;
  dro: {
    beta: number;
  };
  gspo: ClipThresholds;
  /**
   * REINFORCE weighted by the sampler-to-learner ratio truncated at 1, plus kl_coeff times the k3 estimate of
   * KL(learner || sampler); the rows' logprobs are the ones recorded when the tokens were sampled.
   */
  stable_reinforce: {
    kl_coeff: number;
  };
}

export type NoStepLossConfig = Record<string, never>;

/** The ratio is clipped to [clip_low_threshold, clip_high_threshold]. */
export interface ClipThresholds {
  clip_low_threshold: number;
  clip_high_threshold: number;
}

export type StepLoss = keyof StepLossConfigs;

/**
 * One datum: `tokens[t]` is model input whose next-token distribution scores `target_tokens[t]`; all arrays length T.
 */
export interface StepRow {
  tokens: number[];
  target_tokens: number[];
  weights: number[];
  /** The sampler's logprobs of `target_tokens`; required by the RL losses. */
  logprobs?: number[];
  /** Required by the RL losses. */
  advantages?: number[];
  /** Required by `gspo`: nonzero on the tokens whose mean log-ratio is the sequence ratio (at least one). */
  sequence_ratio_mask?: number[];
}

/** Tinker's AdamParams, all required; `grad_clip_norm` 0 means no clipping. */
export interface AdamParams {
  learning_rate: number;
  beta1: number;
  beta2: number;
  eps: number;
  weight_decay: number;
  grad_clip_norm: number;
}

export type StatsRequest = Record<string, never>;

export interface StatsReply {
  device: string;
  dtype: string;
  matmul_gflops: number;
  bases: string[];
  adapters: string[];
  max_adapters: number;
  running: number;
  waiting: number;
  tokens_per_second: number;
  rss_bytes: number;
  memory: EngineMemory;
  /** A trainer's: every rank's memory, in rank order. */
  ranks?: RankMemory[];
}

export interface LoadBaseRequest {
  base: string;
  path: string;
  /** Absent: the engine's --dtype. */
  dtype?: Dtype;
}

export interface LoadBaseReply {
  vocab_size: number;
  context_length: number;
  eos_token_ids: number[];
  num_parameters: number;
  /** Most sequences one generate may ask for (`n`): the engine's max_num_seqs, lowered by its KV-cache budget. */
  max_num_seqs: number;
  /** The constraint kinds this engine can decode under on this base (none without llguidance or a tokenizer.json). */
  constraint_kinds: ConstraintKind[];
  /** Which implementation our engine runs this base with (absent from a vLLM sampler's reply). */
  implementation?: Implementation;
  /**
   * The projections an adapter on this base may target (PEFT's short names, in module order) and their kind; absent
   * from a vLLM sampler's reply.
   */
  lora_targets?: Record<string, ProjectionKind>;
}

export interface CheckConstraintRequest {
  base: string;
  constraint: ConstraintSpec;
}

export interface CheckConstraintReply {
  ok: true;
}

/** Loads the PEFT folder `path`, or creates a fresh adapter from `init` (one of the two). */
export interface EnsureAdapterRequest {
  adapter: string;
  base: string;
  path?: string;
  init?: AdapterInit;
}

export interface EnsureAdapterReply {
  /** False when it was already resident. */
  loaded: boolean;
}

/**
 * Checks the PEFT adapter folder `path` against the base model in the HF folder `base_path` (its config.json; the base
 * need not be loaded), as a load would, but naming every problem instead of the first.
 */
export interface CheckAdapterRequest {
  path: string;
  base_path: string;
}

export interface CheckAdapterReply {
  /** Empty: the adapter loads on that base. Each problem's `loc` is the file, then the field or tensor. */
  problems: {
    loc: string[];
    msg: string;
  }[];
}

export interface SaveAdapterRequest {
  adapter: string;
  path: string;
}

export interface SaveAdapterReply {
  files: string[];
}

export interface DropAdapterRequest {
  adapter: string;
}

export interface DropAdapterReply {
  dropped: boolean;
}

/**
 * Sampling fields with a default are vLLM's meaning when a caller leaves them out; the client fills them in, so the
 * engine gets every field explicitly.
 */
export interface GenerateRequest {
  base: string;
  adapter: string | null;
  /** Loaded first when the adapter is not resident. */
  adapter_path?: string;
  prompt: number[];
  n?: number;
  /** Null: until the context is full. */
  max_tokens: number | null;
  min_tokens?: number;
  ignore_eos?: boolean;
  stop_token_ids?: number[];
  temperature?: number;
  top_p?: number;
  top_k?: number;
  min_p?: number;
  presence_penalty?: number;
  frequency_penalty?: number;
  repetition_penalty?: number;
  /** Token id (as a string) -> bias added to its logit. */
  logit_bias?: Record<string, number>;
  allowed_token_ids?: number[] | null;
  bad_words_ids?: number[][];
  seed?: number | null;
  logprobs?: number | null;
  prompt_logprobs?: number | null;
  /** Decode only what this specification allows (the engine compiles it, or reuses what check_constraint compiled). */
  constraint?: ConstraintSpec | null;
}

export interface GenerateReply {
  prompt_tokens: number;
  cached_tokens: number;
}

/** What generate's fields mean when a caller leaves them out; the client fills them in (engine/protocol.json). */
export const GENERATE_DEFAULTS = {
  n: 1,
  min_tokens: 0,
  ignore_eos: false,
  stop_token_ids: [],
  temperature: 1,
  top_p: 1,
  top_k: -1,
  min_p: 0,
  presence_penalty: 0,
  frequency_penalty: 0,
  repetition_penalty: 1,
  logit_bias: {},
  allowed_token_ids: null,
  bad_words_ids: [],
  seed: null,
  logprobs: null,
  prompt_logprobs: null,
} as const satisfies Partial<GenerateRequest>;

/** The final reply of a generate request, tagged by the client so the stream is one union. */
export interface GenerateDoneEvent extends GenerateReply {
  type: 'done';
}

/** What a generate stream yields: its interim replies, then the tagged final one. */
export type GenerateEvent = PromptLogprobsEvent | TokensEvent | FinishEvent | GenerateDoneEvent;

export interface CancelRequest {
  /** The id of a generate request. */
  target: string;
}

export interface CancelReply {
  cancelled: boolean;
}

export interface ForwardRequest {
  base: string;
  adapter: string | null;
  adapter_path?: string;
  rows: ForwardRow[];
}

export interface ForwardReply {
  logprobs: (number | null)[][];
}

export interface TrainStepRequest {
  base: string;
  adapter: string;
  adapter_path?: string;
  loss: TrainLoss;
  rows: TrainRow[];
  /** Required with the rl loss; the sft loss has none. */
  loss_config?: LossConfig;
  optimizer: OptimizerConfig;
  /** The KL penalty's reference policy (loaded from the path if not resident); absent: the base model. */
  reference_adapter?: string;
  reference_adapter_path?: string;
  /** Positions whose logits are computed at once (capped by the engine's memory bound); absent: that bound. */
  logprob_chunk_size?: number;
}

export interface TrainStepReply {
  metrics: Record<string, number>;
}

export interface ForwardBackwardRequest {
  base: string;
  /** Null only with `backward: false` (the base model). */
  adapter: string | null;
  loss: StepLoss;
  /** The loss's entry of StepLossConfigs. */
  loss_config: Record<string, number>;
  /** False: forward only. True: the loss's gradient is added to the adapter's until `optim_step`. */
  backward: boolean;
  rows: StepRow[];
}

export interface ForwardBackwardReply {
  outputs: {
    logprobs: number[];
    elementwise_loss: number[];
  }[];
  /** The sum over rows and tokens (Tinker's semantics: sums, not means). */
  loss: number;
  metrics: Record<string, number>;
}

export interface OptimStepRequest {
  base: string;
  adapter: string;
  adam: AdamParams;
}

export interface OptimStepReply {
  metrics: Record<string, number>;
  /** Optimizer steps this adapter has taken (restored by `load_state`). */
  step: number;
}

/** Writes the PEFT adapter, optimizer state and step into the folder `path`, atomically. */
export interface SaveStateRequest {
  adapter: string;
  path: string;
}

export interface SaveStateReply {
  files: string[];
}

/** Makes `adapter` resident (replacing one of that key) with the weights, optimizer state and step saved at `path`. */
export interface LoadStateRequest {
  base: string;
  adapter: string;
  path: string;
}

export interface LoadStateReply {
  step: number;
}

/** Op name → what its request carries and what its (final) reply holds; a streaming op's reply is its events. */
export interface OpTypes {
  stats: { request: StatsRequest; reply: StatsReply };
  load_base: { request: LoadBaseRequest; reply: LoadBaseReply };
  check_constraint: { request: CheckConstraintRequest; reply: CheckConstraintReply };
  ensure_adapter: { request: EnsureAdapterRequest; reply: EnsureAdapterReply };
  check_adapter: { request: CheckAdapterRequest; reply: CheckAdapterReply };
  save_adapter: { request: SaveAdapterRequest; reply: SaveAdapterReply };
  drop_adapter: { request: DropAdapterRequest; reply: DropAdapterReply };
  generate: { request: GenerateRequest; reply: GenerateEvent };
  cancel: { request: CancelRequest; reply: CancelReply };
  forward: { request: ForwardRequest; reply: ForwardReply };
  train_step: { request: TrainStepRequest; reply: TrainStepReply };
  forward_backward: { request: ForwardBackwardRequest; reply: ForwardBackwardReply };
  optim_step: { request: OptimStepRequest; reply: OptimStepReply };
  save_state: { request: SaveStateRequest; reply: SaveStateReply };
  load_state: { request: LoadStateRequest; reply: LoadStateReply };
}

export type OpName = keyof OpTypes;

/**
 * `sampler`: only a sampler serves it; `trainer`: only the trainer; `both`: either. With several samplers,
 * `every` sends the op to each of them (state every sampler must hold, or a cancel whose stream may be on any).
 */
export interface OpInfo {
  role: 'sampler' | 'trainer' | 'both';
  streams: boolean;
  every?: true;
}

/** The op table: who serves each op, whether it streams, and whether every sampler of a pool gets it. */
export const OPS = {
  stats: { role: 'both', streams: false },
  load_base: { role: 'both', streams: false, every: true },
  check_constraint: { role: 'sampler', streams: false, every: true },
  ensure_adapter: { role: 'both', streams: false, every: true },
  check_adapter: { role: 'trainer', streams: false },
  save_adapter: { role: 'trainer', streams: false },
  drop_adapter: { role: 'both', streams: false, every: true },
  generate: { role: 'sampler', streams: true },
  cancel: { role: 'sampler', streams: false, every: true },
  forward: { role: 'both', streams: false },
  train_step: { role: 'trainer', streams: false },
  forward_backward: { role: 'trainer', streams: false },
  optim_step: { role: 'trainer', streams: false },
  save_state: { role: 'trainer', streams: false },
  load_state: { role: 'trainer', streams: false },
} as const satisfies Record<OpName, OpInfo>;
