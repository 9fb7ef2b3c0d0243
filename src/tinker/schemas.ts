/**
 * The Tinker REST API as the official `tinker` SDK 0.38 calls it (`/api/v1/...`): request schemas (extra fields
 * kept: the SDK sends `type` tags and fields we ignore), result shapes, the client configuration we announce, and
 * `tinker://` paths. The protobuf half of the wire is in proto.ts; the losses and their `loss_fn_config` defaults
 * are training's (src/training/tinker/losses.ts).
 */
import { type Static, Type } from '@sinclair/typebox';
import { boundSchema } from '../engine/bounds.ts';
import { AppError } from '../errors.ts';
import { LearningRate } from '../training/learning-rate.ts';
import type { ProtoDatum, ProtoForwardBackward, ProtoTensor } from './proto.ts';

const open = { additionalProperties: true } as const;
const Id = Type.String({ minLength: 1, maxLength: 512 });
const Int = Type.Integer({ minimum: 0, maximum: Number.MAX_SAFE_INTEGER });
/** The SDK's number for a training client's request: a re-send carries the same one (see futures.ts). */
const SeqId = Type.Optional(Type.Union([Int, Type.Null()]));

export const ClientConfigBody = Type.Object({ sdk_version: Type.Optional(Type.String({ maxLength: 64 })) }, open);
export type ClientConfigBody = Static<typeof ClientConfigBody>;

export const CreateSessionBody = Type.Object(
  {
    sdk_version: Type.String({ maxLength: 64 }),
    tags: Type.Optional(Type.Array(Type.String())),
    project_id: Type.Optional(Type.Union([Type.String(), Type.Null()])),
  },
  open,
);
export type CreateSessionBody = Static<typeof CreateSessionBody>;

export const SessionBody = Type.Object({ session_id: Id }, open);
export type SessionBody = Static<typeof SessionBody>;

export const LoraConfig = Type.Object(
  {
    rank: Type.Integer({ minimum: 1, maximum: 256 }),
    seed: Type.Optional(Type.Union([Type.Integer({ minimum: 0, maximum: 2 ** 32 - 1 }), Type.Null()])),
    train_mlp: Type.Optional(Type.Boolean()),
    train_attn: Type.Optional(Type.Boolean()),
    train_unembed: Type.Optional(Type.Boolean()),
  },
  open,
);

export const CreateModelBody = Type.Object(
  {
    session_id: Id,
    model_seq_id: Int,
    base_model: Type.String({ minLength: 1, maxLength: 256 }),
    lora_config: Type.Optional(Type.Union([LoraConfig, Type.Null()])),
  },
  open,
);
export type CreateModelBody = Static<typeof CreateModelBody>;

export const ModelIdBody = Type.Object({ model_id: Id }, open);
export type ModelIdBody = Static<typeof ModelIdBody>;

/**
 * Adam's hyper-parameters. SDKs up to 0.16 send only the fields a caller set (`AdamParams(learning_rate=…)` alone), so
 * each one left out takes the SDK's documented default (its `AdamParams`: β1 0.9, β2 0.95, ε 1e-12).
 */
export const AdamParamsBody = Type.Object(
  {
    learning_rate: LearningRate,
    beta1: Type.Number({ minimum: 0, exclusiveMaximum: 1, default: 0.9 }),
    beta2: Type.Number({ minimum: 0, exclusiveMaximum: 1, default: 0.95 }),
    eps: Type.Number({ exclusiveMinimum: 0, default: 1e-12 }),
    weight_decay: Type.Optional(Type.Number({ minimum: 0 })),
    grad_clip_norm: Type.Optional(Type.Number({ minimum: 0 })),
  },
  open,
);

export const OptimStepBody = Type.Object({ model_id: Id, seq_id: SeqId, adam_params: AdamParamsBody }, open);
export type OptimStepBody = Static<typeof OptimStepBody>;

const CheckpointName = Type.String({ pattern: '^[A-Za-z0-9._-]{1,128}$' });
const TEN_YEARS_SECONDS = 10 * 365 * 24 * 60 * 60;

export const SaveWeightsBody = Type.Object(
  {
    model_id: Id,
    seq_id: SeqId,
    path: Type.Optional(Type.Union([CheckpointName, Type.Null()])),
    sampling_session_seq_id: Type.Optional(Type.Union([Int, Type.Null()])),
  },
  open,
);
export type SaveWeightsBody = Static<typeof SaveWeightsBody>;

export const LoadWeightsBody = Type.Object(
  {
    model_id: Type.Optional(Type.Union([Id, Type.Null()])),
    seq_id: SeqId,
    session_id: Type.Optional(Type.Union([Id, Type.Null()])),
    model_seq_id: Type.Optional(Type.Union([Int, Type.Null()])),
    path: Type.String({ minLength: 1, maxLength: 1024 }),
    optimizer: Type.Boolean(),
  },
  open,
);
export type LoadWeightsBody = Static<typeof LoadWeightsBody>;

export const CreateSamplingSessionBody = Type.Object(
  {
    session_id: Id,
    base_model: Type.Optional(Type.Union([Type.String({ maxLength: 256 }), Type.Null()])),
    model_path: Type.Optional(Type.Union([Type.String({ maxLength: 1024 }), Type.Null()])),
  },
  open,
);
export type CreateSamplingSessionBody = Static<typeof CreateSamplingSessionBody>;

const TokenChunk = Type.Object({ tokens: Type.Array(Type.Integer(), { maxItems: 1_000_000 }) }, open);

export const SamplingParams = Type.Object(
  {
    max_tokens: Type.Optional(Type.Union([Type.Integer({ minimum: 1, maximum: 1_000_000 }), Type.Null()])),
    seed: Type.Optional(Type.Union([Type.Integer({ minimum: 0, maximum: 2 ** 53 }), Type.Null()])),
    stop: Type.Optional(
      Type.Union([Type.String(), Type.Array(Type.String()), Type.Array(Type.Integer()), Type.Null()]),
    ),
    temperature: Type.Optional(Type.Number(boundSchema('temperature'))),
    top_k: Type.Optional(Type.Integer(boundSchema('top_k'))),
    top_p: Type.Optional(Type.Number(boundSchema('top_p'))),
  },
  open,
);
export type SamplingParams = Static<typeof SamplingParams>;

export const SampleBody = Type.Object(
  {
    prompt: Type.Object({ chunks: Type.Array(TokenChunk, { maxItems: 10_000 }) }, open),
    sampling_params: SamplingParams,
    num_samples: Type.Optional(Type.Integer(boundSchema('n'))),
    sampling_session_id: Type.Optional(Type.Union([Id, Type.Null()])),
    base_model: Type.Optional(Type.Union([Type.String({ maxLength: 256 }), Type.Null()])),
    model_path: Type.Optional(Type.Union([Type.String({ maxLength: 1024 }), Type.Null()])),
    prompt_logprobs: Type.Optional(Type.Union([Type.Boolean(), Type.Null()])),
    /** Score only the last N prompt tokens (the SDK's `compute_logprobs(prompt, prompt_logprobs_last_n=N)`). */
    prompt_logprobs_last_n: Type.Optional(Type.Union([Type.Integer({ minimum: 1, maximum: 1_000_000 }), Type.Null()])),
    /** tinker 0.38: record each returned sequence under its `sequence_id`, for StableReinforce (provenance.ts). */
    record_stability_info: Type.Optional(Type.Union([Type.Boolean(), Type.Null()])),
  },
  open,
);
export type SampleBody = Static<typeof SampleBody>;

/** A tensor as older SDKs (0.18) send it in JSON: flat values, their dtype, and a shape we need not read. */
const TensorJson = Type.Object(
  {
    data: Type.Array(Type.Number(), { maxItems: 10_000_000 }),
    dtype: Type.Union([Type.Literal('int64'), Type.Literal('float32')]),
    shape: Type.Optional(Type.Union([Type.Array(Int, { maxItems: 8 }), Type.Null()])),
    sparse_crow_indices: Type.Optional(Type.Null()),
    sparse_col_indices: Type.Optional(Type.Null()),
  },
  open,
);
const ChunkJson = Type.Object(
  {
    type: Type.Optional(Type.String({ maxLength: 64 })),
    tokens: Type.Optional(Type.Array(Type.Integer(), { maxItems: 1_000_000 })),
  },
  open,
);
const DatumJson = Type.Object(
  {
    model_input: Type.Object({ chunks: Type.Array(ChunkJson, { maxItems: 10_000 }) }, open),
    loss_fn_inputs: Type.Record(Type.String({ maxLength: 128 }), TensorJson),
  },
  open,
);
const ForwardBackwardInputJson = Type.Object(
  {
    data: Type.Array(DatumJson, { maxItems: 100_000 }),
    loss_fn: Type.String({ maxLength: 128 }),
    loss_fn_config: Type.Optional(
      Type.Union([Type.Record(Type.String({ maxLength: 128 }), Type.Number()), Type.Null()]),
    ),
  },
  open,
);

/** `forward_backward` as SDKs before the protobuf wire send it (tinker 0.18, which ART 0.5.18's Tinker backends pin). */
export const ForwardBackwardJsonBody = Type.Object(
  { model_id: Id, seq_id: SeqId, forward_backward_input: ForwardBackwardInputJson },
  open,
);
export type ForwardBackwardJsonBody = Static<typeof ForwardBackwardJsonBody>;

/** `forward`: the same input on its own path (tinker 0.18; newer SDKs send `forward_only` in the protobuf). */
export const ForwardJsonBody = Type.Object(
  { model_id: Id, seq_id: SeqId, forward_input: ForwardBackwardInputJson },
  open,
);
export type ForwardJsonBody = Static<typeof ForwardJsonBody>;

/** A JSON forward/forward_backward as the request the protobuf wire decodes to; a non-text chunk is a 400. */
export function forwardBackwardFromJson(
  modelId: string,
  seqId: number | null | undefined,
  input: Static<typeof ForwardBackwardInputJson>,
  forwardOnly: boolean,
): ProtoForwardBackward {
  const data = input.data.map((datum, index): ProtoDatum => {
    const tokens: number[] = [];
    for (const chunk of datum.model_input.chunks) {
      if ((chunk.type ?? 'encoded_text') !== 'encoded_text' || !chunk.tokens) {
        throw new AppError(
          'bad_request',
          `data[${index}].model_input: only encoded_text chunks are supported (no images or audio)`,
        );
      }
      tokens.push(...chunk.tokens);
    }
    // Keys are the client's: a null-prototype object keeps `__proto__` an ordinary (unknown) name.
    const lossFnInputs = Object.create(null) as Record<string, ProtoTensor>;
    for (const [key, tensor] of Object.entries(datum.loss_fn_inputs))
      lossFnInputs[key] = { dtype: tensor.dtype, values: tensor.data };
    return { tokens, lossFnInputs };
  });
  return {
    model_id: modelId,
    seq_id: seqId ?? 0,
    loss_fn: input.loss_fn,
    loss_fn_config: { ...input.loss_fn_config },
    forward_only: forwardOnly,
    data,
  };
}

export const RetrieveFutureBody = Type.Object(
  { request_id: Id, allow_metadata_only: Type.Optional(Type.Boolean()) },
  open,
);
export type RetrieveFutureBody = Static<typeof RetrieveFutureBody>;

export const WeightsInfoBody = Type.Object({ tinker_path: Type.String({ minLength: 1, maxLength: 1024 }) }, open);
export type WeightsInfoBody = Static<typeof WeightsInfoBody>;

/** What every asynchronous call answers at once; the result is fetched with `retrieve_future`. */
export interface UntypedFuture {
  request_id: string;
  model_id?: string;
  /** Sampling only: one id per requested sample, in the order of the result's sequences. */
  sample_sequence_ids?: string[];
}

/**
 * The SDK's client feature flags. We announce API-key auth (no JWT exchange), uncompressed protobuf
 * forward_backward bodies sent one chunk after another (so gradients accumulate in one order: runs repeat exactly),
 * and per-request polling; every other flag keeps the SDK's own default.
 */
export const CLIENT_CONFIG = {
  pjwt_auth_enabled: false,
  credential_default_source: 'api_key',
  proto_compress_fwdbwd: false,
  parallel_fwdbwd_chunks: false,
  sample_use_retrieve_futures: false,
  custom_loss_server_side: false,
  sample_join_sampling_session: false,
  use_pyqwest_transport: false,
} as const;

export const CLIENT_DYNAMIC_CONFIG = { refresh_interval_sec: 300, sample_cancel_enabled: false } as const;

export type TinkerCheckpointKind = 'sampler' | 'training' | 'external';
const SEGMENT: Record<TinkerCheckpointKind, string> = {
  sampler: 'sampler_weights',
  training: 'weights',
  external: 'external_weights',
};

/** A checkpoint's id within its run: `<sampler_weights|weights|external_weights>/<name>`. */
export const checkpointId = (kind: TinkerCheckpointKind, name: string) => `${SEGMENT[kind]}/${name}`;

/** `tinker://<model id>/<checkpoint id>`; an unnamed checkpoint is named `step<N>`. */
export function tinkerPath(modelId: string, kind: TinkerCheckpointKind, name: string): string {
  return `tinker://${modelId}/${checkpointId(kind, name)}`;
}

export function parseTinkerPath(path: string): { modelId: string; kind: TinkerCheckpointKind; name: string } | null {
  const match = /^tinker:\/\/([^/]+)\/(sampler_weights|weights|external_weights)\/([^/]+)$/.exec(path);
  if (!match) return null;
  const kind = (Object.keys(SEGMENT) as TinkerCheckpointKind[]).find((candidate) => SEGMENT[candidate] === match[2])!;
  return { modelId: match[1], kind, name: match[3] };
}

export const stepName = (step: number) => `step${step}`;

/**
 * Where a signed checkpoint download lives: `<path>?expires=<unix seconds>&signature=<hex>`, valid this long. The SDK's
 * archive call (tinker 0.18–0.34 `get_checkpoint_archive_url`) is answered with a 302 to it and an `Expires` header.
 */
export const ARCHIVE_DOWNLOAD_ROUTE = '/api/v1/checkpoint_archives/:model_id/:step';
export const archiveDownloadPath = (modelId: string, step: number) =>
  `/api/v1/checkpoint_archives/${encodeURIComponent(modelId)}/${step}`;
export const ARCHIVE_URL_TTL_SECONDS = 15 * 60;

/**
 * Where an external-weights file lives (tinker 0.38's `get_external_weights_urls`, which `tinker checkpoint download`
 * fetches file by file): `<path>?expires=<unix seconds>&signature=<hex>`, signed like an archive.
 */
export const EXTERNAL_FILE_ROUTE = '/api/v1/external_weights/:model_id/:step/:file';
export const externalFilePath = (modelId: string, step: number, file: string) =>
  `/api/v1/external_weights/${encodeURIComponent(modelId)}/${step}/${encodeURIComponent(file)}`;

/** `save_weights_external`: the training client's weights as a Hugging Face PEFT adapter, under a name. */
export const SaveWeightsExternalBody = Type.Object(
  {
    model_id: Id,
    seq_id: SeqId,
    path: CheckpointName,
    ttl_seconds: Type.Optional(Type.Union([Type.Integer({ minimum: 3600, maximum: TEN_YEARS_SECONDS }), Type.Null()])),
    age_encryption_recipients: Type.Optional(Type.Union([Type.Array(Type.String(), { maxItems: 100 }), Type.Null()])),
  },
  open,
);
export type SaveWeightsExternalBody = Static<typeof SaveWeightsExternalBody>;

/** A checkpoint's TTL (`set_checkpoint_ttl_from_tinker_path`): 1 hour to 10 years, or null for none. */
export const CheckpointTtlBody = Type.Object(
  { ttl_seconds: Type.Union([Type.Integer({ minimum: 3600, maximum: TEN_YEARS_SECONDS }), Type.Null()]) },
  open,
);
export type CheckpointTtlBody = Static<typeof CheckpointTtlBody>;
