/**
 * The engine protocol's messages as TypeScript types, field for field as docs/engine-protocol.md
 * writes them (snake_case on purpose: these objects go on the wire unchanged). Requests omit `id`
 * and `op`; the client adds them.
 */

export type Dtype = 'float32' | 'bfloat16' | 'float16';

/** The unsolicited first frame of a started engine. */
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
}

/** The engine's own tables (engine/model.py, lora.py, wire.py, steps.py), as its ready frame announces them. */
export interface EngineSupport {
  /** config.json `model_type`s our own implementation runs. */
  model_types: string[];
  /** config.json `architectures` class names our own implementation runs. */
  architectures: string[];
  /** `rope_scaling` types our own implementation computes (`default`: none). */
  rope_types: string[];
  /** Modules an adapter on our own implementation may target (each base's own list: `LoadBaseReply.lora_targets`). */
  lora_targets: string[];
  losses: { train_step: string[]; forward_backward: string[] };
  dtypes: Dtype[];
  /** What the pinned `transformers` loads (engine/hf_model.py): it serves every base ours cannot. Absent without it. */
  transformers?: TransformersSupport;
}

export interface TransformersSupport {
  version: string;
  /** model_type -> the class AutoModelForCausalLM builds for it. */
  causal_lm: Record<string, string>;
  rope_types: string[];
  /** config.json `layer_types` our KV cache holds (recurrent linear-attention layers are not among them). */
  attention_layer_types: string[];
}

/** Which implementation runs a base: our own model code, or transformers' modeling code on our engine. */
export type Implementation = 'ours' | 'transformers';

export interface EngineLimits {
  max_model_len: number | null;
  max_num_seqs: number;
  max_num_batched_tokens: number;
  kv_cache_memory_bytes: number | null;
  threads: number;
}

/**
 * Codes of the engine's error replies; `unauthorized` answers a TCP connection's wrong secret (then it closes).
 * `non_finite`: adapter weights out of engine/bounds.json (load, save) or a request's non-finite logits (generate);
 * `diverged`: a training step's loss, gradient or new weights were not finite, and the adapter is left as it was.
 */
export type ReplyErrorCode =
  | 'bad_request'
  | 'not_found'
  | 'non_finite'
  | 'diverged'
  | 'cancelled'
  | 'internal'
  | 'unauthorized';

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
  /** Where the engine's memory goes (docs/engine-protocol.md `stats`); the device_* figures on CUDA only. */
  memory: EngineMemory;
}

export interface EngineMemory {
  weights_bytes: number;
  kv_cache_bytes: number;
  prefix_cache_bytes: number;
  adapters_bytes: number;
  device_allocated_bytes?: number;
  device_peak_bytes?: number;
  device_reserved_bytes?: number;
  device_free_bytes?: number;
  device_total_bytes?: number;
}

export interface LoadBaseRequest {
  base: string;
  path: string;
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
  /** The projections an adapter on this base may target (PEFT's short names) and their kind; absent from vLLM's. */
  lora_targets?: Record<string, 'attention' | 'mlp'>;
}

export interface AdapterInit {
  rank: number;
  alpha: number;
  target_modules: string[];
  seed: number;
}

export interface EnsureAdapterRequest {
  adapter: string;
  base: string;
  path?: string;
  init?: AdapterInit;
}

export interface EnsureAdapterReply {
  loaded: boolean;
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

/** vLLM's structured_outputs kinds, which the engine's constraints can be (docs/engine-protocol.md). */
export const CONSTRAINT_KINDS = ['json', 'json_object', 'regex', 'choice', 'grammar', 'structural_tag'] as const;
export type ConstraintKind = (typeof CONSTRAINT_KINDS)[number];

/** One structure of a structural tag: after `begin` (which starts with one of the triggers), JSON of `schema`, then `end`. */
export interface StructuralTagStructure {
  begin: string;
  schema: unknown;
  end: string;
}

/**
 * A constraint's specification, as vLLM's `structured_outputs` states it: exactly one kind, and the JSON options.
 * The engine compiles it (llguidance) against the base's own tokenizer; docs/structured-outputs.md maps it onto vLLM.
 */
export interface ConstraintSpec {
  /** A JSON schema; layout options travel inside it as llguidance's `x-guidance`. */
  json?: unknown;
  json_object?: true;
  regex?: string;
  choice?: string[];
  /** A Lark grammar (llguidance's dialect; a GBNF grammar is converted, as vLLM's guidance backend does). */
  grammar?: string;
  structural_tag?: { triggers: string[]; structures: StructuralTagStructure[] };
  disable_any_whitespace?: boolean;
  disable_additional_properties?: boolean;
}

export interface CheckConstraintRequest {
  base: string;
  constraint: ConstraintSpec;
}

export interface CheckConstraintReply {
  ok: true;
}

/**
 * What a generate request's sampling fields mean when its caller leaves them out (vLLM's defaults). The client
 * fills them in, so the engine gets every field explicitly (it has no defaults of its own).
 */
export const GENERATE_DEFAULTS = {
  n: 1,
  min_tokens: 0,
  ignore_eos: false,
  stop_token_ids: [],
  temperature: 1.0,
  top_p: 1.0,
  top_k: -1,
  min_p: 0.0,
  presence_penalty: 0.0,
  frequency_penalty: 0.0,
  repetition_penalty: 1.0,
  logit_bias: {},
  allowed_token_ids: null,
  bad_words_ids: [],
  seed: null,
  logprobs: null,
  prompt_logprobs: null,
} as const satisfies Partial<GenerateRequest>;

export interface GenerateRequest {
  base: string;
  adapter: string | null;
  adapter_path?: string;
  prompt: number[];
  n?: number;
  max_tokens: number;
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
  logit_bias?: Record<string, number>;
  allowed_token_ids?: number[] | null;
  bad_words_ids?: number[][];
  seed?: number | null;
  logprobs?: number | null;
  prompt_logprobs?: number | null;
  /** Decode only what this specification allows (the engine compiles it, or reuses what check_constraint compiled). */
  constraint?: ConstraintSpec | null;
}

/** `[token id, logprob]`. */
export type TopLogprob = [number, number];

export interface PromptLogprobsEvent {
  type: 'prompt';
  /** One entry per prompt token; the first is null. */
  prompt_logprobs: ({ logprob: number; top: TopLogprob[] } | null)[];
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

/** The final reply of a generate request, tagged by the client so the stream is one union. */
export interface GenerateDoneEvent {
  type: 'done';
  prompt_tokens: number;
  cached_tokens: number;
}

export type GenerateEvent = PromptLogprobsEvent | TokensEvent | FinishEvent | GenerateDoneEvent;

export interface CancelReply {
  cancelled: boolean;
}

export interface ForwardRequest {
  base: string;
  adapter: string | null;
  adapter_path?: string;
  /** Without segment_ids a row is one sequence; the client says so explicitly (all zeros). */
  rows: { tokens: number[]; segment_ids?: number[] }[];
}

export interface ForwardReply {
  logprobs: (number | null)[][];
}

export interface TrainRow {
  tokens: number[];
  segment_ids: number[];
  mask: number[];
  weights: number[];
  advantages?: number[];
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

export interface OptimizerConfig {
  learning_rate: number;
  betas: [number, number];
  weight_decay: number;
  max_grad_norm: number;
}

export interface TrainStepRequest {
  base: string;
  adapter: string;
  loss: 'rl' | 'sft';
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

/** The losses of `forward_backward`, as Tinker names them. */
export type StepLoss = 'cross_entropy' | 'importance_sampling' | 'ppo' | 'cispo' | 'dro' | 'gspo';

/**
 * Every hyper-parameter the loss uses, all present (the engine has no defaults): none for `cross_entropy` and
 * `importance_sampling`; `clip_low_threshold`, `clip_high_threshold` for `ppo`, `cispo` and `gspo`; `beta` for `dro`.
 */
export type StepLossConfig = Record<string, number>;

/** One datum: `tokens[t]` is model input whose next-token distribution scores `target_tokens[t]`; all arrays length T. */
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

export interface ForwardBackwardRequest {
  base: string;
  /** Null only with `backward: false` (the base model). */
  adapter: string | null;
  loss: StepLoss;
  loss_config: StepLossConfig;
  /** False: forward only. True: the loss's gradient is added to the adapter's until `optim_step`. */
  backward: boolean;
  rows: StepRow[];
}

export interface ForwardBackwardReply {
  outputs: { logprobs: number[]; elementwise_loss: number[] }[];
  /** The sum over rows and tokens (Tinker's semantics: sums, not means). */
  loss: number;
  metrics: Record<string, number>;
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
